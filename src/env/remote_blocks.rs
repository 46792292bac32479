//! Where a reducer gets the blocks that other executors hold. The executor's env
//! declares the source (and holds one); the reduce-side read (`shuffle::read`) uses it
//! and the cluster client (`cluster::fetch`) implements it, so the arrows run one way:
//! `cluster -> env <- shuffle`, never back.
//!
//! Invariant of every implementation: the blocks of `maps` come back in the order of
//! `maps`, each verified (length and checksum), and a failure is a typed `FetchFailed`
//! naming the block, yielded last.

use std::sync::Arc;

use crate::error::Result;
use ember_shuffle::BlockId;

/// The verified bytes of remote blocks, in the order asked for.
pub(crate) type RemoteBlockStream = Box<dyn Iterator<Item = Result<(BlockId, Vec<u8>)>>>;

/// Blocks held by other executors.
pub(crate) trait RemoteBlockSource: Send + Sync {
    /// The blocks of reduce partition `reduce` of `shuffle_id` from map outputs `maps`,
    /// all held by `executor_id`, whose shuffle service is at `address`.
    fn fetch(
        self: Arc<Self>,
        executor_id: &str,
        address: &str,
        shuffle_id: u32,
        reduce: u32,
        maps: Vec<u32>,
    ) -> RemoteBlockStream;
}
