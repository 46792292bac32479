//! How the driver keeps a job binary on disk: the chunks it was uploaded in, still
//! LZ4-compressed, so it stores and serves the compressed bytes and never compresses a
//! binary again (it never runs one).
//!
//! Format: [`MAGIC`], the binary's length (u64 LE), then records: encoding (u8),
//! decoded length (u32 LE), data length (u32 LE), data. Every record but the last
//! decodes to exactly [`MAX_CHUNK_BYTES`] (an upload's chunks of another size are
//! gathered and compressed again by [`Rechunker`]), and a record's data is never longer
//! than what it decodes to, so a binary of `n` bytes takes at most [`stored_bound`]`(n)`
//! on disk and reading one allocates at most a chunk. A file without the magic (stored
//! by an older driver) is the binary itself, served raw.
//!
//! Invariant: what is stored under a hash was decoded and hashed on upload; records
//! read back are checked for their bounds, and the executors check the hash again.

use ember_proto::binary_chunk::{encode, MAX_CHUNK_BYTES};
use ember_proto::{BinaryChunk, BinaryEncoding};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The first bytes of a stored binary in this format.
pub const MAGIC: &[u8; 8] = b"EMBERBZ1";
/// Magic and length.
pub const HEADER_BYTES: u64 = 16;
/// Encoding, decoded length and data length before each record's data.
pub const RECORD_HEADER_BYTES: u64 = 9;

/// The most bytes a binary of `total_len` bytes takes on disk.
pub fn stored_bound(total_len: u64) -> u64 {
    let records = total_len.div_ceil(MAX_CHUNK_BYTES as u64).max(1);
    HEADER_BYTES
        .saturating_add(total_len)
        .saturating_add(records.saturating_mul(RECORD_HEADER_BYTES))
}

/// The length of the binary stored at `path`: its header's, or the file's own for a
/// raw one.
pub fn binary_len(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut h = [0u8; HEADER_BYTES as usize];
    match file.read_exact(&mut h) {
        Ok(()) if &h[..8] == MAGIC => Ok(u64::from_le_bytes(h[8..].try_into().expect("8"))),
        Ok(()) => Ok(file.metadata()?.len()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(file.metadata()?.len()),
        Err(e) => Err(e),
    }
}

/// Writes an upload's chunks as records of [`MAX_CHUNK_BYTES`] each (the last shorter):
/// a chunk of that size (or the binary's last) arriving on a record boundary is written
/// as it came, compressed by the client; other chunks are gathered and compressed here.
#[derive(Default)]
pub struct Rechunker {
    buf: Vec<u8>,
    written: u64,
}

impl Rechunker {
    /// Takes one decoded chunk (`last`: it ends the binary).
    pub async fn push(
        &mut self,
        file: &mut (impl AsyncWriteExt + Unpin),
        chunk: &BinaryChunk,
        decoded: &[u8],
        last: bool,
    ) -> std::io::Result<()> {
        if self.buf.is_empty() && (decoded.len() == MAX_CHUNK_BYTES || last) {
            self.written += write_record(file, chunk, decoded).await?;
            return Ok(());
        }
        let mut rest = decoded;
        while !rest.is_empty() {
            let take = (MAX_CHUNK_BYTES - self.buf.len()).min(rest.len());
            self.buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.buf.len() == MAX_CHUNK_BYTES {
                self.flush(file).await?;
            }
        }
        if last {
            self.flush(file).await?;
        }
        Ok(())
    }

    async fn flush(&mut self, file: &mut (impl AsyncWriteExt + Unpin)) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            let chunk = encode(&self.buf);
            self.written += write_record(file, &chunk, &self.buf).await?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Bytes of records written so far.
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// The header of a binary of `total_len` bytes.
pub fn header(total_len: u64) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..].copy_from_slice(&total_len.to_le_bytes());
    h
}

/// Writes one chunk as a record: `chunk`'s LZ4 data when it is smaller than what it
/// decodes to (`decoded`), else `decoded` itself. Returns the bytes written.
pub async fn write_record(
    file: &mut (impl AsyncWriteExt + Unpin),
    chunk: &BinaryChunk,
    decoded: &[u8],
) -> std::io::Result<u64> {
    let (encoding, data) =
        if chunk.encoding == BinaryEncoding::Lz4 as i32 && chunk.data.len() < decoded.len() {
            (BinaryEncoding::Lz4, &chunk.data[..])
        } else {
            (BinaryEncoding::Raw, decoded)
        };
    let mut head = [0u8; RECORD_HEADER_BYTES as usize];
    head[0] = encoding as i32 as u8;
    head[1..5].copy_from_slice(&(decoded.len() as u32).to_le_bytes());
    head[5..9].copy_from_slice(&(data.len() as u32).to_le_bytes());
    file.write_all(&head).await?;
    file.write_all(data).await?;
    Ok(RECORD_HEADER_BYTES + data.len() as u64)
}

/// Reads the header: `Some(total_len)` for a file in this format, `None` for a raw
/// binary (an older driver's; the caller reads it from the start again).
pub async fn read_header(file: &mut (impl AsyncReadExt + Unpin)) -> std::io::Result<Option<u64>> {
    let mut h = [0u8; HEADER_BYTES as usize];
    match file.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    if &h[..8] != MAGIC {
        return Ok(None);
    }
    Ok(Some(u64::from_le_bytes(
        h[8..].try_into().expect("8 bytes"),
    )))
}

/// The next record as a chunk (without name and length), `None` at the end of the file;
/// a record out of bounds is an `InvalidData` error naming it.
pub async fn read_record(
    file: &mut (impl AsyncReadExt + Unpin),
) -> std::io::Result<Option<BinaryChunk>> {
    let mut head = [0u8; RECORD_HEADER_BYTES as usize];
    match file.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let raw_len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes"));
    let data_len = u32::from_le_bytes(head[5..9].try_into().expect("4 bytes"));
    let encoding = BinaryEncoding::try_from(i32::from(head[0])).ok();
    if encoding.is_none() || raw_len as usize > MAX_CHUNK_BYTES || data_len > raw_len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "bad record (encoding {}, {raw_len} bytes decoded, {data_len} stored)",
                head[0]
            ),
        ));
    }
    let mut data = vec![0u8; data_len as usize];
    file.read_exact(&mut data).await?;
    Ok(Some(BinaryChunk {
        data,
        encoding: head[0] as i32,
        raw_len,
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_proto::binary_chunk::{encode, Decoder};

    #[tokio::test]
    async fn records_read_back_as_they_were_uploaded() {
        let text: Vec<u8> = b"fn main() { println!(\"hi\"); }\n".repeat(2000);
        let noise: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut file = Vec::new();
        let total = (text.len() + noise.len()) as u64;
        file.extend_from_slice(&header(total));
        let mut written = HEADER_BYTES;
        for part in [&text, &noise] {
            let chunk = encode(part);
            written += write_record(&mut file, &chunk, part).await.unwrap();
        }
        assert_eq!(written, file.len() as u64);
        assert!(file.len() < text.len(), "the text is stored compressed");
        assert!(written <= stored_bound(total));
        let mut r = &file[..];
        assert_eq!(read_header(&mut r).await.unwrap(), Some(total));
        let mut dec = Decoder::new(total);
        let mut back = Vec::new();
        while let Some(c) = read_record(&mut r).await.unwrap() {
            back.extend_from_slice(dec.decode(&c).unwrap());
        }
        assert_eq!(back, [text, noise].concat());
    }

    #[tokio::test]
    async fn small_chunks_are_gathered_into_whole_records() {
        let bytes: Vec<u8> = (0..MAX_CHUNK_BYTES + 5000).map(|i| (i % 7) as u8).collect();
        let mut file = header(bytes.len() as u64).to_vec();
        let mut r = Rechunker::default();
        let pieces: Vec<&[u8]> = bytes.chunks(3000).collect();
        for (i, piece) in pieces.iter().enumerate() {
            let raw = BinaryChunk {
                data: piece.to_vec(),
                ..Default::default()
            };
            r.push(&mut file, &raw, piece, i + 1 == pieces.len())
                .await
                .unwrap();
        }
        assert_eq!(r.written() + HEADER_BYTES, file.len() as u64);
        let mut rd = &file[..];
        assert_eq!(
            read_header(&mut rd).await.unwrap(),
            Some(bytes.len() as u64)
        );
        let mut sizes = Vec::new();
        let mut back = Vec::new();
        let mut dec = Decoder::new(bytes.len() as u64);
        while let Some(c) = read_record(&mut rd).await.unwrap() {
            sizes.push(c.raw_len);
            back.extend_from_slice(dec.decode(&c).unwrap());
        }
        assert_eq!(sizes, vec![MAX_CHUNK_BYTES as u32, 5000]);
        assert_eq!(back, bytes);
        assert!((file.len() as u64) < bytes.len() as u64 / 10);
    }

    #[tokio::test]
    async fn a_raw_file_and_bad_records_are_told_apart() {
        let elf = b"\x7fELF\x02\x01\x01\0 and the rest of a binary";
        assert_eq!(read_header(&mut &elf[..]).await.unwrap(), None);
        let mut bad = vec![1u8];
        bad.extend_from_slice(&(5u32 << 20).to_le_bytes());
        bad.extend_from_slice(&4u32.to_le_bytes());
        let err = read_record(&mut &bad[..]).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("5242880 bytes decoded"), "{err}");
    }
}
