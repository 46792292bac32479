//! ember's wire contract: the protobuf messages and tonic services that the client,
//! driver, executors and workers exchange, generated from `proto/ember.proto`, and how
//! the cluster secret travels with every call ([`auth`]).
//!
//! Invariant: a plan is pure data; nothing in these messages is executable without the
//! job binary that built it (see `Plan::binary_hash`).

pub mod auth;
pub mod binary_chunk;
pub mod digest;
#[cfg(feature = "server")]
pub mod health;
pub mod held_plans;
pub mod id_range;
pub mod limits;
#[cfg(feature = "listener")]
pub mod listener;
pub mod operator_secret;
#[cfg(feature = "listener")]
pub mod raw_push;
mod redacted;
pub mod refusal_log;
pub mod shuffle_input;
pub mod units;
pub mod worker_frame;

/// Version 1 of the protocol.
#[allow(clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/ember.v1.rs"));
}

pub use v1::*;

pub use id_range::{IdRange, BROADCASTS_PER_SESSION, IDS_PER_SESSION};
/// The `bytes` crate the generated types use for their `bytes` fields.
pub use prost::bytes;
pub use shuffle_input::InvalidShuffleInput;
