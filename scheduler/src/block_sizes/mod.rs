//! The block sizes of one shuffle's map statuses, kept as a compact matrix: one row of
//! `width` sizes (one per reduce partition) for each map partition.
//!
//! A status arrives as a vector of 64-bit sizes, one heap allocation per map; 50,000
//! maps of 1,000 reducers are 400 MB scattered over 50,000 allocations, and every reduce
//! input reads one size from each. Here a size takes 8, 16 or 32 bits (the fewest that
//! hold every size of its chunk, see [`chunk`]), and rows are stored in chunks of
//! consecutive maps (allocated when the first output of a chunk arrives), each chunk
//! laid out by column block: the sizes of [`BLOCK_COLUMNS`] reducers for all its
//! maps, then the next block's. Gathering one column block for every map is then a walk
//! through memory in order, which the hardware prefetcher follows.
//!
//! Invariants: [`BlockSizes::get`] returns exactly the size the status last stored for
//! that map reported, never a rounded one: a block of [`LARGE`] bytes or more is stored as
//! `LARGE` with its exact size in a side table, and storing a row again drops the side
//! entries of the row it replaces. The caller (the tracker) reads only rows it has stored.

use std::collections::HashMap;

use chunk::{Chunk, Segment, Stored};
use ember_proto::shuffle_input::large_marker;

mod chunk;

/// The stored value of a size that does not fit below it (its exact size is in `large`):
/// the same marker as a packed shuffle input's, so a stored size is packed as it is.
pub const LARGE: u32 = ember_proto::shuffle_input::LARGE_BLOCK;

/// About how many bytes one chunk of rows takes: a chunk holds as many whole rows as fit
/// (at least one, at most [`CHUNK_ROWS`]).
const CHUNK_BYTES: usize = 1 << 20;

/// Most map partitions one chunk holds.
const CHUNK_ROWS: usize = 64;

/// Columns of one column block: a chunk stores its rows' sizes of one such block
/// together, so gathering a run of columns reads memory in order.
pub const BLOCK_COLUMNS: usize = 128;

/// The block sizes of every stored map status of a shuffle whose statuses have `width`
/// blocks.
#[derive(Debug)]
pub struct BlockSizes {
    width: usize,
    rows_per_chunk: usize,
    chunks: Vec<Option<Chunk>>,
    /// Exact sizes of the blocks stored as [`LARGE`], by (map, reduce).
    large: HashMap<(u32, u32), u64>,
    /// At least every stored value (it never shrinks): what says how narrow the sizes
    /// may be packed (see [`BlockSizes::packed_bytes`]).
    max: u32,
    /// The row being stored, packed (reused by every `store`).
    row: Vec<u32>,
}

impl BlockSizes {
    /// Room for `maps` rows of `width` sizes; nothing is allocated until rows are stored.
    pub fn new(maps: usize, width: usize) -> BlockSizes {
        let rows_per_chunk = (CHUNK_BYTES / (width.max(1) * 4)).clamp(1, CHUNK_ROWS);
        BlockSizes {
            width,
            rows_per_chunk,
            chunks: std::iter::repeat_with(|| None)
                .take(maps.div_ceil(rows_per_chunk))
                .collect(),
            large: HashMap::new(),
            max: 0,
            row: Vec::new(),
        }
    }

    /// The fewest bytes (1, 2 or 4) each stored size can be packed in without a marker
    /// of a large size (`ember_proto::shuffle_input::large_marker`) among them.
    pub fn packed_bytes(&self) -> usize {
        [1, 2]
            .into_iter()
            .find(|&bytes| self.max < large_marker(bytes))
            .unwrap_or(4)
    }

    /// Blocks per row (the shuffle's reduce partitions).
    pub fn width(&self) -> usize {
        self.width
    }

    /// Stores map `m`'s sizes (`sizes.len()` must be the width), replacing any row stored
    /// for it before.
    pub fn store(&mut self, m: u32, sizes: &[u64]) {
        assert_eq!(sizes.len(), self.width, "a row of another width");
        let (width, rows) = (self.width, self.rows_per_chunk);
        let mut row = std::mem::take(&mut self.row);
        row.clear();
        row.extend(sizes.iter().map(|&size| match u32::try_from(size) {
            Ok(v) if v < LARGE => v,
            _ => LARGE,
        }));
        let max = row.iter().copied().max().unwrap_or(0);
        self.max = self.max.max(max);
        let c = m as usize / rows;
        let chunk = self.chunks[c].get_or_insert_with(|| Chunk::new(rows * width));
        chunk.fit(max);
        // Only a 32-bit chunk can hold `LARGE`s, the side entries of the row replaced.
        let replaced_large = !self.large.is_empty() && chunk.bytes() == 4;
        for b in 0..width.div_ceil(BLOCK_COLUMNS) {
            let base = b * BLOCK_COLUMNS;
            let at = self.segment_at(m, b);
            let chunk = self.chunks[c].as_mut().expect("allocated above");
            if replaced_large {
                let old = chunk.segment(at.clone());
                for i in 0..at.len() {
                    if old.get(i) == LARGE {
                        self.large.remove(&(m, (base + i) as u32));
                    }
                }
            }
            chunk.write(at.start, &row[base..base + at.len()]);
        }
        for (r, (&v, &size)) in row.iter().zip(sizes).enumerate() {
            if v == LARGE {
                self.large.insert((m, r as u32), size);
            }
        }
        self.row = row;
    }

    /// The size of block `r` of map `m` (`r` below the width).
    pub fn get(&self, m: u32, r: usize) -> u64 {
        let v = self.segment(m, r / BLOCK_COLUMNS).get(r % BLOCK_COLUMNS);
        self.widen(m, r, v)
    }

    /// Every size of map `m`'s row.
    pub fn sizes(&self, m: u32) -> Vec<u64> {
        (0..self.width).map(|r| self.get(m, r)).collect()
    }

    /// Writes a tile of a transpose: for each column `c` of `first..first + width`, the
    /// packed sizes of block `c` of each map of `maps` in turn, as little-endian values of
    /// `bytes` bytes (at least [`BlockSizes::packed_bytes`]) at value positions
    /// `(c - first) * stride + at ..` of `out`; the exact size of each one packed as
    /// [`LARGE`] is pushed onto `large[c - first]`. The segments read are
    /// consecutive in memory when `maps` are (a chunk keeps each column block's segments
    /// together), and they stay in the cache while every column takes its run of
    /// `maps.len()` sizes at once.
    #[allow(clippy::too_many_arguments)]
    pub fn pack_tile(
        &self,
        maps: &[u32],
        first: usize,
        width: usize,
        out: &mut [u8],
        stride: usize,
        at: usize,
        bytes: usize,
        large: &mut [Vec<u64>],
    ) {
        let end = first + width;
        assert!(end <= self.width, "columns past the width");
        assert!(at + maps.len() <= stride, "a tile past its column");
        assert!(
            bytes == 4 || (bytes >= self.packed_bytes() && bytes < 4),
            "sizes packed narrower than they fit"
        );
        let mut segments: Vec<Segment<'_>> = Vec::with_capacity(maps.len());
        let mut r = first;
        while r < end {
            let b = r / BLOCK_COLUMNS;
            let base = b * BLOCK_COLUMNS;
            let hi = end.min(base + BLOCK_COLUMNS);
            segments.clear();
            segments.extend(maps.iter().map(|&m| self.segment(m, b)));
            let block = Tile {
                maps,
                columns: r..hi,
                base,
                first,
                stride,
                at,
                bytes,
            };
            // Nearly always every segment has one width (a tile of consecutive maps
            // lies in one or two chunks): its values are read without a branch.
            macro_rules! typed {
                ($variant:ident) => {
                    segments
                        .iter()
                        .map(|s| match s {
                            Segment::$variant(v) => Some(*v),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                };
            }
            if let Some(segs) = typed!(U8) {
                self.pack_block(&block, &segs, out, large);
            } else if let Some(segs) = typed!(U16) {
                self.pack_block(&block, &segs, out, large);
            } else if let Some(segs) = typed!(U32) {
                self.pack_block(&block, &segs, out, large);
            } else {
                let owned: Vec<Vec<u32>> = segments
                    .iter()
                    .map(|s| (0..s.len()).map(|i| s.get(i)).collect())
                    .collect();
                let segs: Vec<&[u32]> = owned.iter().map(Vec::as_slice).collect();
                self.pack_block(&block, &segs, out, large);
            }
            r = hi;
        }
    }

    /// [`BlockSizes::pack_tile`] for one column block whose segments (one per map of the
    /// tile) are all of one width.
    fn pack_block<T: Stored>(
        &self,
        t: &Tile<'_>,
        segments: &[&[T]],
        out: &mut [u8],
        large: &mut [Vec<u64>],
    ) {
        let n = t.maps.len();
        for i in t.columns.clone() {
            let c = i - t.first;
            let j = i - t.base;
            let start = (c * t.stride + t.at) * t.bytes;
            let dst = &mut out[start..start + n * t.bytes];
            match t.bytes {
                // Narrow: every stored value is below the width's marker (none is `LARGE`).
                1 => {
                    for (d, seg) in dst.iter_mut().zip(segments) {
                        *d = seg[j].into() as u8;
                    }
                }
                2 => {
                    for (d, seg) in dst.chunks_exact_mut(2).zip(segments) {
                        d.copy_from_slice(&(seg[j].into() as u16).to_le_bytes());
                    }
                }
                // No size is stored as `LARGE` (nearly every shuffle): plain copies,
                // nothing to look up.
                _ if self.large.is_empty() => {
                    for (d, seg) in dst.chunks_exact_mut(4).zip(segments) {
                        d.copy_from_slice(&seg[j].into().to_le_bytes());
                    }
                }
                _ => {
                    for (d, (seg, &m)) in dst.chunks_exact_mut(4).zip(segments.iter().zip(t.maps)) {
                        let v: u32 = seg[j].into();
                        if v == LARGE {
                            large[c].push(self.large[&(m, i as u32)]);
                        }
                        d.copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
    }

    fn widen(&self, m: u32, r: usize, v: u32) -> u64 {
        if v == LARGE {
            self.large[&(m, r as u32)]
        } else {
            u64::from(v)
        }
    }

    /// Map `m`'s sizes of column block `b` (columns `b * BLOCK_COLUMNS` on).
    fn segment(&self, m: u32, b: usize) -> Segment<'_> {
        let at = self.segment_at(m, b);
        match &self.chunks[m as usize / self.rows_per_chunk] {
            Some(chunk) => chunk.segment(at),
            None => panic!("map {m}: no row stored"),
        }
    }

    /// Where in its chunk map `m`'s segment of column block `b` lies: a chunk holds, for
    /// each column block in turn, the segments of its rows one after another.
    fn segment_at(&self, m: u32, b: usize) -> std::ops::Range<usize> {
        let base = b * BLOCK_COLUMNS;
        let columns = BLOCK_COLUMNS.min(self.width - base);
        let row = m as usize % self.rows_per_chunk;
        let start = self.rows_per_chunk * base + row * columns;
        start..start + columns
    }
}

/// Where one column block of a tile goes (see [`BlockSizes::pack_tile`]).
struct Tile<'a> {
    maps: &'a [u32],
    columns: std::ops::Range<usize>,
    /// The block's first column.
    base: usize,
    /// The first column of the whole run packed (column `first` is at 0 in `out`).
    first: usize,
    stride: usize,
    at: usize,
    bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_each_stored_size_exactly_however_large() {
        let width = 300;
        let maps = 200;
        let mut sizes = BlockSizes::new(maps, width);
        assert!(sizes.rows_per_chunk < maps, "several chunks");
        let row = |m: u64| -> Vec<u64> {
            (0..width as u64)
                .map(|r| match (m + r) % 7 {
                    0 => u64::from(u32::MAX) + m * 1000 + r, // over 32 bits
                    1 => u64::from(LARGE),                   // exactly the marker
                    2 => 0,
                    _ => m * 1000 + r,
                })
                .collect()
        };
        for m in (0..maps as u32).rev() {
            sizes.store(m, &row(u64::from(m)));
        }
        for m in 0..maps as u32 {
            assert_eq!(sizes.sizes(m), row(u64::from(m)), "map {m}");
            assert_eq!(sizes.get(m, 5), row(u64::from(m))[5]);
        }
        // A tile of maps in any order gives each column those maps' packed sizes in that
        // order, within a column block, across two, and in the narrower last one, with
        // the exact sizes of the large ones beside them in the same order.
        let tile = [9, 2, 150, 3];
        for (first, n) in [(17, 10), (120, 20), (280, 20)] {
            let stride = tile.len() + 1;
            let mut out = vec![0xAA; n * stride * 4];
            let mut large = vec![Vec::new(); n];
            sizes.pack_tile(&tile, first, n, &mut out, stride, 1, 4, &mut large);
            for c in 0..n {
                let column = &out[c * stride * 4..(c + 1) * stride * 4];
                assert_eq!(
                    &column[..4],
                    &[0xAA; 4],
                    "column {}: before the tile",
                    first + c
                );
                let mut big = Vec::new();
                let want: Vec<u8> = tile
                    .iter()
                    .flat_map(|&m| {
                        let size = row(u64::from(m))[first + c];
                        ember_proto::shuffle_input::pack_size(size, &mut big).to_le_bytes()
                    })
                    .collect();
                assert_eq!(&column[4..], &want[..], "column {}", first + c);
                assert_eq!(large[c], big, "column {}", first + c);
            }
        }
        // A row stored again replaces the old one, side entries too.
        let small: Vec<u64> = (0..width as u64).collect();
        let large_before = sizes.large.len();
        sizes.store(3, &small);
        assert_eq!(sizes.sizes(3), small);
        assert!(sizes.large.len() < large_before);
        assert_eq!(sizes.sizes(4), row(4));
    }

    #[test]
    fn a_matrix_without_large_sizes_packs_the_same_tiles_at_every_width() {
        // No size is large: `pack_tile` takes its plain-copy path (four bytes), or packs
        // one or two bytes a size when every size fits below that width's marker; each
        // must write exactly the sizes the general path writes.
        let (width, maps) = (300, 130);
        // Largest sizes 254, 65,534 and 2,000,000: one, two and four bytes.
        for (scale, modulo, bytes) in [(1, 255, 1), (7, 65_535, 2), (3, 2_000_001, 4)] {
            let row = |m: u32| -> Vec<u64> {
                (0..width as u64)
                    .map(|r| match (m, r) {
                        (5, 0) => modulo - 1,
                        _ => (u64::from(m) * 7919 + r * scale) % modulo,
                    })
                    .collect()
            };
            let mut sizes = BlockSizes::new(maps, width);
            for m in (0..maps as u32).rev() {
                sizes.store(m, &row(m));
            }
            assert!(sizes.large.is_empty());
            assert_eq!(sizes.packed_bytes(), bytes, "largest size {}", modulo - 1);
            let tile = [100, 0, 129, 64];
            let (first, n, stride) = (120, 150, tile.len());
            for out_bytes in [bytes, 4] {
                let mut out = vec![0; n * stride * out_bytes];
                let mut large = vec![Vec::new(); n];
                sizes.pack_tile(&tile, first, n, &mut out, stride, 0, out_bytes, &mut large);
                for c in 0..n {
                    let want: Vec<u8> = tile
                        .iter()
                        .flat_map(|&m| {
                            let v = row(m)[first + c] as u32;
                            v.to_le_bytes()[..out_bytes].to_vec()
                        })
                        .collect();
                    let column = c * stride * out_bytes..(c + 1) * stride * out_bytes;
                    assert_eq!(&out[column], &want[..], "column {c}, {out_bytes} bytes");
                }
                assert!(large.iter().all(Vec::is_empty));
            }
        }
    }

    #[test]
    fn a_tile_over_chunks_of_different_widths_packs_every_size() {
        let (width, maps) = (300, 130);
        let row = |m: u32| -> Vec<u64> {
            (0..width as u64)
                .map(|r| match m {
                    64..=127 => 70_000 + r, // chunk 1: 32 bits
                    0..=63 => 300 + r,      // chunk 0: 16 bits
                    _ => r % 200,           // chunk 2: 8 bits
                })
                .collect()
        };
        let mut sizes = BlockSizes::new(maps, width);
        assert_eq!(sizes.rows_per_chunk, 64);
        for m in 0..maps as u32 {
            sizes.store(m, &row(m));
        }
        let widths: Vec<usize> = sizes.chunks.iter().flatten().map(Chunk::bytes).collect();
        assert_eq!(widths, vec![2, 4, 1]);
        assert_eq!(sizes.packed_bytes(), 4);
        let tile = [100, 0, 129, 64];
        let (first, n, stride) = (0, width, tile.len());
        let mut out = vec![0; n * stride * 4];
        let mut large = vec![Vec::new(); n];
        sizes.pack_tile(&tile, first, n, &mut out, stride, 0, 4, &mut large);
        for c in 0..n {
            let want: Vec<u8> = tile
                .iter()
                .flat_map(|&m| (row(m)[c] as u32).to_le_bytes())
                .collect();
            assert_eq!(
                &out[c * stride * 4..(c + 1) * stride * 4],
                &want[..],
                "column {c}"
            );
        }
        // A row stored again in a narrow chunk with a large size widens that chunk only.
        let mut big = row(130 - 1);
        big[7] = 1 << 40;
        sizes.store(129, &big);
        assert_eq!(sizes.sizes(129), big);
        assert_eq!(sizes.sizes(128), row(128));
        assert_eq!(sizes.sizes(3), row(3));
    }

    #[test]
    fn zero_reducers_store_empty_rows() {
        let mut sizes = BlockSizes::new(3, 0);
        sizes.store(1, &[]);
        assert_eq!(sizes.sizes(1), Vec::<u64>::new());
        assert_eq!(sizes.sizes(2), Vec::<u64>::new());
    }
}
