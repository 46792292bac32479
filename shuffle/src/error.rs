//! The shuffle format's errors. Each is one of the job library's errors
//! (`ember::EmberError` converts them variant by variant, with the same text), so a
//! failed read stays a typed fetch failure all the way to the scheduler.

use std::path::PathBuf;

/// What reading or writing shuffle files can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ShuffleError {
    /// Reading or writing a file failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A shuffle block could not be read: the scheduler reruns the map task.
    #[error(
        "fetch failed: shuffle {shuffle_id} map {map_partition} reduce {reduce_partition} \
         on executor {executor_id}: {message}"
    )]
    FetchFailed {
        executor_id: String,
        shuffle_id: u32,
        map_partition: u32,
        reduce_partition: u32,
        message: String,
    },

    /// Data on disk or on the wire did not decode (checksum mismatch, truncated frame).
    #[error("corrupt data in {what}: {message}")]
    Corrupt { what: String, message: String },

    /// Serialising or deserialising a record failed.
    #[error("serialization error ({what}): {message}")]
    Serialization { what: String, message: String },

    /// A map task routed a record to a reduce partition the shuffle does not have.
    #[error("invalid plan: {0}")]
    Plan(String),
}

impl ShuffleError {
    /// Wraps an `io::Error` with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ShuffleError::Io {
            path: path.into(),
            source,
        }
    }

    /// A serialization error about `what`.
    pub fn ser(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        ShuffleError::Serialization {
            what: what.into(),
            message: e.to_string(),
        }
    }
}

/// Results of the shuffle format.
pub type Result<T> = std::result::Result<T, ShuffleError>;
