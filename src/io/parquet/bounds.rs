//! The lengths a Parquet file claims, checked before the `parquet` crate allocates from
//! them. The crate sizes a page's decompression buffer from the page header's
//! uncompressed size (up to 2 GiB from a 562-byte file), and reads a column chunk by
//! the byte range its footer entry claims; neither is checked against the file or the
//! memory pool.
//!
//! Before a task decodes a row group, [`check_row_group`] checks, for every column it
//! reads: that the column chunk's byte range lies inside the file; that every page
//! header in it parses, claims a non-negative compressed size that fits in what is left
//! of the chunk, and a non-negative uncompressed size; and that the largest page (its
//! compressed and uncompressed buffers together) fits in the memory pool's *limit*. A
//! footer or page claim that fails any of these is a corrupt-file error naming the
//! file, row group, column and byte offset, and what was claimed against what the file
//! holds; a page larger than the pool's whole limit (which no amount of spilling could
//! ever grant) is an out-of-memory error ([`std::io::ErrorKind::OutOfMemory`]) naming
//! the claim and the limit. The footer's offsets and sizes are read and sign-checked
//! here (checked arithmetic) before `ColumnChunkMetaData::byte_range`, which asserts
//! them, is ever reached.
//!
//! A page within the limit is then charged to the task's reservation as far as the pool
//! grants right now. The pool never waits nor makes others spill, so a refusal here only
//! means other tasks (sorters, aggregators) hold the memory at this moment; failing the
//! read for it would fail valid files under ordinary load. Such a page is read without
//! the extra charge (as before the check existed): the bound that matters against a
//! bomb, the pool's limit, has already been applied.
//!
//! Page headers are Thrift compact structs; they are read with the `thrift` crate,
//! only their two size fields kept. Encrypted files (whose headers are encrypted) are
//! not supported by ember's reader.

use std::io::Read;
use std::path::Path;

use parquet::arrow::ProjectionMask;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};
use parquet::file::reader::ChunkReader;
use thrift::protocol::{TCompactInputProtocol, TInputProtocol, TType};

use crate::error::{EmberError, Result};
use crate::memory::Reservation;

/// The error for a Parquet file whose footer or pages do not hold up.
pub(crate) fn corrupt(path: &Path, e: impl std::fmt::Display) -> EmberError {
    EmberError::Corrupt {
        what: format!("Parquet file {}", path.display()),
        message: e.to_string(),
    }
}

/// A page header's sizes, as claimed.
struct PageSizes {
    /// Bytes of the header itself.
    header: u64,
    compressed: i64,
    uncompressed: i64,
}

/// Counts the bytes read through it (a page header's own length).
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Reads the page header at the start of `src`: its length and its two size fields
/// (field 2, uncompressed size; field 3, compressed size; both required i32s).
fn read_page_header(src: impl Read) -> std::result::Result<PageSizes, String> {
    let mut counted = Counted {
        inner: src,
        read: 0,
    };
    let mut protocol = TCompactInputProtocol::new(&mut counted);
    let fail = |e: thrift::Error| format!("unreadable page header: {e}");
    let (mut compressed, mut uncompressed) = (None, None);
    protocol.read_struct_begin().map_err(fail)?;
    loop {
        let field = protocol.read_field_begin().map_err(fail)?;
        match (field.id, field.field_type) {
            (_, TType::Stop) => break,
            (Some(2), TType::I32) => uncompressed = Some(protocol.read_i32().map_err(fail)?),
            (Some(3), TType::I32) => compressed = Some(protocol.read_i32().map_err(fail)?),
            (_, ty) => protocol.skip(ty).map_err(fail)?,
        }
        protocol.read_field_end().map_err(fail)?;
    }
    protocol.read_struct_end().map_err(fail)?;
    drop(protocol);
    let (Some(compressed), Some(uncompressed)) = (compressed, uncompressed) else {
        return Err("page header without its compressed and uncompressed sizes".into());
    };
    Ok(PageSizes {
        header: counted.read,
        compressed: i64::from(compressed),
        uncompressed: i64::from(uncompressed),
    })
}

/// The byte range (start, length) of a column chunk as its footer entry claims it, or
/// what is wrong with it: negative offsets or size, or an end past `u64`.
fn chunk_range(column: &ColumnChunkMetaData) -> std::result::Result<(u64, u64), String> {
    let (what, start) = match column.dictionary_page_offset() {
        Some(offset) => ("dictionary page offset", offset),
        None => ("data page offset", column.data_page_offset()),
    };
    let len = column.compressed_size();
    let start =
        u64::try_from(start).map_err(|_| format!("the footer claims a {what} of {start}"))?;
    let len = u64::try_from(len)
        .map_err(|_| format!("the footer claims a column chunk of {len} compressed bytes"))?;
    if start.checked_add(len).is_none() {
        return Err(format!(
            "the footer claims a column chunk of {len} bytes at byte {start}, past any file"
        ));
    }
    Ok((start, len))
}

/// Checks every claim of row group `group` in the columns `mask` selects (see the
/// module docs) and grows `memory` to its largest page (when larger than what it holds)
/// before any page is decoded.
pub(crate) fn check_row_group<R: ChunkReader>(
    path: &Path,
    file: &R,
    metadata: &ParquetMetaData,
    group: usize,
    mask: &ProjectionMask,
    memory: &mut Reservation,
) -> Result<()> {
    let file_len = file.len();
    let row_group = metadata.row_group(group);
    for (leaf, column) in row_group.columns().iter().enumerate() {
        if !mask.leaf_included(leaf) {
            continue;
        }
        let name = column.column_path().string();
        let name = crate::io::excerpt(&name);
        let at = |offset: u64| format!("row group {group}, column {name}, byte {offset}");
        let (start, len) = chunk_range(column)
            .map_err(|e| corrupt(path, format!("row group {group}, column {name}: {e}")))?;
        let end = start.checked_add(len).filter(|&end| end <= file_len);
        let Some(end) = end else {
            return Err(corrupt(
                path,
                format!(
                    "{}: the column chunk claims {len} bytes, but the file is {file_len} bytes",
                    at(start)
                ),
            ));
        };
        let mut offset = start;
        while offset < end {
            let src = file.get_read(offset).map_err(|e| corrupt(path, e))?;
            let page = read_page_header(src.take(end - offset))
                .map_err(|e| corrupt(path, format!("{}: {e}", at(offset))))?;
            let left = end - offset - page.header;
            if page.compressed < 0 || page.compressed as u64 > left {
                return Err(corrupt(
                    path,
                    format!(
                        "{}: a page claims {} compressed bytes, but its column chunk has \
                         {left} bytes left",
                        at(offset),
                        page.compressed
                    ),
                ));
            }
            if page.uncompressed < 0 {
                return Err(corrupt(
                    path,
                    format!(
                        "{}: a page claims {} uncompressed bytes",
                        at(offset),
                        page.uncompressed
                    ),
                ));
            }
            let buffers = page.compressed as u64 + page.uncompressed as u64;
            let limit = memory.pool().limit();
            if buffers > limit {
                return Err(EmberError::io(
                    path,
                    std::io::Error::new(
                        std::io::ErrorKind::OutOfMemory,
                        format!(
                            "{}: a page claims {} uncompressed bytes ({} compressed), more \
                             than the memory pool grants: its buffers need {buffers} bytes, \
                             the pool's limit is {limit} bytes",
                            at(offset),
                            page.uncompressed,
                            page.compressed
                        ),
                    ),
                ));
            }
            // Within the limit: charged as far as the pool grants now (see the module doc).
            if buffers > memory.size() && memory.resize(buffers).is_err() {
                tracing::debug!(
                    consumer = memory.consumer(),
                    buffers,
                    "parquet page read without its full memory charge: the pool is busy"
                );
            }
            offset += page.header + page.compressed as u64;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use bytes::Bytes;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use parquet::file::metadata::ParquetMetaDataReader;

    use super::*;
    use crate::memory::MemoryPool;

    /// 20 000 distinct i64s: a dictionary page of 160 000 bytes, uncompressed.
    const ROWS: i64 = 20_000;

    fn small_file() -> (Bytes, ParquetMetaData) {
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..ROWS));
        let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
        let mut buf = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let bytes = Bytes::from(buf);
        let metadata = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        (bytes, metadata)
    }

    fn check(bytes: &Bytes, metadata: &ParquetMetaData, memory: &mut Reservation) -> Result<()> {
        let mask = ProjectionMask::all();
        check_row_group(Path::new("t.parquet"), bytes, metadata, 0, &mask, memory)
    }

    #[test]
    fn a_valid_file_passes_while_another_reservation_holds_most_of_the_pool() {
        let (bytes, metadata) = small_file();
        let pool = MemoryPool::new(1 << 20);
        let mut sorter = pool.reservation("sorter");
        sorter.try_grow((1 << 20) - (64 << 10)).unwrap();
        let mut memory = pool.reservation("reader");
        check(&bytes, &metadata, &mut memory).unwrap();
        assert!(pool.used() <= pool.limit());
        let read: Vec<i64> = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap()
            .flat_map(|batch| {
                let batch = batch.unwrap();
                let column = batch.column(0).as_any().downcast_ref::<Int64Array>();
                column.unwrap().values().to_vec()
            })
            .collect();
        assert_eq!(read, (0..ROWS).collect::<Vec<_>>());
    }

    #[test]
    fn a_page_over_the_pool_limit_is_an_out_of_memory_error() {
        let (bytes, metadata) = small_file();
        let pool = MemoryPool::new(100_000);
        let mut memory = pool.reservation("reader");
        match check(&bytes, &metadata, &mut memory) {
            Err(EmberError::Io { path, source }) => {
                assert_eq!(path, Path::new("t.parquet"));
                assert_eq!(source.kind(), std::io::ErrorKind::OutOfMemory);
                let message = source.to_string();
                assert!(
                    message.contains("row group 0, column \"v\"")
                        && message.contains("the pool's limit is 100000 bytes"),
                    "{message}"
                );
            }
            other => panic!("expected an out-of-memory error, got {other:?}"),
        }
        assert_eq!(pool.used(), 0);
    }

    #[test]
    fn negative_footer_claims_are_corrupt_not_a_panic() {
        let (bytes, metadata) = small_file();
        let column = metadata.row_group(0).column(0).clone();
        let negative_size = column.clone().into_builder().set_total_compressed_size(-5);
        let negative_offset = column
            .clone()
            .into_builder()
            .set_dictionary_page_offset(Some(-1));
        let huge = column
            .into_builder()
            .set_dictionary_page_offset(Some(i64::MAX))
            .set_total_compressed_size(i64::MAX);
        for (builder, claim) in [
            (negative_size, "a column chunk of -5 compressed bytes"),
            (negative_offset, "a dictionary page offset of -1"),
            (huge, "claims 9223372036854775807 bytes, but the file is"),
        ] {
            let group = metadata
                .row_group(0)
                .clone()
                .into_builder()
                .set_column_metadata(vec![builder.build().unwrap()])
                .build()
                .unwrap();
            let patched = metadata
                .clone()
                .into_builder()
                .set_row_groups(vec![group])
                .build();
            let pool = MemoryPool::new(1 << 20);
            let mut memory = pool.reservation("reader");
            match check(&bytes, &patched, &mut memory) {
                Err(EmberError::Corrupt { what, message }) => {
                    assert!(what.contains("t.parquet"), "{what}");
                    assert!(
                        message.contains("row group 0, column \"v\"") && message.contains(claim),
                        "{message}"
                    );
                }
                other => panic!("expected a corrupt-file error, got {other:?}"),
            }
        }
    }
}
