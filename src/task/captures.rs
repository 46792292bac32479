//! A task's `capture!` values: rebuilt once per task from the captures of its plan's
//! nodes (and of the action), found again by call site and the node being computed.
//!
//! Invariants: the node being computed (`current`) is the node whose compute function
//! or batch iterator runs now, the node reading the shuffle a map task writes while the
//! write function runs, and [`RESULT`] while the action's own function runs; a lookup
//! never falls back to another node's values.

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::collections::HashMap;

use ember_proto::{Capture, RddNode};

use crate::error::{EmberError, Result};
use crate::plan::op::{op_kind, BinaryChecked, OpRef};

/// A call site's rebuilt values: `(site, Bound)` for the task's table (the bound values
/// and function are `capture`'s; this module only files them).
pub(crate) type Rebuilt = (TypeId, Box<dyn Any>);
op_kind!(
    /// Decodes one capture (values and function offset); `capture` makes one per
    /// `capture!` call site.
    RebuildFn = fn(&[u8], BinaryChecked) -> Result<Rebuilt>
);

/// The "node" of the action's function (result tasks).
pub(crate) const RESULT: u32 = u32::MAX;

/// Rebuilt values by (call site, node).
pub(crate) struct Captures {
    table: HashMap<(TypeId, u32), Box<dyn Any>>,
    /// Call sites by node, for the error when a lookup misses.
    origins: HashMap<u32, Vec<String>>,
    current: Cell<u32>,
}

impl Captures {
    /// Rebuilds every capture of a plan's `nodes` and of its action (`result`).
    pub(crate) fn of(
        nodes: &[RddNode],
        result: &[Capture],
        checked: BinaryChecked,
    ) -> Result<Captures> {
        let mut table = HashMap::new();
        let mut origins: HashMap<u32, Vec<String>> = HashMap::new();
        let all = nodes
            .iter()
            .flat_map(|n| n.captures.iter().map(move |c| (n.id, c)))
            .chain(result.iter().map(|c| (RESULT, c)));
        for (node, c) in all {
            let (site, value) = rebuild(c, checked)?;
            table.insert((site, node), value);
            origins.entry(node).or_default().push(c.origin.clone());
        }
        Ok(Captures {
            table,
            origins,
            current: Cell::new(RESULT),
        })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Makes `node` the node being computed; returns the previous one.
    pub(crate) fn enter(&self, node: u32) -> u32 {
        self.current.replace(node)
    }

    pub(crate) fn leave(&self, previous: u32) {
        self.current.set(previous);
    }

    /// The values of call site `K` for the node being computed.
    pub(crate) fn get<K: 'static, B: 'static>(&self) -> std::result::Result<&B, String> {
        let node = self.current.get();
        match self.table.get(&(TypeId::of::<K>(), node)) {
            Some(v) => v.downcast_ref::<B>().ok_or_else(|| {
                format!(
                    "ember::capture!: the values of {} do not have the expected type",
                    std::any::type_name::<K>()
                )
            }),
            None => Err(format!(
                "ember::capture!: a closure ran in a task without its captured values \
                 (node {node}; values here come from {:?}); a capture! closure runs only \
                 inside the operator it was handed to",
                self.origins.get(&node).cloned().unwrap_or_default()
            )),
        }
    }
}

fn rebuild(c: &Capture, checked: BinaryChecked) -> Result<Rebuilt> {
    let f = RebuildFn::from_offset(c.rebuild_fn, checked);
    f(&c.state, checked).map_err(|e| {
        EmberError::Plan(format!(
            "the values captured by ember::capture! at {} cannot be decoded: {e}",
            c.origin
        ))
    })
}
