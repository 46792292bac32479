//! `Debug` for the messages that carry a credential, written by hand so that no log line
//! or panic message ever shows one (prost's derived `Debug` would print every byte):
//! a barrier task's stage key, a pushed replica's session key and a raw push's executor
//! secret appear as their lengths only (and a replica piece's data as its length).

use std::fmt;

use crate::v1::{BarrierTask, CachedBlockPiece, MapOutputPiece, RawPushHeader};

/// A credential of `.0` bytes, shown as its length only.
struct Redacted(usize);

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes, redacted>", self.0)
    }
}

impl fmt::Debug for RawPushHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawPushHeader")
            .field("executor_secret", &Redacted(self.executor_secret.len()))
            .field("shuffle_id", &self.shuffle_id)
            .field("map_partition", &self.map_partition)
            .field("session_key", &Redacted(self.session_key.len()))
            .field("file_len", &self.file_len)
            .finish()
    }
}

impl fmt::Debug for MapOutputPiece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapOutputPiece")
            .field("shuffle_id", &self.shuffle_id)
            .field("map_partition", &self.map_partition)
            .field("session_key", &Redacted(self.session_key.len()))
            .field("file_len", &self.file_len)
            .field("crc32", &self.crc32)
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("last", &self.last)
            .finish()
    }
}

impl fmt::Debug for CachedBlockPiece {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedBlockPiece")
            .field("rdd_id", &self.rdd_id)
            .field("partition", &self.partition)
            .field("session_key", &Redacted(self.session_key.len()))
            .field("file_len", &self.file_len)
            .field("crc32", &self.crc32)
            .field("data", &format_args!("<{} bytes>", self.data.len()))
            .field("last", &self.last)
            .finish()
    }
}

impl fmt::Debug for BarrierTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BarrierTask")
            .field("world", &self.world)
            .field("rank", &self.rank)
            .field("key", &Redacted(self.key.len()))
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

    #[test]
    fn a_raw_push_header_never_shows_its_secret_or_key() {
        let h = crate::RawPushHeader {
            executor_secret: "s3cret-executor".into(),
            session_key: "k3y-of-the-session".into(),
            file_len: 9,
            ..Default::default()
        };
        let shown = format!("{h:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("k3y"),
            "{shown}"
        );
        assert!(shown.contains("<15 bytes, redacted>"), "{shown}");
    }

    #[test]
    fn a_replica_piece_never_shows_its_session_key() {
        let p = crate::MapOutputPiece {
            session_key: "k3y-that-must-not-show".into(),
            data: vec![7; 10].into(),
            ..Default::default()
        };
        let shown = format!("{p:?}");
        assert!(!shown.contains("k3y"), "{shown}");
        assert!(
            shown.contains("<22 bytes, redacted>") && shown.contains("<10 bytes>"),
            "{shown}"
        );
        let b = crate::CachedBlockPiece {
            session_key: "k3y-that-must-not-show".into(),
            data: vec![7; 10].into(),
            ..Default::default()
        };
        let shown = format!("{b:?}");
        assert!(!shown.contains("k3y"), "{shown}");
        assert!(
            shown.contains("<22 bytes, redacted>") && shown.contains("<10 bytes>"),
            "{shown}"
        );
    }
}
