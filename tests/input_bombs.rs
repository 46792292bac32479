//! Allocation bombs in input files: a tiny file whose lengths claim gigabytes must fail
//! with an error naming the file and the claim, before anything that large is
//! allocated. A counting global allocator records the largest single allocation of
//! this test binary, so each test checks that no buffer anywhere near the claim was
//! made (tests here run one at a time, under [`SERIAL`]).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::*;
use ember::io::object_file::{fingerprint, MAGIC, VERSION};
use ember::EmberError;

/// The system allocator, remembering the largest single allocation asked of it.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Largest = Largest;

/// One test at a time, so the largest allocation seen is the running test's.
static SERIAL: Mutex<()> = Mutex::new(());

/// The memory pool of every context here: far below any claim the files make.
const POOL: u64 = 64 << 20;

/// Runs `read`, checks that no allocation of the pool's size or more was made meanwhile,
/// and returns its error message.
fn failure_within_pool<T: std::fmt::Debug>(read: impl FnOnce() -> ember::Result<T>) -> String {
    LARGEST.store(0, Ordering::Relaxed);
    let result = read();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest < POOL as usize,
        "largest allocation {largest} bytes; the read gave {result:?}"
    );
    match result {
        Err(EmberError::TaskFailed { message, .. }) => message,
        other => panic!("expected a task failure, got {other:?}"),
    }
}

/// A 70-byte object file of `u8` whose one chunk claims a stored frame of 1 GiB.
fn object_file_claiming_a_gib(path: &Path) {
    let name = std::any::type_name::<u8>().as_bytes();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&fingerprint::<u8>().to_le_bytes());
    bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
    bytes.extend_from_slice(name);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let claim: u32 = 1 << 30;
    bytes.extend_from_slice(&1u32.to_le_bytes()); // records in the chunk
    bytes.extend_from_slice(&0u32.to_le_bytes()); // the frame's crc
    bytes.extend_from_slice(&claim.to_le_bytes()); // uncompressed length
    bytes.extend_from_slice(&(claim | ember_shuffle::frame::STORED).to_le_bytes());
    bytes.resize(70, 0);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_70_byte_object_file_claiming_a_gib_frame_fails_without_allocating_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("part-00000");
    object_file_claiming_a_gib(&file);
    let c = ctx_mem(1, POOL);
    let rdd = c.object_file::<u8>(dir.path().to_str().unwrap()).unwrap();
    let message = failure_within_pool(|| rdd.collect());
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert!(
        message.contains(
            "the frame of the chunk at byte 28 claims 1073741824 bytes, but the file \
             (70 bytes) has only 26 bytes left after byte 44"
        ),
        "{message}"
    );
}

#[cfg(feature = "parquet")]
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Row {
    v: i32,
}

#[cfg(feature = "parquet")]
/// A small Snappy Parquet file of one column whose one data page (1.6 MB of zeros, so
/// its uncompressed size is a 4-byte varint) is patched to claim 2^27 - 1 bytes
/// uncompressed: more than the pool, in a file of a few KiB. Returns the file's length.
fn parquet_claiming_128_mib(path: &Path) -> u64 {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int32Array, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::basic::Compression;
    use parquet::file::properties::WriterProperties;

    let values: ArrayRef = Arc::new(Int32Array::from(vec![0; 400_000]));
    let batch = RecordBatch::try_from_iter([("v", values)]).unwrap();
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_dictionary_enabled(false)
        .set_data_page_size_limit(8 << 20)
        .set_data_page_row_count_limit(1 << 20)
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None)
        .build();
    let mut bytes = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut bytes, batch.schema(), Some(props)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    // The first page header starts after the 4-byte magic: field 1 (type, i32) =
    // DATA_PAGE, then field 2 (uncompressed size, i32) as a zigzag varint.
    let header = &bytes[4..];
    assert_eq!(&header[..3], &[0x15, 0x00, 0x15], "a data page header");
    let varint = &header[3..7];
    assert!(varint[..3].iter().all(|b| b & 0x80 != 0) && varint[3] & 0x80 == 0);
    // zigzag(2^27 - 1) = 2^28 - 2, as a 4-byte varint.
    bytes[7..11].copy_from_slice(&[0xfe, 0xff, 0xff, 0x7f]);
    std::fs::write(path, &bytes).unwrap();
    bytes.len() as u64
}

#[cfg(feature = "parquet")]
#[test]
fn a_parquet_page_claiming_more_than_the_pool_fails_without_allocating_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bomb.parquet");
    let len = parquet_claiming_128_mib(&file);
    assert!(len < 100_000, "{len} bytes");
    let c = ctx_mem(1, POOL);
    let path = file.to_str().unwrap();
    for read in [
        Box::new(|| {
            c.read_parquet::<Row>(path)
                .unwrap()
                .collect()
                .map(|rows| rows.len())
        }) as Box<dyn Fn() -> _>,
        Box::new(|| {
            c.read_parquet_batches(path)
                .unwrap()
                .collect()
                .map(|batches| batches.len())
        }),
    ] {
        let message = failure_within_pool(read);
        assert!(message.contains(path), "{message}");
        assert!(
            message.contains(
                "row group 0, column \"v\", byte 4: a page claims 134217727 uncompressed bytes"
            ) && message.contains("more than the memory pool grants"),
            "{message}"
        );
    }
}

/// A Parquet file whose footer places a column chunk past the end of the file.
#[cfg(feature = "parquet")]
#[test]
fn a_parquet_column_chunk_past_the_end_of_the_file_is_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("short.parquet");
    parquet_claiming_128_mib(&file);
    // Drop the pages, keep the magic and the footer: the column chunk's range now lies
    // past the end.
    let bytes = std::fs::read(&file).unwrap();
    let footer_len =
        u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap());
    let footer_start = bytes.len() - 8 - footer_len as usize;
    let mut short = bytes[..4].to_vec();
    short.extend_from_slice(&bytes[footer_start..]);
    std::fs::write(&file, &short).unwrap();
    let c = ctx_mem(1, POOL);
    let path = file.to_str().unwrap();
    let message = failure_within_pool(|| c.read_parquet_batches(path).unwrap().count());
    // The chunk held the pages (whatever else the writer put before the footer is not
    // part of it).
    let claimed: usize = message
        .split("row group 0, column \"v\", byte 4: the column chunk claims ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{message}"));
    assert!(
        claimed > short.len() && claimed <= footer_start - 4,
        "{message}"
    );
    assert!(
        message.contains(&format!("bytes, but the file is {} bytes", short.len())),
        "{message}"
    );
}

/// An Arrow IPC record (as shuffles, caches and results carry `ArrowBatch`) whose batch
/// message claims a 1 TiB body.
#[cfg(feature = "parquet")]
#[test]
fn an_arrow_ipc_record_claiming_a_tib_body_fails_without_allocating_it() {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, Int8Array, RecordBatch};
    use ember::ArrowBatch;

    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let wide: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1000));
    let narrow: ArrayRef = Arc::new(Int8Array::from_iter_values((0..1000).map(|i| i as i8)));
    let batch = RecordBatch::try_from_iter([("wide", wide), ("narrow", narrow)]).unwrap();
    let mut bytes = ArrowBatch(batch.clone()).to_ipc().unwrap();
    assert_eq!(ArrowBatch::from_ipc(&bytes).unwrap().0, batch);
    // The second message (after the schema) is the batch: patch its body length, a
    // little-endian i64 found exactly once in its metadata.
    let meta_len = |at: usize| i32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap());
    let schema_end = 8 + meta_len(0) as usize;
    let meta = schema_end + 8..schema_end + 8 + meta_len(schema_end) as usize;
    let body = arrow_ipc::root_as_message(&bytes[meta.clone()])
        .unwrap()
        .bodyLength();
    let needle = body.to_le_bytes();
    let found: Vec<usize> = (meta.start..meta.end - 8)
        .filter(|&i| bytes[i..i + 8] == needle)
        .collect();
    assert_eq!(found.len(), 1, "body length {body} at {found:?}");
    bytes[found[0]..found[0] + 8].copy_from_slice(&(1i64 << 40).to_le_bytes());

    LARGEST.store(0, Ordering::Relaxed);
    let result = ArrowBatch::from_ipc(&bytes);
    let largest = LARGEST.load(Ordering::Relaxed);
    let message = result.unwrap_err();
    assert!(
        largest < POOL as usize,
        "largest allocation {largest} bytes"
    );
    assert_eq!(
        message,
        format!(
            "Arrow IPC message 1 at byte {schema_end} claims a body of {} bytes, but the \
             stream has {} bytes left",
            1i64 << 40,
            bytes.len() - meta.end
        )
    );
}

/// An object file chunk that fits its file but not the pool (one incompressible record
/// of 2 MiB read under a 1 MiB pool) is refused before its buffers are allocated,
/// naming the chunk and what it needs; the same file reads under a pool that holds it.
#[test]
fn an_object_file_chunk_over_the_pool_is_refused_naming_what_it_needs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let record: Vec<u8> = (0..2 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    ctx_mem(1, POOL)
        .parallelize(vec![record.clone()], 1)
        .save_as_object_file(&out)
        .unwrap();
    let small = ctx_mem(1, 1 << 20);
    let rdd = small.object_file::<Vec<u8>>(out.to_str().unwrap()).unwrap();
    let message = match rdd.collect() {
        Err(EmberError::TaskFailed { message, .. }) => message,
        other => panic!("expected a task failure, got {:?}", other.map(|v| v.len())),
    };
    assert!(message.contains("part-00000"), "{message}");
    assert!(
        message.contains("the chunk at byte ")
            && message.contains("more than the memory pool grants"),
        "{message}"
    );
    let back = ctx_mem(1, POOL)
        .object_file::<Vec<u8>>(out.to_str().unwrap())
        .unwrap()
        .collect()
        .unwrap();
    assert_eq!(back, vec![record]);
}
