//! `Debug` for the messages that carry a credential, written by hand so that no log line
//! or panic message ever shows one (prost's derived `Debug` would print every byte):
//! a barrier task's stage key appears as its length only.

use std::fmt;

use crate::v1::BarrierTask;

impl fmt::Debug for BarrierTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierTask")
            .field("world", &self.world)
            .field("rank", &self.rank)
            .field("key", &format_args!("<{} bytes, redacted>", self.key.len()))
            .field("stage_attempt", &self.stage_attempt)
            .field("one_host", &self.one_host)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_barrier_task_never_shows_its_key() {
        let t = crate::BarrierTask {
            world: 2,
            rank: 1,
            key: vec![0xAB; 32],
            stage_attempt: 3,
            one_host: true,
        };
        let shown = format!("{t:?}");
        assert!(!shown.contains("171"), "{shown}");
        assert!(shown.contains("<32 bytes, redacted>"), "{shown}");
    }
}
