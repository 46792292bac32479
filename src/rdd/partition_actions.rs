//! Actions that run a function over whole partitions or merge partition results on
//! the driver: `foreach_partition` (Spark's `foreachPartition`) and
//! `reduce_by_key_locally` (Spark's `reduceByKeyLocally`: per-partition hash maps,
//! merged into one map in the driver program, no shuffle).
//!
//! Invariants: `foreach_partition`'s function sees each partition's records once, as a
//! [`Records`] iterator; an input error ends that iteration and then fails the task.
//! `reduce_by_key_locally` applies `f` only to values of one key, within a partition
//! and then across partitions (in the order their results arrive), so `f` must be
//! associative and commutative, as for `reduce_by_key`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::rc::Rc;

use super::actions::ResultOp;
use super::partition_op::{Records, State};
use super::Rdd;
use crate::closure::{assert_stateless, conjure};
use crate::data::{decode, encode};
use crate::data::{Data, Key};
use crate::error::Result;
use crate::task::{Batches, TaskContext};

struct ForeachPartition<S, T, F>(PhantomData<fn(S, T, F)>);
impl<S: State, T: Data, F: Fn(&S, Records<T>) + 'static> ResultOp for ForeachPartition<S, T, F> {
    type In = T;
    type Out = ();
    fn run(_: &Rc<TaskContext>, payload: &[u8], _: u32, input: Batches<T>) -> Result<()> {
        let s: S = decode("foreach_partition state", payload)?;
        let error = Rc::new(RefCell::new(None));
        conjure::<F>()(&s, Records::new(input, error.clone()));
        let failed = error.borrow_mut().take();
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

struct ReduceLocally<K, V, F>(PhantomData<fn(K, V, F)>);
impl<K: Key, V: Data, F: Fn(V, V) -> V + 'static> ResultOp for ReduceLocally<K, V, F> {
    type In = (K, V);
    type Out = Vec<(K, V)>;
    fn run(_: &Rc<TaskContext>, _: &[u8], _: u32, input: Batches<(K, V)>) -> Result<Vec<(K, V)>> {
        let f = conjure::<F>();
        let mut m: HashMap<K, V> = HashMap::new();
        for b in input {
            for (k, v) in b? {
                merge_into(&mut m, k, v, &f);
            }
        }
        Ok(m.into_iter().collect())
    }
}

fn merge_into<K: Key, V>(m: &mut HashMap<K, V>, k: K, v: V, f: &impl Fn(V, V) -> V) {
    let merged = match m.remove(&k) {
        Some(old) => f(old, v),
        None => v,
    };
    m.insert(k, merged);
}

impl<T: Data> Rdd<T> {
    /// Runs `f` once per partition with that partition's records, on the executors.
    #[track_caller]
    pub fn foreach_partition<F: Fn(Records<T>) + 'static>(&self, f: F) -> Result<()> {
        let _capture_f = assert_stateless(&f);
        self.foreach_partition_with((), move |_: &(), it: Records<T>| conjure::<F>()(it))
    }

    /// Runs `f(&state, records)` once per partition, on the executors.
    #[track_caller]
    pub fn foreach_partition_with<S: State, F: Fn(&S, Records<T>) + 'static>(
        &self,
        state: S,
        f: F,
    ) -> Result<()> {
        let _capture_f = assert_stateless(&f);
        self.run_action::<ForeachPartition<S, T, F>>(
            encode("foreach_partition", &state),
            None,
            "foreach_partition",
        )?;
        Ok(())
    }
}

impl<K: Key, V: Data> Rdd<(K, V)> {
    /// The values of each key merged with an associative, commutative `f`, returned to
    /// the driver as a map: each partition is reduced into a map on its executor and
    /// the maps are merged in the driver program (no shuffle).
    #[track_caller]
    pub fn reduce_by_key_locally<F: Fn(V, V) -> V + 'static>(&self, f: F) -> Result<HashMap<K, V>> {
        let _capture_f = assert_stateless(&f);
        let parts =
            self.run_action::<ReduceLocally<K, V, F>>(Vec::new(), None, "reduce_by_key_locally")?;
        let mut out = HashMap::new();
        for (k, v) in parts.into_iter().flatten() {
            merge_into(&mut out, k, v, &f);
        }
        Ok(out)
    }
}
