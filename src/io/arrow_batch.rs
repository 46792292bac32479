//! [`ArrowBatch`]: an Arrow `RecordBatch` as an RDD element, for vectorised work on
//! columns (`Rdd<ArrowBatch>`), serialised as one Arrow IPC stream wherever records are
//! (a shuffle block, a cached partition, a result sent to the driver).
//!
//! Invariant: decoding the encoding of a batch gives an equal batch (schema, columns
//! and nulls); bytes that are not one IPC stream of exactly one batch are an error,
//! never a panic.

use std::io::Cursor;

use arrow_array::RecordBatch;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::StreamWriter;
use serde::de::{Error as _, Visitor};
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One Arrow record batch as a record of an RDD.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrowBatch(pub RecordBatch);

impl ArrowBatch {
    pub fn num_rows(&self) -> usize {
        self.0.num_rows()
    }

    /// The batch as an Arrow IPC stream.
    pub fn to_ipc(&self) -> Result<Vec<u8>, arrow_schema::ArrowError> {
        let mut buf = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut buf, &self.0.schema())?;
            w.write(&self.0)?;
            w.finish()?;
        }
        Ok(buf)
    }

    /// The batch of an Arrow IPC stream of exactly one batch.
    pub fn from_ipc(bytes: &[u8]) -> Result<Self, String> {
        let mut r = StreamReader::try_new(Cursor::new(bytes), None).map_err(|e| e.to_string())?;
        let batch = r
            .next()
            .ok_or("an Arrow IPC stream without a batch")?
            .map_err(|e| e.to_string())?;
        if r.next().is_some() {
            return Err("an Arrow IPC stream of more than one batch".into());
        }
        Ok(ArrowBatch(batch))
    }
}

impl From<RecordBatch> for ArrowBatch {
    fn from(b: RecordBatch) -> Self {
        ArrowBatch(b)
    }
}

impl Serialize for ArrowBatch {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let bytes = self.to_ipc().map_err(S::Error::custom)?;
        s.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for ArrowBatch {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl<'de> Visitor<'de> for Bytes {
            type Value = ArrowBatch;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an Arrow IPC stream")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<ArrowBatch, E> {
                ArrowBatch::from_ipc(v).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ArrowBatch, A::Error> {
                // Formats without a bytes type send a sequence of u8 (bounded by the
                // input the format has, as every sequence is).
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                ArrowBatch::from_ipc(&v).map_err(A::Error::custom)
            }
        }
        d.deserialize_bytes(Bytes)
    }
}
