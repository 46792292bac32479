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

/// The u32s of a packed array.
fn unpack(b: &[u8]) -> impl ExactSizeIterator<Item = u32> + '_ {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
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
        for (name, b) in [
            ("map partitions", &self.map_partitions),
            ("map hosts", &self.map_hosts),
            ("block sizes", &self.map_block_sizes),
        ] {
            if b.len() % 4 != 0 {
                return Err(bad(format!(
                    "{name}: {} bytes, not a whole number of 4-byte values",
                    b.len()
                )));
            }
        }
        let n = self.map_partitions.len() / 4;
        if self.map_hosts.len() / 4 != n || self.map_block_sizes.len() / 4 != n {
            return Err(bad(format!(
                "{n} map partitions but {} hosts and {} block sizes",
                self.map_hosts.len() / 4,
                self.map_block_sizes.len() / 4
            )));
        }
        if let Some(h) = unpack(&self.map_hosts).find(|&h| h as usize >= self.hosts.len()) {
            return Err(bad(format!(
                "host index {h} but only {} hosts",
                self.hosts.len()
            )));
        }
        let marked = unpack(&self.map_block_sizes)
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
            ));
        }
        let mut out = self.maps;
        out.reserve(n);
        let mut large = self.large_block_sizes.iter();
        let triples = unpack(&self.map_partitions)
            .zip(unpack(&self.map_hosts))
            .zip(unpack(&self.map_block_sizes));
        for ((map_partition, host), size) in triples {
            let (executor_id, shuffle_address) = &hosts[host as usize];
            let size = match size {
                // As many large sizes as markers (checked above).
                LARGE_BLOCK => large.next().copied().unwrap_or(u64::MAX),
                v => u64::from(v),
            };
            out.push(MapLocation {
                map_partition,
                executor_id: executor_id.clone(),
                shuffle_address: shuffle_address.clone(),
                block_sizes: vec![size],
                first_reduce: self.reduce,
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
