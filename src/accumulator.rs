//! Accumulators: values that tasks add to and the job's client reads.
//!
//! Inside a task, [`Accumulator::add`] updates a task-local partial value; the partial
//! values travel back with the task's successful status, and the client merges them
//! only for the first successful attempt of each partition of each stage (the
//! scheduler marks that attempt `counted`), so retries and duplicate attempts never
//! count twice. Outside a task (in the driver program) `add` updates the value directly.

use std::any::Any;
use std::marker::PhantomData;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::data::Data;
use crate::task::{context_current, TaskAccumulator};

/// A value that can be accumulated: a zero and an associative, commutative merge.
pub trait AccumulatorValue: Data + Default {
    /// Merges `other` into `self`.
    fn merge(&mut self, other: Self);
}

macro_rules! numeric_acc {
    ($($t:ty),*) => {$(
        impl AccumulatorValue for $t {
            fn merge(&mut self, other: Self) { *self += other; }
        }
    )*};
}
numeric_acc!(i32, i64, u32, u64, usize, f32, f64);

impl<T: Data> AccumulatorValue for Vec<T> {
    fn merge(&mut self, other: Self) {
        self.extend(other)
    }
}

/// A task's partial value of one accumulator.
struct Partial<A>(A);

impl<A: AccumulatorValue> TaskAccumulator for Partial<A> {
    fn add_any(&mut self, v: Box<dyn Any>) -> std::result::Result<(), String> {
        let v = v.downcast::<A>().map_err(|_| {
            format!(
                "a value that is not a {} (two accumulators with one id?)",
                std::any::type_name::<A>()
            )
        })?;
        self.0.merge(*v);
        Ok(())
    }
    fn encode(&self) -> std::result::Result<Vec<u8>, String> {
        postcard::to_allocvec(&self.0).map_err(|e| e.to_string())
    }
}

/// The client's type-erased view of an accumulator, for merging task updates.
pub(crate) trait ClientAccumulator: Send + Sync {
    /// Merges one task's encoded partial value; `Err` (nothing merged) if it does not
    /// decode.
    fn merge_encoded(&self, bytes: &[u8]) -> std::result::Result<(), String>;
    fn name(&self) -> &str;
}

struct Shared<A> {
    name: String,
    value: Arc<Mutex<A>>,
}

impl<A: AccumulatorValue> ClientAccumulator for Shared<A> {
    fn merge_encoded(&self, bytes: &[u8]) -> std::result::Result<(), String> {
        let v = postcard::from_bytes::<A>(bytes).map_err(|e| e.to_string())?;
        self.value.lock().merge(v);
        Ok(())
    }
    fn name(&self) -> &str {
        &self.name
    }
}

/// A shared, add-only variable (Spark's `AccumulatorV2`). Pass it to closures through
/// a `*_with` operator variant; it serialises as its id.
pub struct Accumulator<A: AccumulatorValue> {
    id: u64,
    name: String,
    value: Option<Arc<Mutex<A>>>,
    _a: PhantomData<fn() -> A>,
}

impl<A: AccumulatorValue> Clone for Accumulator<A> {
    fn clone(&self) -> Self {
        Accumulator {
            id: self.id,
            name: self.name.clone(),
            value: self.value.clone(),
            _a: PhantomData,
        }
    }
}

impl<A: AccumulatorValue> Accumulator<A> {
    pub(crate) fn new(id: u64, name: &str) -> (Self, Box<dyn ClientAccumulator>) {
        let value = Arc::new(Mutex::new(A::default()));
        let shared = Box::new(Shared {
            name: name.to_string(),
            value: value.clone(),
        });
        (
            Accumulator {
                id,
                name: name.to_string(),
                value: Some(value),
                _a: PhantomData,
            },
            shared,
        )
    }

    /// Adds `v`: inside a task to the task's partial value, elsewhere to the value.
    pub fn add(&self, v: A) {
        let v = match context_current(|tc| match tc {
            Some(tc) => {
                tc.accumulate(self.id, &self.name, Box::new(v), || {
                    Box::new(Partial(A::default()))
                });
                None
            }
            None => Some(v),
        }) {
            Some(v) => v,
            None => return,
        };
        if let Some(value) = &self.value {
            value.lock().merge(v);
        }
    }

    /// The merged value of every counted task so far (read it in the driver program).
    pub fn value(&self) -> A {
        self.value
            .as_ref()
            .map(|v| v.lock().clone())
            .unwrap_or_default()
    }

    /// The accumulator's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<A: AccumulatorValue> Serialize for Accumulator<A> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (self.id, &self.name).serialize(s)
    }
}

impl<'de, A: AccumulatorValue> Deserialize<'de> for Accumulator<A> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (id, name) = <(u64, String)>::deserialize(d)?;
        Ok(Accumulator {
            id,
            name,
            value: None,
            _a: PhantomData,
        })
    }
}
