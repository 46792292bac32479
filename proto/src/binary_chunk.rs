//! How a job binary's bytes travel in [`BinaryChunk`]s: each chunk LZ4-compressed on
//! its own (or raw when compression does not pay), and decoded with every size bounded.
//!
//! Invariants:
//! - The binary's identity (`sha256`, `total_len`) is that of the decoded bytes, the
//!   shipped file itself; the encoding is transport only.
//! - Decoding never allocates or writes more than [`MAX_CHUNK_BYTES`] for one chunk, nor
//!   more than the binary's declared length over a whole stream: a chunk that decodes to
//!   more than it declares (a decompression bomb), declares more than the limit, or
//!   passes the declared length is refused with a [`BinaryChunkError`] naming it.

use crate::{BinaryChunk, BinaryEncoding};

/// The most bytes one chunk may decode to (and the size senders cut a binary into).
pub const MAX_CHUNK_BYTES: usize = 1 << 20;

/// A chunk that cannot be decoded within its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryChunkError {
    #[error("binary chunk has an unknown encoding ({0})")]
    UnknownEncoding(i32),
    #[error(
        "binary chunk declares it decodes to {raw_len} bytes, over the limit of \
         {MAX_CHUNK_BYTES} bytes per chunk; refusing it"
    )]
    ChunkTooLarge { raw_len: u64 },
    #[error(
        "binary chunks decode to more than the {total_len} bytes the binary declares \
         ({decoded} bytes before a chunk of {raw_len}); refusing it"
    )]
    OverDeclared {
        total_len: u64,
        decoded: u64,
        raw_len: u64,
    },
    #[error(
        "LZ4 binary chunk of {data_len} bytes does not decode to the {raw_len} bytes it \
         declares ({reason}); refusing it"
    )]
    BadLz4 {
        data_len: usize,
        raw_len: u32,
        reason: String,
    },
}

/// A chunk carrying `raw` (at most [`MAX_CHUNK_BYTES`]), LZ4-compressed unless that
/// does not make it smaller; `sha256` and `total_len` are left for the sender to set on
/// the first chunk.
pub fn encode(raw: &[u8]) -> BinaryChunk {
    debug_assert!(raw.len() <= MAX_CHUNK_BYTES);
    let compressed = lz4_flex::block::compress(raw);
    if compressed.len() < raw.len() {
        BinaryChunk {
            data: compressed,
            encoding: BinaryEncoding::Lz4 as i32,
            raw_len: raw.len() as u32,
            ..Default::default()
        }
    } else {
        BinaryChunk {
            data: raw.to_vec(),
            encoding: BinaryEncoding::Raw as i32,
            raw_len: raw.len() as u32,
            ..Default::default()
        }
    }
}

/// Decodes the chunks of one binary stream, holding the running count against the
/// length the stream declared.
#[derive(Debug)]
pub struct Decoder {
    total_len: u64,
    decoded: u64,
    buf: Vec<u8>,
}

impl Decoder {
    /// A decoder for a binary declared to be `total_len` bytes.
    pub fn new(total_len: u64) -> Decoder {
        Decoder {
            total_len,
            decoded: 0,
            buf: Vec::new(),
        }
    }

    /// The length the stream declared.
    pub fn total_len(&self) -> u64 {
        self.total_len
    }

    /// Bytes decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// The bytes `chunk` carries, decoded, or why it is refused.
    pub fn decode<'a>(&'a mut self, chunk: &'a BinaryChunk) -> Result<&'a [u8], BinaryChunkError> {
        let encoding = BinaryEncoding::try_from(chunk.encoding)
            .map_err(|_| BinaryChunkError::UnknownEncoding(chunk.encoding))?;
        let raw_len = match encoding {
            BinaryEncoding::Raw => chunk.data.len() as u64,
            BinaryEncoding::Lz4 => u64::from(chunk.raw_len),
        };
        if encoding == BinaryEncoding::Lz4 && raw_len > MAX_CHUNK_BYTES as u64 {
            return Err(BinaryChunkError::ChunkTooLarge { raw_len });
        }
        if self.decoded.saturating_add(raw_len) > self.total_len {
            return Err(BinaryChunkError::OverDeclared {
                total_len: self.total_len,
                decoded: self.decoded,
                raw_len,
            });
        }
        self.decoded += raw_len;
        match encoding {
            BinaryEncoding::Raw => Ok(&chunk.data),
            BinaryEncoding::Lz4 => {
                let want = chunk.raw_len as usize;
                self.buf.resize(want, 0);
                let bad = |reason: String| BinaryChunkError::BadLz4 {
                    data_len: chunk.data.len(),
                    raw_len: chunk.raw_len,
                    reason,
                };
                // The output buffer is exactly the declared size: more output is an error,
                // never an allocation.
                let n = lz4_flex::block::decompress_into(&chunk.data, &mut self.buf)
                    .map_err(|e| bad(e.to_string()))?;
                if n != want {
                    return Err(bad(format!("it decodes to {n}")));
                }
                Ok(&self.buf[..want])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivial: a repeating pattern with a counter in it.
        (0..len)
            .map(|i| (i % 251) as u8 ^ (i / 4096) as u8)
            .collect()
    }

    #[test]
    fn chunks_round_trip_compressed_or_raw() {
        let compressible = sample(MAX_CHUNK_BYTES);
        let mut noise = vec![0u8; 4096];
        getrandom::fill(&mut noise).unwrap();
        let mut dec = Decoder::new((compressible.len() + noise.len()) as u64);
        let a = encode(&compressible);
        assert_eq!(a.encoding, BinaryEncoding::Lz4 as i32);
        assert!(a.data.len() < compressible.len() / 4, "{}", a.data.len());
        assert_eq!(dec.decode(&a).unwrap(), &compressible[..]);
        let b = encode(&noise);
        assert_eq!(
            b.encoding,
            BinaryEncoding::Raw as i32,
            "random bytes stay raw"
        );
        assert_eq!(dec.decode(&b).unwrap(), &noise[..]);
        assert_eq!(dec.decoded(), (compressible.len() + noise.len()) as u64);
    }

    #[test]
    fn a_decompression_bomb_is_refused() {
        // 64 MiB of zeros compress to a few hundred KiB; the chunk claims 1 MiB.
        let zeros = vec![0u8; 64 << 20];
        let bomb = BinaryChunk {
            data: lz4_flex::block::compress(&zeros),
            encoding: BinaryEncoding::Lz4 as i32,
            raw_len: MAX_CHUNK_BYTES as u32,
            ..Default::default()
        };
        assert!(bomb.data.len() < 1 << 20);
        let err = Decoder::new(1 << 30).decode(&bomb).unwrap_err();
        assert!(matches!(err, BinaryChunkError::BadLz4 { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("does not decode to the 1048576 bytes it declares"),
            "{text}"
        );
        // Claiming the whole size is refused before anything is decoded.
        let honest = BinaryChunk {
            raw_len: 64 << 20,
            ..bomb
        };
        let err = Decoder::new(1 << 30).decode(&honest).unwrap_err();
        assert_eq!(err, BinaryChunkError::ChunkTooLarge { raw_len: 64 << 20 });
        assert!(err.to_string().contains("over the limit of 1048576 bytes"));
    }

    #[test]
    fn chunks_past_the_declared_length_are_refused() {
        let raw = sample(1000);
        let mut dec = Decoder::new(1500);
        dec.decode(&encode(&raw)).unwrap();
        let err = dec.decode(&encode(&raw)).unwrap_err();
        assert_eq!(
            err,
            BinaryChunkError::OverDeclared {
                total_len: 1500,
                decoded: 1000,
                raw_len: 1000
            }
        );
        // A raw chunk counts its own length.
        let raw_chunk = BinaryChunk {
            data: vec![1; 600],
            ..Default::default()
        };
        let mut dec = Decoder::new(500);
        assert!(matches!(
            dec.decode(&raw_chunk),
            Err(BinaryChunkError::OverDeclared { .. })
        ));
    }

    #[test]
    fn short_or_corrupt_lz4_and_unknown_encodings_are_refused() {
        let raw = sample(5000);
        let mut short = encode(&raw);
        short.raw_len = 6000;
        let err = Decoder::new(1 << 20).decode(&short).unwrap_err();
        assert!(err.to_string().contains("it decodes to 5000"), "{err}");
        let garbage = BinaryChunk {
            data: vec![0xff; 64],
            encoding: BinaryEncoding::Lz4 as i32,
            raw_len: 100,
            ..Default::default()
        };
        assert!(matches!(
            Decoder::new(1 << 20).decode(&garbage),
            Err(BinaryChunkError::BadLz4 { .. })
        ));
        let unknown = BinaryChunk {
            encoding: 7,
            ..Default::default()
        };
        assert_eq!(
            Decoder::new(10).decode(&unknown).unwrap_err(),
            BinaryChunkError::UnknownEncoding(7)
        );
    }
}
