//! Execution memory accounting: a [`MemoryPool`] with a byte limit shared by many
//! consumers, each holding an RAII [`Reservation`] (modelled on DataFusion's memory pool
//! and Spark's execution memory manager).
//!
//! Invariants:
//! * `pool.used()` is the sum of the sizes of all live reservations and never exceeds
//!   `pool.limit()` (growth is a compare-and-swap on `used`).
//! * A reservation's bytes go back to the pool when it shrinks, frees, or drops; a
//!   dropped reservation is also unregistered.
//! * Fair share: with `n` reservations holding memory (counting the requester even if it
//!   holds nothing yet), one reservation may hold at most `limit / n` bytes. This is
//!   Spark's `1/N` cap. Spark also promises a `1/2N` minimum, which it gets by making tasks
//!   wait. Nothing here blocks. Any consumer at or below `limit / (2n)` is within the
//!   `1/N` cap anyway, so the fairness rule never refuses it. It can be refused only when
//!   the pool is full. In every refusal the caller gets [`MemoryExhausted`] and is expected
//!   to spill, not to wait.
//! * The pool does not allocate anything. It only counts bytes that consumers say they use.

pub use ember_proto::units::parse_memory_size;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// A byte budget shared by all reservations created from it.
#[derive(Debug)]
pub struct MemoryPool {
    limit: u64,
    used: AtomicU64,
    /// Live reservations (registered consumers).
    consumers: AtomicUsize,
    /// Live reservations with a non-zero size.
    holders: AtomicUsize,
}

impl MemoryPool {
    /// A pool that lets its reservations hold at most `limit_bytes` bytes in total.
    pub fn new(limit_bytes: u64) -> Arc<MemoryPool> {
        Arc::new(MemoryPool {
            limit: limit_bytes,
            used: AtomicU64::new(0),
            consumers: AtomicUsize::new(0),
            holders: AtomicUsize::new(0),
        })
    }

    /// The pool's limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes currently held by all reservations.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// Number of live reservations.
    pub fn consumers(&self) -> usize {
        self.consumers.load(Ordering::Acquire)
    }

    /// Registers a consumer and returns its empty reservation. `consumer` names it in
    /// errors and logs, e.g. `"ExternalAggregator[stage 3 partition 7]"`.
    pub fn reservation(self: &Arc<Self>, consumer: &str) -> Reservation {
        self.consumers.fetch_add(1, Ordering::AcqRel);
        Reservation {
            pool: Arc::clone(self),
            size: 0,
            consumer: consumer.into(),
        }
    }
}

/// The pool refused a reservation's growth, either because the pool is full or because the
/// consumer is over its fair share. The caller should spill and free memory.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "memory exhausted: {consumer} asked for {requested} more bytes but the pool has \
     {used} of {limit} bytes in use or the consumer is over its fair share"
)]
pub struct MemoryExhausted {
    /// Bytes the consumer asked to add.
    pub requested: u64,
    /// Bytes held by the whole pool when it refused.
    pub used: u64,
    /// The pool's limit.
    pub limit: u64,
    /// The refused consumer's name.
    pub consumer: String,
}

/// Bytes one consumer holds in a [`MemoryPool`]. The bytes go back to the pool on drop.
#[derive(Debug)]
pub struct Reservation {
    pool: Arc<MemoryPool>,
    size: u64,
    consumer: Box<str>,
}

impl Reservation {
    /// Bytes held by this reservation.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The consumer name given at registration.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The pool this reservation draws from.
    pub fn pool(&self) -> &Arc<MemoryPool> {
        &self.pool
    }

    /// Grows by `bytes`. Refused (leaving the size unchanged) if the pool would go over its
    /// limit, or if this consumer would hold more than `limit / n`, where `n` is the number
    /// of reservations holding memory, counting this one (see the module doc).
    pub fn try_grow(&mut self, bytes: u64) -> Result<(), MemoryExhausted> {
        if bytes == 0 {
            return Ok(());
        }
        let pool = &*self.pool;
        let new_size = self.size.saturating_add(bytes);
        let holders = pool.holders.load(Ordering::Acquire);
        let n = (holders + usize::from(self.size == 0)).max(1) as u64;
        if new_size > pool.limit / n {
            return Err(self.exhausted(bytes, pool.used()));
        }
        let mut cur = pool.used.load(Ordering::Acquire);
        loop {
            let next = match cur.checked_add(bytes) {
                Some(next) if next <= pool.limit => next,
                _ => return Err(self.exhausted(bytes, cur)),
            };
            match pool
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        if self.size == 0 {
            pool.holders.fetch_add(1, Ordering::AcqRel);
        }
        self.size = new_size;
        Ok(())
    }

    /// Gives back `bytes` (at most the current size; larger values free everything).
    pub fn shrink(&mut self, bytes: u64) {
        let bytes = bytes.min(self.size);
        if bytes == 0 {
            return;
        }
        self.pool.used.fetch_sub(bytes, Ordering::AcqRel);
        self.size -= bytes;
        if self.size == 0 {
            self.pool.holders.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Gives back everything and returns how many bytes were freed.
    pub fn free(&mut self) -> u64 {
        let freed = self.size;
        self.shrink(freed);
        freed
    }

    /// Grows or shrinks to exactly `new_size`. Growth follows the rules of [`try_grow`](Self::try_grow).
    pub fn resize(&mut self, new_size: u64) -> Result<(), MemoryExhausted> {
        if new_size > self.size {
            self.try_grow(new_size - self.size)
        } else {
            self.shrink(self.size - new_size);
            Ok(())
        }
    }

    fn exhausted(&self, requested: u64, used: u64) -> MemoryExhausted {
        MemoryExhausted {
            requested,
            used,
            limit: self.pool.limit,
            consumer: self.consumer.to_string(),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.free();
        self.pool.consumers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grow_shrink_free_and_drop_return_bytes() {
        let pool = MemoryPool::new(1000);
        let mut r = pool.reservation("a");
        assert_eq!(pool.consumers(), 1);
        r.try_grow(600).unwrap();
        assert_eq!((r.size(), pool.used()), (600, 600));
        r.shrink(100);
        assert_eq!((r.size(), pool.used()), (500, 500));
        r.resize(800).unwrap();
        assert_eq!(pool.used(), 800);
        r.resize(300).unwrap();
        assert_eq!(pool.used(), 300);
        assert_eq!(r.free(), 300);
        assert_eq!(pool.used(), 0);
        r.try_grow(50).unwrap();
        r.shrink(10_000); // saturates
        assert_eq!((r.size(), pool.used()), (0, 0));
        r.try_grow(70).unwrap();
        drop(r);
        assert_eq!((pool.used(), pool.consumers()), (0, 0));
    }

    #[test]
    fn limit_is_enforced() {
        let pool = MemoryPool::new(1000);
        let mut r = pool.reservation("a");
        r.try_grow(1000).unwrap();
        let e = r.try_grow(1).unwrap_err();
        assert_eq!((e.requested, e.used, e.limit), (1, 1000, 1000));
        assert_eq!(e.consumer, "a");
        assert!(e.to_string().contains("memory exhausted: a asked for 1"));
        assert_eq!(r.size(), 1000);
        assert!(r.resize(1001).is_err());
        assert!(r.try_grow(u64::MAX).is_err());
        assert_eq!(pool.used(), 1000);
    }

    #[test]
    fn fair_share_caps_each_holder() {
        let pool = MemoryPool::new(1000);
        let mut a = pool.reservation("a");
        let mut b = pool.reservation("b");
        let c = pool.reservation("idle"); // holds nothing: does not count
        a.try_grow(400).unwrap();
        // b is the second holder: its share is 1000 / 2.
        assert!(b.try_grow(501).is_err());
        b.try_grow(500).unwrap();
        // a alone would be allowed 1000, but now shares with b.
        assert!(a.try_grow(101).is_err());
        a.try_grow(100).unwrap();
        assert_eq!(pool.used(), 1000);
        // Once b frees, a may take the whole pool.
        drop(b);
        a.try_grow(500).unwrap();
        assert_eq!(a.size(), 1000);
        assert_eq!(pool.consumers(), 2);
        drop(c);
    }

    #[test]
    fn consumer_below_half_share_is_refused_only_when_pool_is_full() {
        let pool = MemoryPool::new(1200);
        let mut a = pool.reservation("a");
        let mut b = pool.reservation("b");
        let mut c = pool.reservation("c");
        a.try_grow(400).unwrap();
        b.try_grow(400).unwrap();
        c.try_grow(200).unwrap(); // n = 3, share 400, half share 200
        assert_eq!(pool.used(), 1000);
        c.try_grow(200).unwrap();
        assert!(c.try_grow(1).is_err()); // at the 1/N cap and the pool is full
    }

    #[test]
    fn concurrent_growth_never_exceeds_limit() {
        let pool = MemoryPool::new(10_000);
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let pool = Arc::clone(&pool);
                std::thread::spawn(move || {
                    let mut r = pool.reservation(&format!("t{i}"));
                    for _ in 0..2000 {
                        if r.try_grow(7).is_err() {
                            r.shrink(50);
                        }
                        assert!(pool.used() <= pool.limit());
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(pool.used(), 0);
        assert_eq!(pool.consumers(), 0);
    }
}
