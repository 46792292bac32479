//! How RDD, shuffle and broadcast ids are divided among client sessions.
//!
//! Each session owns one [`IdRange`]: `IDS_PER_SESSION` consecutive RDD and shuffle ids
//! and `BROADCASTS_PER_SESSION` consecutive broadcast ids, at the same index. The
//! driver hands ranges out; executors and workers learn from an id alone which session
//! it belongs to (and so which session's shuffle key guards it).
//!
//! Invariants: every range lies within `u32` (RDD ids) and `u64` (broadcast ids) — the
//! highest index is [`IdRange::MAX_INDEX`]; ranges of different indexes never overlap;
//! index 0 is local mode's (a driver gives sessions indexes from 1).

use std::ops::Range;

/// RDD and shuffle ids per session.
pub const IDS_PER_SESSION: u32 = 1 << 20;
/// Broadcast ids per session.
pub const BROADCASTS_PER_SESSION: u64 = 1 << 40;

/// One session's share of the id spaces, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdRange(u32);

impl IdRange {
    /// The highest index whose RDD ids all fit in `u32`.
    pub const MAX_INDEX: u32 = u32::MAX / IDS_PER_SESSION - 1;

    /// The range at `index`, if it fits.
    pub fn new(index: u32) -> Option<IdRange> {
        (index <= Self::MAX_INDEX).then_some(IdRange(index))
    }

    /// The range that RDD or shuffle id `id` belongs to.
    pub fn of_id(id: u32) -> IdRange {
        IdRange(id / IDS_PER_SESSION)
    }

    pub fn index(self) -> u32 {
        self.0
    }

    /// Its RDD and shuffle ids.
    pub fn ids(self) -> Range<u32> {
        self.0 * IDS_PER_SESSION..(self.0 + 1) * IDS_PER_SESSION
    }

    /// Its broadcast ids.
    pub fn broadcasts(self) -> Range<u64> {
        u64::from(self.0) * BROADCASTS_PER_SESSION..u64::from(self.0 + 1) * BROADCASTS_PER_SESSION
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_tile_the_id_spaces_and_the_last_one_fits() {
        let last = IdRange::new(IdRange::MAX_INDEX).unwrap();
        assert_eq!(last.ids().end, u32::MAX - IDS_PER_SESSION + 1);
        assert!(IdRange::new(IdRange::MAX_INDEX + 1).is_none());
        let r = IdRange::new(3).unwrap();
        assert_eq!(r.ids(), 3 << 20..4 << 20);
        assert_eq!(r.broadcasts(), 3 << 40..4 << 40);
        assert_eq!(IdRange::of_id(r.ids().start), r);
        assert_eq!(IdRange::of_id(r.ids().end - 1), r);
        assert_eq!(IdRange::of_id(r.ids().end).index(), 4);
    }
}
