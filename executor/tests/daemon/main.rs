//! Integration tests of the executor daemon, one test binary: the shuffle service end to
//! end over gRPC, binary fetch and verification against a fake driver, the worker
//! protocol and crash handling with fake workers, the registration loop, and the
//! command line. Every wait is bounded; every temp dir is removed.

mod binaries;
mod block_push;
mod cli;
mod common;
mod metrics_access;
mod modes;
mod protocol;
mod raw_push;
mod registration;
mod replica_push;
mod shuffle_service;
mod worker_isolation;
mod workers;
