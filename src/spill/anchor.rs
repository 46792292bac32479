//! Prefetch hints into a `hashbrown::HashTable`: where its entries and control bytes
//! lie, so a lookup's cache lines can be asked for before the lookup (the spilling
//! aggregator's staged inserts, the hash join's probes).
//!
//! Invariant: an [`Anchor`] only yields hint addresses; nothing here dereferences them,
//! so a stale or wrong anchor costs speed, never a value.

use hashbrown::HashTable;

/// Where a hashbrown table's entries end and its control bytes begin, and its bucket
/// mask: hashbrown stores bucket `i`'s entry at `ctrl - (i + 1) * size_of::<T>()` and its
/// control byte at `ctrl + i`, and starts the probe for a hash at bucket `hash & mask`.
/// `ctrl == 0`: not known (an empty or new table).
#[derive(Clone, Copy, Default)]
pub(crate) struct Anchor {
    pub(crate) ctrl: usize,
    pub(crate) mask: usize,
}

impl Anchor {
    /// The anchor of a table of `buckets` buckets whose bucket `index` holds the entry at
    /// address `entry`.
    pub(crate) fn at<T>(entry: usize, index: usize, buckets: usize) -> Anchor {
        Anchor {
            ctrl: entry.wrapping_add(index.wrapping_add(1).wrapping_mul(std::mem::size_of::<T>())),
            mask: buckets.wrapping_sub(1),
        }
    }

    /// The anchor of `table`, from any entry it holds.
    pub(crate) fn of<T>(table: &HashTable<T>) -> Anchor {
        match table.iter_buckets().next() {
            Some(i) => match table.get_bucket(i) {
                Some(e) => Anchor::at::<T>(e as *const T as usize, i, table.num_buckets()),
                None => Anchor::default(),
            },
            None => Anchor::default(),
        }
    }

    /// Asks the cache for the control group and the first entries a lookup of `hash`
    /// reads. Integer arithmetic only: the addresses are hints and never dereferenced.
    #[inline]
    pub(crate) fn prefetch<T>(self, hash: u64) {
        if self.ctrl == 0 {
            return;
        }
        let i = hash as usize & self.mask;
        let ctrl = self.ctrl.wrapping_add(i);
        let entry = self
            .ctrl
            .wrapping_sub(i.wrapping_add(1).wrapping_mul(std::mem::size_of::<T>()));
        crate::prefetch::line(ctrl);
        crate::prefetch::line(entry);
        // The probe goes on to buckets i + 1, i + 2, ...: lower addresses.
        crate::prefetch::line(entry.wrapping_sub(64));
    }
}
