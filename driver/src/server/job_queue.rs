//! A client session's waiting jobs: a job submitted while its session (or the driver)
//! is at its running-jobs bound waits here, and starts as running jobs end.
//!
//! Invariants:
//! - At most `capacity` jobs wait (`--max-queued-jobs-per-session`): a push past it is
//!   handed back to be refused, never kept.
//! - Jobs leave in the order they came (FIFO). This is the one place that decides which
//!   waiting job of a session goes next, so a fair scheduler (Spark's FAIR pools and
//!   weights) can later order the waiting work here without touching submission.
//! - Across sessions, a freed running-job slot goes to the oldest waiting job (lowest
//!   submission number) among the sessions under their own running-jobs bound: one
//!   driver-wide FIFO, so no session that keeps its queue full can starve another's
//!   job, whichever session's job ended ([`oldest_startable`]). A later fair scheduler
//!   replaces this order.

use std::collections::VecDeque;

/// One session's waiting jobs, in the order they start.
pub(crate) struct WaitingJobs<T> {
    jobs: VecDeque<T>,
    capacity: usize,
}

impl<T> WaitingJobs<T> {
    /// An empty queue holding at most `capacity` jobs.
    pub(crate) fn new(capacity: usize) -> Self {
        WaitingJobs {
            jobs: VecDeque::new(),
            capacity,
        }
    }

    /// Jobs waiting.
    pub(crate) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether another job may wait.
    pub(crate) fn has_room(&self) -> bool {
        self.jobs.len() < self.capacity
    }

    /// Queues `job` last; hands it back if the queue is full.
    pub(crate) fn push(&mut self, job: T) -> Result<(), T> {
        if !self.has_room() {
            return Err(job);
        }
        self.jobs.push_back(job);
        Ok(())
    }

    /// The job that starts next, left on the queue.
    pub(crate) fn front(&self) -> Option<&T> {
        self.jobs.front()
    }

    /// The job to start next, taken off the queue.
    pub(crate) fn next(&mut self) -> Option<T> {
        let job = self.jobs.pop_front();
        if self.jobs.is_empty() {
            // Give the memory back: a burst of waiting jobs leaves no large buffer.
            self.jobs = VecDeque::new();
        }
        job
    }

    /// Takes out the waiting jobs `gone` selects (their clients left), keeping the
    /// others' order.
    pub(crate) fn take_where(&mut self, gone: impl Fn(&T) -> bool) -> Vec<T> {
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(self.jobs.len());
        for job in self.jobs.drain(..) {
            if gone(&job) {
                out.push(job);
            } else {
                keep.push_back(job);
            }
        }
        self.jobs = keep;
        out
    }

    /// Every waiting job, in order, leaving the queue empty (the session ended).
    pub(crate) fn take_all(&mut self) -> VecDeque<T> {
        std::mem::take(&mut self.jobs)
    }
}

/// Of `queues` (each a key and whether its session is under its own running-jobs
/// bound, with its waiting jobs), the key of the one whose next job came first by
/// `order` (its submission number): the queue a freed driver-wide slot goes to.
pub(crate) fn oldest_startable<'a, K: Copy, T: 'a>(
    queues: impl IntoIterator<Item = (K, bool, &'a WaitingJobs<T>)>,
    order: impl Fn(&T) -> u64,
) -> Option<K> {
    queues
        .into_iter()
        .filter(|(_, under_bound, _)| *under_bound)
        .filter_map(|(key, _, q)| q.front().map(|job| (order(job), key)))
        .min_by_key(|(n, _)| *n)
        .map(|(_, key)| key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_leave_in_submission_order_and_a_full_queue_hands_the_job_back() {
        let mut q = WaitingJobs::new(2);
        assert_eq!(q.push(1), Ok(()));
        assert_eq!(q.push(2), Ok(()));
        assert_eq!(q.push(3), Err(3));
        assert_eq!(q.len(), 2);
        assert_eq!(q.next(), Some(1));
        assert!(q.has_room());
        assert_eq!(q.push(4), Ok(()));
        assert_eq!(q.take_where(|j| *j == 2), vec![2]);
        assert_eq!(q.push(5), Ok(()));
        assert_eq!(q.take_all(), VecDeque::from([4, 5]));
        assert_eq!(q.next(), None);
    }
}
