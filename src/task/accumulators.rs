//! A task's partial accumulator values: what `Accumulator::add` inside a task adds to,
//! sent back encoded with the task's successful status.
//!
//! The trait is declared here, where the task holds the values; `crate::accumulator`
//! implements it for each accumulator type, so the task layer does not depend on the
//! public accumulator API.
//!
//! Invariant: an update that cannot be merged or encoded fails the task with an error
//! naming the accumulator; it is never dropped or sent as zero (a silent undercount is
//! what accumulators promise not to do).

use std::any::Any;
use std::collections::HashMap;

use ember_proto::AccumulatorUpdate;

use crate::error::{EmberError, Result};

/// One accumulator's partial value in a task, behind a type-erased interface.
pub(crate) trait TaskAccumulator {
    /// Merges a value the task added; `Err` if it is not of this accumulator's type.
    fn add_any(&mut self, v: Box<dyn Any>) -> std::result::Result<(), String>;
    /// The partial value's bytes for the client.
    fn encode(&self) -> std::result::Result<Vec<u8>, String>;
}

/// The partial values of one task, by accumulator id.
#[derive(Default)]
pub(crate) struct TaskAccumulators {
    partials: HashMap<u64, (String, Box<dyn TaskAccumulator>)>,
    /// The first update that could not be merged.
    error: Option<EmberError>,
}

impl TaskAccumulators {
    /// Adds `v` to accumulator `id` (named `name`), creating its partial value with
    /// `new` on first use.
    pub(crate) fn add(
        &mut self,
        id: u64,
        name: &str,
        v: Box<dyn Any>,
        new: impl FnOnce() -> Box<dyn TaskAccumulator>,
    ) {
        let (_, partial) = self
            .partials
            .entry(id)
            .or_insert_with(|| (name.to_string(), new()));
        if let Err(message) = partial.add_any(v) {
            self.error.get_or_insert_with(|| EmberError::Serialization {
                what: format!("an update of accumulator {id} ({name})"),
                message,
            });
        }
    }

    /// The encoded partial values, or the first error an update or encoding met.
    pub(crate) fn take_updates(&mut self) -> Result<Vec<AccumulatorUpdate>> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut updates = Vec::with_capacity(self.partials.len());
        for (id, (name, partial)) in self.partials.drain() {
            let value = partial
                .encode()
                .map_err(|message| EmberError::Serialization {
                    what: format!("the task's value of accumulator {id} ({name})"),
                    message,
                })?;
            updates.push(AccumulatorUpdate { id, value });
        }
        Ok(updates)
    }
}
