//! The two forms of a [`ShuffleInput`] (see `ember.proto`), and turning the compact one
//! back into [`MapLocation`]s for the task that reads them.
//!
//! Invariant: [`ShuffleInput::map_locations`] either returns every map of both forms or
//! an error naming what is inconsistent; it never guesses a host or a size. The arrays'
//! lengths are bounded by the decoded message, which the transport already bounds, and
//! nothing is allocated for them before they are checked against each other.

use prost::bytes::Bytes;

use crate::{MapHost, MapLocation, ShuffleInput};

/// The packed size that stands for "u32::MAX or more": the exact value is the next one
/// of `large_block_sizes`.
pub const LARGE_BLOCK: u32 = u32::MAX;

/// A compact shuffle input whose arrays do not fit together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidShuffleInput {
    /// The shuffle the input is for.
    pub shuffle_id: u32,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for InvalidShuffleInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shuffle {} input: {}", self.shuffle_id, self.reason)
    }
}

impl std::error::Error for InvalidShuffleInput {}

/// `values` packed little-endian, four bytes each.
pub fn pack_u32s(values: impl IntoIterator<Item = u32>) -> Bytes {
    let values = values.into_iter();
    let mut out = Vec::with_capacity(values.size_hint().0 * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.into()
}

/// The packed form of one block size: the size itself, or [`LARGE_BLOCK`] with the
/// size pushed onto `large`.
pub fn pack_size(size: u64, large: &mut Vec<u64>) -> u32 {
    match u32::try_from(size) {
        Ok(v) if v < LARGE_BLOCK => v,
        _ => {
            large.push(size);
            LARGE_BLOCK
        }
    }
}

/// The marker of a large size among packed sizes of `bytes` bytes (1, 2 or 4): the
/// largest value of that width.
pub fn large_marker(bytes: usize) -> u32 {
    match bytes {
        1 => u32::from(u8::MAX),
        2 => u32::from(u16::MAX),
        _ => LARGE_BLOCK,
    }
}

/// The u32s of a packed array.
fn unpack(b: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
}

/// The sizes of a packed array of `bytes`-byte values (1, 2 or 4), each marker of a
/// large size read as [`LARGE_BLOCK`].
fn unpack_sizes(b: &[u8], bytes: usize) -> impl ExactSizeIterator<Item = u32> + '_ {
    let marker = large_marker(bytes);
    b.chunks_exact(bytes).map(move |c| {
        let v = match c {
            [a] => u32::from(*a),
            [a, b] => u32::from(u16::from_le_bytes([*a, *b])),
            [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]),
            _ => unreachable!("chunks of 1, 2 or 4 bytes"),
        };
        if v == marker {
            LARGE_BLOCK
        } else {
            v
        }
    })
}

impl ShuffleInput {
    /// The compact form for one reduce partition, from `(map_partition, host, size)`
    /// triples with `host` an index into `hosts`.
    pub fn compact(
        shuffle_id: u32,
        reduce: u32,
        hosts: Vec<MapHost>,
        maps: impl ExactSizeIterator<Item = (u32, u32, u64)>,
    ) -> Self {
        let n = maps.len();
        let (mut partitions, mut map_hosts, mut sizes) = (
            Vec::with_capacity(n * 4),
            Vec::with_capacity(n * 4),
            Vec::with_capacity(n * 4),
        );
        let mut large = Vec::new();
        for (map, host, size) in maps {
            partitions.extend_from_slice(&map.to_le_bytes());
            map_hosts.extend_from_slice(&host.to_le_bytes());
            sizes.extend_from_slice(&pack_size(size, &mut large).to_le_bytes());
        }
        ShuffleInput {
            shuffle_id,
            hosts,
            reduce,
            map_partitions: partitions.into(),
            map_hosts: map_hosts.into(),
            map_block_sizes: sizes.into(),
            large_block_sizes: large,
            ..Default::default()
        }
    }

    /// Maps in either form.
    pub fn num_maps(&self) -> usize {
        self.maps.len() + self.map_partitions.len() / 4
    }

    /// Every map location of both forms (the compact ones with the one block size of
    /// `reduce`), or what makes the compact form inconsistent.
    pub fn map_locations(self) -> Result<Vec<MapLocation>, InvalidShuffleInput> {
        let bad = |reason: String| InvalidShuffleInput {
            shuffle_id: self.shuffle_id,
            reason,
        };
        let size_bytes = match self.block_size_bytes {
            0 | 4 => 4,
            w @ (1 | 2) => w as usize,
            w => {
                return Err(bad(format!(
                    "block sizes of {w} bytes each (1, 2 or 4 are known)"
                )))
            }
        };
        for (name, b, w) in [
            ("map partitions", &self.map_partitions, 4),
            ("map hosts", &self.map_hosts, 4),
            ("block sizes", &self.map_block_sizes, size_bytes),
        ] {
            if b.len() % w != 0 {
                return Err(bad(format!(
                    "{name}: {} bytes, not a whole number of {w}-byte values",
                    b.len()
                )));
            }
        }
        let n = self.map_partitions.len() / 4;
        let sizes = self.map_block_sizes.len() / size_bytes;
        if self.map_hosts.len() / 4 != n || sizes != n {
            return Err(bad(format!(
                "{n} map partitions but {} hosts and {sizes} block sizes",
                self.map_hosts.len() / 4,
            )));
        }
        if let Some(h) = unpack(&self.map_hosts).find(|&h| h as usize >= self.hosts.len()) {
            return Err(bad(format!(
                "host index {h} but only {} hosts",
                self.hosts.len()
            )));
        }
        let marked = unpack_sizes(&self.map_block_sizes, size_bytes)
            .filter(|&v| v == LARGE_BLOCK)
            .count();
        if marked != self.large_block_sizes.len() {
            return Err(bad(format!(
                "{marked} block sizes marked large but {} large sizes",
                self.large_block_sizes.len()
            )));
        }
        let mut hosts = Vec::with_capacity(self.hosts.len());
        for (i, host) in self.hosts.iter().enumerate() {
            let text = |field: &str, b: &[u8]| {
                std::str::from_utf8(b).map(str::to_string).map_err(|_| {
                    let shown = String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned();
                    bad(format!("host {i}: {field} {shown:?} is not UTF-8"))
                })
            };
            hosts.push((
                text("executor id", &host.executor_id)?,
                text("shuffle address", &host.shuffle_address)?,
                host.from_storage,
            ));
        }
        let mut out = self.maps;
        out.reserve(n);
        let mut large = self.large_block_sizes.iter();
        let triples = unpack(&self.map_partitions)
            .zip(unpack(&self.map_hosts))
            .zip(unpack_sizes(&self.map_block_sizes, size_bytes));
        for ((map_partition, host), size) in triples {
            let (executor_id, shuffle_address, from_storage) = &hosts[host as usize];
            let size = match size {
                // As many large sizes as markers (checked above).
                LARGE_BLOCK => large.next().copied().unwrap_or(u64::MAX),
                v => u64::from(v),
            };
            out.push(MapLocation {
                replicas: Default::default(),
                map_partition,
                executor_id: executor_id.clone(),
                shuffle_address: shuffle_address.clone(),
                block_sizes: vec![size],
                first_reduce: self.reduce,
                stored: *from_storage,
                from_storage: *from_storage,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(e: &str) -> MapHost {
        MapHost {
            from_storage: false,
            executor_id: prost::bytes::Bytes::copy_from_slice(e.as_bytes()),
            shuffle_address: format!("{e}:7000").into(),
        }
    }

    #[test]
    fn compact_form_expands_to_the_locations_it_was_built_from() {
        let input = ShuffleInput::compact(
            4,
            9,
            vec![host("a"), host("b")],
            [
                (0, 1, 10),
                (1, 0, 0),
                (2, 1, u64::from(u32::MAX)),
                (3, 0, 7),
                (4, 1, 1 << 40),
            ]
            .into_iter(),
        );
        assert_eq!(input.num_maps(), 5);
        assert_eq!(input.large_block_sizes, vec![u64::from(u32::MAX), 1 << 40]);
        let locs = input.map_locations().unwrap();
        let got: Vec<_> = locs
            .iter()
            .map(|l| {
                (
                    l.map_partition,
                    l.executor_id.as_str(),
                    l.shuffle_address.as_str(),
                    l.block_sizes.clone(),
                    l.first_reduce,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "b", "b:7000", vec![10], 9),
                (1, "a", "a:7000", vec![0], 9),
                (2, "b", "b:7000", vec![u64::from(u32::MAX)], 9),
                (3, "a", "a:7000", vec![7], 9),
                (4, "b", "b:7000", vec![1 << 40], 9),
            ]
        );
    }

    #[test]
    fn narrow_sizes_expand_as_four_byte_ones_do() {
        let sizes = [0u64, 7, 254, 255, 300, 1 << 40];
        let wide = ShuffleInput::compact(
            2,
            1,
            vec![host("a")],
            sizes.iter().enumerate().map(|(m, &s)| (m as u32, 0, s)),
        );
        let expect = wide.clone().map_locations().unwrap();
        let read = |input: ShuffleInput| -> Vec<u64> {
            let locs = input.map_locations().unwrap();
            assert_eq!(locs.len(), sizes.len());
            locs.iter().map(|l| l.block_sizes[0]).collect()
        };
        assert_eq!(read(wide.clone()), sizes);
        // One byte each: 255 and up are markers with their sizes in the side list.
        let mut one = wide.clone();
        one.block_size_bytes = 1;
        one.map_block_sizes = vec![0, 7, 254, 0xff, 0xff, 0xff].into();
        one.large_block_sizes = vec![255, 300, 1 << 40];
        assert_eq!(one.clone().map_locations().unwrap(), expect);
        // Two bytes each.
        let mut two = wide.clone();
        two.block_size_bytes = 2;
        let packed: Vec<u8> = [0u16, 7, 254, 255, 300, 0xffff]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        two.map_block_sizes = packed.into();
        two.large_block_sizes = vec![1 << 40];
        assert_eq!(two.map_locations().unwrap(), expect);
        // Widths that do not fit the arrays, or are unknown, are errors.
        let mut short = one.clone();
        short.map_block_sizes.truncate(5);
        assert_eq!(
            short.map_locations().unwrap_err().to_string(),
            "shuffle 2 input: 6 map partitions but 6 hosts and 5 block sizes"
        );
        let mut odd = wide.clone();
        odd.block_size_bytes = 2;
        odd.map_block_sizes.truncate(23);
        assert_eq!(
            odd.map_locations().unwrap_err().to_string(),
            "shuffle 2 input: block sizes: 23 bytes, not a whole number of 2-byte values"
        );
        let mut unknown = wide;
        unknown.block_size_bytes = 3;
        assert_eq!(
            unknown.map_locations().unwrap_err().to_string(),
            "shuffle 2 input: block sizes of 3 bytes each (1, 2 or 4 are known)"
        );
    }

    #[test]
    fn inconsistent_compact_forms_are_errors() {
        let good = ShuffleInput::compact(3, 0, vec![host("a")], [(0, 0, 1), (1, 0, 2)].into_iter());
        let mut short = good.clone();
        short.map_block_sizes.truncate(4);
        let err = short.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: 2 map partitions but 2 hosts and 1 block sizes"
        );
        let mut ragged = good.clone();
        ragged.map_hosts.truncate(7);
        let err = ragged.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: map hosts: 7 bytes, not a whole number of 4-byte values"
        );
        let mut unmarked = good.clone();
        unmarked.large_block_sizes.push(1 << 40);
        let err = unmarked.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: 0 block sizes marked large but 1 large sizes"
        );
        let mut far = good.clone();
        far.map_hosts = pack_u32s([0, 5]);
        let err = far.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: host index 5 but only 1 hosts"
        );
        let mut garbled = good.clone();
        garbled.hosts[0].shuffle_address = vec![b'h', 0xff, b':', b'1'].into();
        let err = garbled.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: host 0: shuffle address \"h\u{fffd}:1\" is not UTF-8"
        );
        // The general form passes through, ahead of the compact one.
        let mut both = good;
        both.maps.push(MapLocation {
            map_partition: 7,
            executor_id: "z".into(),
            ..Default::default()
        });
        let maps: Vec<u32> = both
            .map_locations()
            .unwrap()
            .iter()
            .map(|l| l.map_partition)
            .collect();
        assert_eq!(maps, vec![7, 0, 1]);
    }
}
