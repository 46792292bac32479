//! Broadcast variables: read-only values shipped to each executor once per job and
//! deserialised once per executor, not once per task or record.
//!
//! A [`Broadcast`] serialises as its id only. Inside a task, [`Broadcast::value`]
//! looks the value up in the executor's broadcast cache, deserialising it from the
//! bytes that came with the task the first time.

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::data::Data;
use crate::task::context_current;

/// A read-only value available to every task (Spark's `Broadcast[T]`).
pub struct Broadcast<T: Data> {
    id: u64,
    value: OnceLock<Arc<T>>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Data> Clone for Broadcast<T> {
    fn clone(&self) -> Self {
        let value = OnceLock::new();
        if let Some(v) = self.value.get() {
            let _ = value.set(v.clone());
        }
        Broadcast {
            id: self.id,
            value,
            _t: PhantomData,
        }
    }
}

impl<T: Data> Broadcast<T> {
    pub(crate) fn new(id: u64, value: Arc<T>) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(value);
        Broadcast {
            id,
            value: cell,
            _t: PhantomData,
        }
    }

    /// The broadcast id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The value. Panics (failing the task with this message) if used in a task of a
    /// job that was not given this broadcast, which cannot happen through the DSL.
    pub fn value(&self) -> Arc<T> {
        if let Some(v) = self.value.get() {
            return v.clone();
        }
        let v = context_current(|tc| {
            let tc = tc.expect("ember: Broadcast::value outside a task and without a value");
            if let Some(v) = tc.env.broadcasts.get(&self.id) {
                if let Ok(v) = v.value().clone().downcast::<T>() {
                    return v;
                }
            }
            let decode = |bytes: &[u8]| -> Arc<T> {
                Arc::new(postcard::from_bytes(bytes).unwrap_or_else(|e| {
                    panic!("ember: broadcast {} does not decode: {e}", self.id)
                }))
            };
            let v = match tc.broadcast_bytes(self.id) {
                Some(bytes) => decode(bytes),
                None => match tc.env.broadcast_bytes.get(&self.id) {
                    Some(bytes) => decode(bytes.as_slice()),
                    None => panic!(
                        "ember: broadcast {} was not shipped with this task",
                        self.id
                    ),
                },
            };
            tc.env.broadcasts.insert(self.id, v.clone());
            v
        });
        let _ = self.value.set(v.clone());
        v
    }
}

impl<T: Data> Serialize for Broadcast<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.id.serialize(s)
    }
}

impl<'de, T: Data> Deserialize<'de> for Broadcast<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Broadcast {
            id: u64::deserialize(d)?,
            value: OnceLock::new(),
            _t: PhantomData,
        })
    }
}
