//! The library's error type. Every failure a job can meet is a variant here with the
//! facts a user needs to act on it (which file, which line, which stage and partition,
//! which executor). Failures the scheduler must act on (fetch failures, lost executors)
//! are typed variants, never formatted strings.

use std::path::PathBuf;

/// Result alias used throughout ember.
pub type Result<T, E = EmberError> = std::result::Result<T, E>;

/// Everything that can go wrong in ember.
#[derive(thiserror::Error)]
pub enum EmberError {
    /// An input path named by the job does not exist or matches no file.
    #[error("input path does not exist: {path}")]
    InputNotFound { path: String },

    /// Reading or writing a file failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The job's output directory already exists and overwrite was not requested.
    #[error("output directory already exists: {path} (remove it or ask for overwrite)")]
    OutputExists { path: PathBuf },

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
        /// The block was read from the shuffle's stored copy (`storage:` durability), not
        /// from its executor: the copy is bad, not the executor.
        from_storage: bool,
    },

    /// Data on disk or on the wire did not decode (checksum mismatch, truncated frame).
    #[error("corrupt data in {what}: {message}")]
    Corrupt { what: String, message: String },

    /// A file's columns do not fit the record type it is read into.
    #[error("schema mismatch in {path}: column `{column}` is {found}, but the record type wants {expected}")]
    SchemaMismatch {
        path: String,
        column: String,
        found: String,
        expected: String,
    },

    /// A record of an input file did not parse (CSV): where, and why.
    #[error("bad record in {path} line {line} {column}: {message}")]
    BadRecord {
        path: String,
        line: u64,
        /// `"name" (column N)` (the name where the file has a header), or empty.
        column: String,
        message: String,
    },

    /// Serialising or deserialising a record or operator state failed.
    #[error("serialization error ({what}): {message}")]
    Serialization { what: String, message: String },

    /// A task failed: a panic or error in user code, with where it happened.
    #[error("job aborted: stage {stage_id} ({stage_name}), partition {partition}, executor {executor_id}: {message}")]
    TaskFailed {
        stage_id: u32,
        stage_name: String,
        partition: u32,
        executor_id: String,
        message: String,
    },

    /// A stage failed as a whole: its attempts ran out on fetch failures (its input
    /// shuffle data kept being lost), not one task's code.
    #[error("job aborted: stage {stage_id} ({stage_name}) failed: {message}")]
    StageFailed {
        stage_id: u32,
        stage_name: String,
        message: String,
    },

    /// A collective of a barrier task failed (a peer rank died or failed, a peer of
    /// another stage, mismatched calls): the whole barrier stage reruns.
    #[error("barrier task rank {rank} of {world}: {op} failed: {source}")]
    Collective {
        rank: u32,
        world: u32,
        op: String,
        #[source]
        source: ember_collective::CollectiveError,
    },

    /// The job was cancelled or the context shut down while it ran.
    #[error("job cancelled: {0}")]
    Cancelled(String),

    /// The driver could not be reached, refused a request, or went away.
    #[error("cluster: {0}")]
    Cluster(String),

    /// Configuration (master URL, memory size, flags) could not be understood.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A plan could not be executed (unknown node, wrong binary, ...).
    #[error("invalid plan: {0}")]
    Plan(String),

    /// An operator was given an argument it cannot work with (a partition count of 0,
    /// a negative sample fraction); names the operator and its call site.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A command run by `pipe` could not be started, could not be fed or read, or
    /// exited unsuccessfully; `command` is a bounded excerpt of its argv.
    #[error("pipe command {command} in partition {partition}: {message}")]
    Pipe {
        command: String,
        partition: u32,
        message: String,
    },

    /// An action that needs at least one element met an empty RDD.
    #[error("{0} of an empty RDD")]
    EmptyRdd(&'static str),
}

impl EmberError {
    /// Wraps an `io::Error` with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EmberError::Io {
            path: path.into(),
            source,
        }
    }

    /// A serialization error about `what`.
    pub fn ser(what: impl Into<String>, e: impl std::fmt::Display) -> Self {
        EmberError::Serialization {
            what: what.into(),
            message: e.to_string(),
        }
    }
}

/// `Debug` is the `Display` text (with the chain of causes), so that an error returned
/// from `main` (which Rust prints with `{:?}`) reads as a message, not a struct dump.
impl std::fmt::Debug for EmberError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            // Most variants already quote their cause in their own text.
            if !self.to_string().contains(&text) {
                write!(f, "\n  caused by: {text}")?;
            }
            source = cause.source();
        }
        Ok(())
    }
}

/// The shuffle format's errors are the library's, variant for variant and word for word
/// (a fetch failure stays a typed fetch failure).
impl From<ember_shuffle::ShuffleError> for EmberError {
    fn from(e: ember_shuffle::ShuffleError) -> Self {
        use ember_shuffle::ShuffleError as S;
        match e {
            S::Io { path, source } => EmberError::Io { path, source },
            S::FetchFailed {
                executor_id,
                shuffle_id,
                map_partition,
                reduce_partition,
                message,
            } => EmberError::FetchFailed {
                executor_id,
                shuffle_id,
                map_partition,
                reduce_partition,
                message,
                from_storage: false,
            },
            S::Corrupt { what, message } => EmberError::Corrupt { what, message },
            S::Serialization { what, message } => EmberError::Serialization { what, message },
            S::Plan(m) => EmberError::Plan(m),
        }
    }
}
