//! Which stage plans a receiver holds, as its sender tracks them: the driver for each
//! executor registration, and an executor for each of its workers. A plan is sent
//! with the first task of its stage that goes to that receiver; later tasks name it by
//! id (`TaskDescription.plan_id`).
//!
//! Invariants: at most [`MAX_HELD_PLANS`] plans and [`MAX_HELD_PLAN_BYTES`] bytes are
//! held (the newest plan always, whatever its size); when a new plan needs room, the
//! oldest are forgotten first, and the sender tells the receiver to drop them before
//! the new plan arrives, on the same ordered channel, so both sides agree on what is
//! held. The receiver also enforces a bound itself ([`HeldPlans::receiver`], twice the
//! sender's, so a plan's size counted slightly differently on the two sides never makes
//! it drop what the sender thinks it holds), so a sender that never says "forget"
//! cannot make it hold more.

use std::collections::{HashSet, VecDeque};

use crate::limits::{MAX_HELD_PLANS, MAX_HELD_PLAN_BYTES};

/// Plan ids in the order they were sent, with their sizes.
#[derive(Debug)]
pub struct HeldPlans {
    order: VecDeque<(u64, usize)>,
    ids: HashSet<u64>,
    bytes: usize,
    max_plans: usize,
    max_bytes: usize,
}

impl Default for HeldPlans {
    /// The sender's bookkeeping: [`MAX_HELD_PLANS`], [`MAX_HELD_PLAN_BYTES`].
    fn default() -> Self {
        Self::bounded(MAX_HELD_PLANS, MAX_HELD_PLAN_BYTES)
    }
}

impl HeldPlans {
    fn bounded(max_plans: usize, max_bytes: usize) -> Self {
        HeldPlans {
            order: VecDeque::new(),
            ids: HashSet::new(),
            bytes: 0,
            max_plans,
            max_bytes,
        }
    }

    /// The receiver's own bound: twice the sender's.
    pub fn receiver() -> Self {
        Self::bounded(2 * MAX_HELD_PLANS, 2 * MAX_HELD_PLAN_BYTES)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.ids.contains(&id)
    }

    /// Holds plan `id` of `size` bytes (already held: nothing changes); returns the ids
    /// forgotten to make room, oldest first.
    pub fn hold(&mut self, id: u64, size: usize) -> Vec<u64> {
        if self.ids.contains(&id) {
            return Vec::new();
        }
        let mut forgotten = Vec::new();
        while !self.order.is_empty()
            && (self.order.len() >= self.max_plans
                || self.bytes.saturating_add(size) > self.max_bytes)
        {
            if let Some((old, old_size)) = self.order.pop_front() {
                self.ids.remove(&old);
                self.bytes -= old_size;
                forgotten.push(old);
            }
        }
        self.order.push_back((id, size));
        self.ids.insert(id);
        self.bytes += size;
        forgotten
    }

    /// Drops `id` (the sender said to forget it); false if it was not held.
    pub fn forget(&mut self, id: u64) -> bool {
        if !self.ids.remove(&id) {
            return false;
        }
        if let Some(i) = self.order.iter().position(|(p, _)| *p == id) {
            if let Some((_, size)) = self.order.remove(i) {
                self.bytes -= size;
            }
        }
        true
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_plans_make_room_by_count_and_by_bytes() {
        let mut held = HeldPlans::default();
        for id in 0..MAX_HELD_PLANS as u64 {
            assert!(held.hold(id, 10).is_empty());
        }
        assert!(
            held.hold(3, 10).is_empty(),
            "held already: nothing forgotten"
        );
        assert_eq!(held.hold(1000, 10), vec![0]);
        assert!(!held.contains(0) && held.contains(1) && held.contains(1000));
        assert_eq!(held.len(), MAX_HELD_PLANS);
        // A plan of nearly the whole budget pushes out all but what still fits.
        let big = MAX_HELD_PLAN_BYTES - 25;
        let gone = held.hold(2000, big);
        assert_eq!(
            gone.len(),
            MAX_HELD_PLANS - 2,
            "two plans of 10 bytes still fit"
        );
        assert_eq!(gone[0], 1, "oldest first");
        assert!(held.contains(63) && held.contains(1000) && held.contains(2000));
        // Bigger than the budget alone: everything else goes, it is held anyway.
        let gone = held.hold(3000, MAX_HELD_PLAN_BYTES + 1);
        assert_eq!(gone, vec![63, 1000, 2000]);
        assert_eq!(held.len(), 1);
        assert!(held.forget(3000) && !held.forget(3000) && held.is_empty());
        assert!(held.hold(4000, 1).is_empty());
        // The receiver holds twice as many before it drops any on its own.
        let mut receiver = HeldPlans::receiver();
        for id in 0..2 * MAX_HELD_PLANS as u64 {
            assert!(receiver.hold(id, 10).is_empty());
        }
        assert_eq!(receiver.hold(9999, 10), vec![0]);
    }
}
