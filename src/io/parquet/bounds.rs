//! The lengths a Parquet file claims, checked before the `parquet` crate allocates from
//! them. The crate sizes a page's decompression buffer from the page header's
//! uncompressed size (up to 2 GiB from a 562-byte file), and reads a column chunk by
//! the byte range its footer entry claims; neither is checked against the file or the
//! memory pool.
//!
//! Before a task decodes a row group, [`check_row_group`] checks, for every column it
//! reads: that the column chunk's byte range lies inside the file; that every page
//! header in it parses, claims a non-negative compressed size that fits in what is left
//! of the chunk, and a non-negative uncompressed size; and it charges the largest page
//! (its compressed and uncompressed buffers together) to the task's memory reservation.
//! A claim that fails any of these is an error naming the file, row group, column and
//! byte offset, and what was claimed against what the file or the pool holds.
//!
//! Page headers are Thrift compact structs; they are read with the `thrift` crate,
//! only their two size fields kept. Encrypted files (whose headers are encrypted) are
//! not supported by ember's reader.

use std::io::Read;
use std::path::Path;

use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;
use thrift::protocol::{TCompactInputProtocol, TInputProtocol, TType};

use super::source::corrupt;
use crate::error::Result;
use crate::memory::Reservation;

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
        let (start, len) = column.byte_range();
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
            if buffers > memory.size() {
                memory.resize(buffers).map_err(|e| {
                    corrupt(
                        path,
                        format!(
                            "{}: a page claims {} uncompressed bytes ({} compressed), more \
                             than the memory pool grants: {e}",
                            at(offset),
                            page.uncompressed,
                            page.compressed
                        ),
                    )
                })?;
            }
            offset += page.header + page.compressed as u64;
        }
    }
    Ok(())
}
