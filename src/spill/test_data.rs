//! Deterministic test records and aggregations shared by the spill structures' tests.

use super::aggregate::Aggregate;

/// Collects values in the order they are folded in (groupByKey); the combiner grows, and
/// any reordering of a key's records shows.
pub(crate) struct Collect;
impl<K: 'static, V: Send + Sync + 'static> Aggregate<K, V, Vec<V>> for Collect {
    fn create(&self, _: &K, v: V) -> Vec<V> {
        vec![v]
    }
    fn merge_value(&self, c: &mut Vec<V>, v: V) {
        c.push(v);
    }
    fn merge_combiners(&self, c: &mut Vec<V>, o: Vec<V>) {
        c.extend(o);
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` records: random u64 keys drawn from `distinct` random keys, String values.
pub(crate) fn records(n: usize, distinct: usize, seed: u64) -> Vec<(u64, String)> {
    let mut s = seed;
    let keys: Vec<u64> = (0..distinct).map(|_| splitmix(&mut s)).collect();
    (0..n)
        .map(|_| {
            let r = splitmix(&mut s);
            let k = keys[(r % distinct as u64) as usize];
            (k, format!("v{}", r % 100_000))
        })
        .collect()
}
