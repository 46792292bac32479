//! ember's wire contract: the protobuf messages (and, in cluster mode, services) that
//! the client, driver, executors and workers exchange. Generated from `proto/ember.proto`.
//!
//! Invariant: a plan is pure data; nothing in these messages is executable without the
//! job binary that built it (see `Plan::binary_hash`).

#![allow(clippy::all)]

/// Version 1 of the protocol.
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/ember.v1.rs"));
}

pub use v1::*;
