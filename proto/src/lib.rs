//! ember's wire contract: the protobuf messages and tonic services that the client,
//! driver, executors and workers exchange, generated from `proto/ember.proto`, and how
//! the cluster secret travels with every call ([`auth`]).
//!
//! Invariant: a plan is pure data; nothing in these messages is executable without the
//! job binary that built it (see `Plan::binary_hash`).

pub mod auth;
pub mod digest;
pub mod limits;
pub mod units;

/// Version 1 of the protocol.
#[allow(clippy::all)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/ember.v1.rs"));
}

pub use v1::*;

/// Each client session owns the RDD and shuffle ids `[slot << SESSION_ID_SHIFT,
/// (slot + 1) << SESSION_ID_SHIFT)`, so the session owning an id is `id >>
/// SESSION_ID_SHIFT`.
pub const SESSION_ID_SHIFT: u32 = 20;

/// The session slot that owns RDD or shuffle id `id`.
pub fn session_slot(id: u32) -> u32 {
    id >> SESSION_ID_SHIFT
}
