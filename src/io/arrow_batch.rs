//! [`ArrowBatch`]: an Arrow `RecordBatch` as an RDD element, for vectorised work on
//! columns (`Rdd<ArrowBatch>`), serialised as one Arrow IPC stream wherever records are
//! (a shuffle block, a cached partition, a result sent to the driver).
//!
//! Invariant: decoding the encoding of a batch gives an equal batch (schema, columns
//! and nulls); bytes that are not one IPC stream of exactly one batch are an error,
//! never a panic. Before `arrow-ipc` reads a stream, every length its messages claim
//! (metadata, body) is checked against the bytes the record has left, so a record of a
//! hundred bytes claiming a terabyte body is an error, not an allocation (arrow-ipc
//! would reserve up to 64 MiB for it).

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
        check_lengths(bytes)?;
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

/// Walks the messages of the IPC stream `bytes`, checking the metadata and body length
/// each claims against the bytes left after it.
fn check_lengths(bytes: &[u8]) -> Result<(), String> {
    const CONTINUATION: [u8; 4] = [0xff; 4];
    let mut at = 0;
    for index in 0.. {
        let rest = &bytes[at..];
        if rest.is_empty() {
            return Ok(());
        }
        // A length prefix, after the continuation marker (streams before Arrow 0.15
        // have none).
        let prefix = if rest.starts_with(&CONTINUATION) {
            8
        } else {
            4
        };
        let Some(word) = rest.get(prefix - 4..prefix) else {
            return Err(format!(
                "Arrow IPC stream truncated in message {index}'s length at byte {at}"
            ));
        };
        let meta_len = i32::from_le_bytes(word.try_into().expect("4 bytes"));
        if meta_len == 0 {
            return Ok(());
        }
        let left = rest.len() - prefix;
        let meta_len = usize::try_from(meta_len)
            .ok()
            .filter(|&len| len <= left)
            .ok_or_else(|| {
                format!(
                    "Arrow IPC message {index} at byte {at} claims {meta_len} metadata bytes, \
                     but the stream has {left} bytes left"
                )
            })?;
        let message = arrow_ipc::root_as_message(&rest[prefix..prefix + meta_len])
            .map_err(|e| format!("Arrow IPC message {index} at byte {at} is corrupt: {e}"))?;
        let left = left - meta_len;
        let body = message.bodyLength();
        let body = usize::try_from(body)
            .ok()
            .filter(|&len| len <= left)
            .ok_or_else(|| {
                format!(
                    "Arrow IPC message {index} at byte {at} claims a body of {body} bytes, \
                     but the stream has {left} bytes left"
                )
            })?;
        at += prefix + meta_len + body;
    }
    Ok(())
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
