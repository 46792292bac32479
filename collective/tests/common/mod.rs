//! The test harness: ranks as threads of the test process, each with its own endpoint
//! (Unix sockets in a temporary directory, or TCP on 127.0.0.1), under a watchdog that
//! aborts every rank and fails the test instead of hanging; and the deterministic inputs
//! the tests compare against independent computations.
#![allow(dead_code)]

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use ember_collective::{
    AbortHandle, CollectiveError, CommOptions, Communicator, Endpoint, PeerAddr, StageKey,
};

/// How long a whole multi-rank run may take before the test fails as hung (debug builds
/// on a loaded two-core machine included).
pub const WATCHDOG: Duration = Duration::from_secs(240);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Unix,
    Tcp,
}

pub const TRANSPORTS: [Transport; 2] = [Transport::Unix, Transport::Tcp];

/// What each rank connects with.
pub struct RankSetup {
    pub key: StageKey,
    pub opts: CommOptions,
}

/// Runs `world` ranks; rank `r` connects with `setup(r)` and then runs `body(r, connect
/// result)`. Returns the bodies' results in rank order. Panics (after aborting every rank)
/// if a rank panics or the run exceeds `watchdog`.
pub fn launch<T: Send + 'static>(
    world: usize,
    transport: Transport,
    watchdog: Duration,
    setup: impl Fn(usize) -> RankSetup,
    body: impl Fn(usize, Result<Communicator, CollectiveError>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let dir = tempfile::tempdir().expect("temp dir");
    let endpoints: Vec<Endpoint> = (0..world)
        .map(|_| match transport {
            Transport::Unix => Endpoint::bind_unix(dir.path()).expect("bind unix"),
            Transport::Tcp => Endpoint::bind_tcp("127.0.0.1".parse().unwrap()).expect("bind tcp"),
        })
        .collect();
    // What the driver would relay: the string forms, parsed back.
    let peers: Vec<PeerAddr> = endpoints
        .iter()
        .map(|e| PeerAddr::parse(&e.addr().to_string()).expect("address round trip"))
        .collect();
    let aborts: Vec<AbortHandle> = endpoints.iter().map(Endpoint::abort_handle).collect();
    let body = Arc::new(body);
    let (tx, rx) = mpsc::channel();
    for (rank, endpoint) in endpoints.into_iter().enumerate() {
        let RankSetup { key, opts } = setup(rank);
        let (peers, body, tx) = (peers.clone(), body.clone(), tx.clone());
        thread::Builder::new()
            .name(format!("rank-{rank}"))
            .spawn(move || {
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let comm = Communicator::connect(endpoint, rank, &peers, &key, opts);
                    body(rank, comm)
                }));
                let _ = tx.send((rank, outcome));
            })
            .expect("spawn rank thread");
    }
    drop(tx);
    let deadline = Instant::now() + watchdog;
    let mut results: Vec<Option<T>> = (0..world).map(|_| None).collect();
    for _ in 0..world {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((rank, Ok(value))) => results[rank] = Some(value),
            Ok((rank, Err(panic))) => {
                aborts.iter().for_each(AbortHandle::abort);
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("rank {rank} of {world} ({transport:?}) panicked: {text}");
            }
            Err(_) => {
                aborts.iter().for_each(AbortHandle::abort);
                let hung: Vec<usize> = (0..world).filter(|&r| results[r].is_none()).collect();
                panic!("watchdog: ranks {hung:?} of {world} ({transport:?}) still running after {watchdog:?}");
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.expect("every rank reported"))
        .collect()
}

/// Runs `world` ranks with one key and default options; `body` gets a connected
/// communicator.
pub fn run<T: Send + 'static>(
    world: usize,
    transport: Transport,
    body: impl Fn(&mut Communicator) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let key = StageKey::random().unwrap();
    launch(
        world,
        transport,
        WATCHDOG,
        |_| RankSetup {
            key: key.clone(),
            opts: CommOptions::default(),
        },
        move |rank, comm| {
            let mut comm = comm.unwrap_or_else(|e| panic!("rank {rank} failed to connect: {e}"));
            body(&mut comm)
        },
    )
}

/// Element `i` of rank `rank`'s exact f64 input: a multiple of 1/1024 below 2^12 in
/// magnitude, so any sum of a few of them is exact in any order (an independent reference
/// can compare bit for bit).
pub fn exact_f64_at(rank: usize, i: usize, seed: u64) -> f64 {
    let h = mix(seed, rank as u64, i as u64);
    ((h % 8_000_000) as f64 - 4_000_000.0) / 1024.0
}

/// A rank's exact f64 input ([`exact_f64_at`]).
pub fn exact_f64(rank: usize, len: usize, seed: u64) -> Vec<f64> {
    (0..len).map(|i| exact_f64_at(rank, i, seed)).collect()
}

/// As [`exact_f64`] for f32: multiples of 1/16 below 2^10.
pub fn exact_f32(rank: usize, len: usize, seed: u64) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let h = mix(seed, rank as u64, i as u64);
            ((h % 32_000) as f32 - 16_000.0) / 16.0
        })
        .collect()
}

/// Integers of both signs over the whole range, so sums wrap.
pub fn wide_i64(rank: usize, len: usize, seed: u64) -> Vec<i64> {
    (0..len)
        .map(|i| mix(seed ^ 1, rank as u64, i as u64) as i64)
        .collect()
}

/// Floats whose sums round (magnitudes spread over many binades), for determinism tests.
pub fn rounding_f64(rank: usize, len: usize, seed: u64) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let h = mix(seed, rank as u64, i as u64);
            let mantissa = (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            mantissa * 10f64.powi((h % 17) as i32 - 8)
        })
        .collect()
}

/// Integers spread over the whole range, so sums wrap.
pub fn wide_u64(rank: usize, len: usize, seed: u64) -> Vec<u64> {
    (0..len).map(|i| mix(seed, rank as u64, i as u64)).collect()
}

/// A splitmix-style hash of three numbers.
pub fn mix(a: u64, b: u64, c: u64) -> u64 {
    let mut z = a
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(b.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(c.wrapping_mul(0x94D0_49BB_1331_11EB))
        .wrapping_add(0x2545_F491_4F6C_DD1D);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A rank's byte value of `len` bytes.
pub fn bytes_of(rank: usize, len: usize, seed: u64) -> Vec<u8> {
    (0..len)
        .map(|i| mix(seed, rank as u64, i as u64) as u8)
        .collect()
}
