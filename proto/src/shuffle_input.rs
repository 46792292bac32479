//! The two forms of a [`ShuffleInput`] (see `ember.proto`), and turning the compact one
//! back into [`MapLocation`]s for the task that reads them.
//!
//! Invariant: [`ShuffleInput::map_locations`] either returns every map of both forms or
//! an error naming what is inconsistent; it never guesses a host or a size. The arrays'
//! lengths are bounded by the decoded message, which the transport already bounds.

use crate::{MapHost, MapLocation, ShuffleInput};

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
        let mut input = ShuffleInput {
            shuffle_id,
            hosts,
            reduce,
            map_partitions: Vec::with_capacity(n),
            map_hosts: Vec::with_capacity(n),
            map_block_sizes: Vec::with_capacity(n),
            ..Default::default()
        };
        for (map, host, size) in maps {
            input.map_partitions.push(map);
            input.map_hosts.push(host);
            input.map_block_sizes.push(size);
        }
        input
    }

    /// Maps in either form.
    pub fn num_maps(&self) -> usize {
        self.maps.len() + self.map_partitions.len()
    }

    /// Every map location of both forms (the compact ones with the one block size of
    /// `reduce`), or what makes the compact form inconsistent.
    pub fn map_locations(self) -> Result<Vec<MapLocation>, InvalidShuffleInput> {
        let bad = |reason: String| InvalidShuffleInput {
            shuffle_id: self.shuffle_id,
            reason,
        };
        let n = self.map_partitions.len();
        if self.map_hosts.len() != n || self.map_block_sizes.len() != n {
            return Err(bad(format!(
                "{n} map partitions but {} hosts and {} block sizes",
                self.map_hosts.len(),
                self.map_block_sizes.len()
            )));
        }
        if let Some(h) = self
            .map_hosts
            .iter()
            .find(|&&h| h as usize >= self.hosts.len())
        {
            return Err(bad(format!(
                "host index {h} but only {} hosts",
                self.hosts.len()
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
        for i in 0..n {
            let (executor_id, shuffle_address) = &hosts[self.map_hosts[i] as usize];
            out.push(MapLocation {
                map_partition: self.map_partitions[i],
                executor_id: executor_id.clone(),
                shuffle_address: shuffle_address.clone(),
                block_sizes: vec![self.map_block_sizes[i]],
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
            [(0, 1, 10), (1, 0, 0), (2, 1, 7)].into_iter(),
        );
        assert_eq!(input.num_maps(), 3);
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
                (2, "b", "b:7000", vec![7], 9),
            ]
        );
    }

    #[test]
    fn inconsistent_compact_forms_are_errors() {
        let good = ShuffleInput::compact(3, 0, vec![host("a")], [(0, 0, 1), (1, 0, 2)].into_iter());
        let mut short = good.clone();
        short.map_block_sizes.pop();
        let err = short.map_locations().unwrap_err();
        assert_eq!(
            err.to_string(),
            "shuffle 3 input: 2 map partitions but 2 hosts and 1 block sizes"
        );
        let mut far = good.clone();
        far.map_hosts[1] = 5;
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
