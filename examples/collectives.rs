//! Times one collective of a barrier stage, as OSU's micro-benchmarks and the Open MPI
//! program `bench/collectives/mpi_coll.c` do:
//! `collectives [--master M] [--ranks R] --op barrier|broadcast|all_reduce|all_gather|
//! reduce_scatter|all_to_all [--bytes B] [--iters K]` (defaults: world = the default
//! parallelism, 8 bytes, 1,000 iterations).
//!
//! One barrier stage of R tasks calls the op K times after K/10 + 2 warm-up calls, each
//! call timed on every rank; prints `op=all_reduce ranks=2 bytes=8 median_us=0.93
//! algbw_GBps=0.009`: `bytes` is each rank's input buffer (f64 elements, summed, for
//! all_reduce and reduce_scatter, B rounded down to a multiple of 8; all_gather's is each
//! rank's contribution; broadcast's the root's value; all_to_all's each rank's whole send
//! buffer), `median_us` the median over the K calls of the slowest rank's time,
//! `algbw_GBps` = bytes / median seconds / 1e9.

use std::time::Instant;

use anyhow::{bail, Context as _};
use ember::{BarrierContext, Records, ReduceOp};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Serialize, Deserialize, PartialEq)]
enum Op {
    Barrier,
    Broadcast,
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "barrier" => Op::Barrier,
            "broadcast" => Op::Broadcast,
            "all_reduce" => Op::AllReduce,
            "all_gather" => Op::AllGather,
            "reduce_scatter" => Op::ReduceScatter,
            "all_to_all" => Op::AllToAll,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Run {
    op: Op,
    bytes: usize,
    iters: usize,
}

/// One call of the op on this rank's buffer.
fn call(b: &BarrierContext, run: &Run, buf: &mut [f64], bytes: &[u8]) -> ember::Result<()> {
    match run.op {
        Op::Barrier => b.barrier(),
        Op::AllReduce => b.all_reduce_slice(buf, ReduceOp::Sum),
        Op::ReduceScatter => b.reduce_scatter(buf, ReduceOp::Sum).map(drop),
        Op::AllGather => b.all_gather_slice(buf).map(drop),
        Op::Broadcast => {
            let mine = (b.rank() == 0).then(|| serde_bytes_of(bytes));
            b.broadcast(0, mine).map(drop)
        }
        Op::AllToAll => {
            let per = bytes.len() / b.world();
            let parts = (0..b.world())
                .map(|j| serde_bytes_of(&bytes[j * per..(j + 1) * per]))
                .collect();
            b.all_to_all(parts).map(drop)
        }
    }
}

/// A byte buffer as a value whose encoding is one length prefix and the bytes.
fn serde_bytes_of(bytes: &[u8]) -> ByteBuf {
    ByteBuf(bytes.to_vec())
}

#[derive(Serialize, Deserialize)]
struct ByteBuf(#[serde(with = "bytes_as_slice")] Vec<u8>);

mod bytes_as_slice {
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
        }
        d.deserialize_bytes(V)
    }
}

/// Each rank's per-call times (µs); rank 0 returns the slowest rank's per call.
fn rank_main(run: &Run, b: BarrierContext, _r: Records<u32>) -> ember::Result<Vec<Vec<f64>>> {
    let elems = run.bytes / 8;
    let mut buf: Vec<f64> = (0..elems).map(|i| (i % 1000) as f64 * 0.5).collect();
    let bytes = vec![7u8; run.bytes];
    for _ in 0..run.iters / 10 + 2 {
        call(&b, run, &mut buf, &bytes)?;
    }
    let mut times = Vec::with_capacity(run.iters);
    for _ in 0..run.iters {
        let t = Instant::now();
        call(&b, run, &mut buf, &bytes)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let all = b.all_gather_slice(&times)?;
    let slowest: Vec<f64> = (0..run.iters)
        .map(|i| {
            (0..b.world())
                .map(|r| all[r * run.iters + i])
                .fold(0.0, f64::max)
        })
        .collect();
    Ok((b.rank() == 0).then_some(slowest).into_iter().collect())
}

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let usage = "usage: collectives [--master M] [--ranks R] --op barrier|broadcast|\
                 all_reduce|all_gather|reduce_scatter|all_to_all [--bytes B] [--iters K]";
    let (mut ranks, mut op, mut bytes, mut iters) = (ctx.default_parallelism(), None, 8, 1000);
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        let number = || -> anyhow::Result<usize> {
            v.parse()
                .map_err(|_| anyhow::anyhow!("{a} needs a whole number, got {v:?}; {usage}"))
        };
        match a.as_str() {
            "--ranks" => ranks = number()?,
            "--op" => {
                op = Some(Op::parse(&v).with_context(|| format!("unknown --op {v:?}; {usage}"))?)
            }
            "--bytes" => bytes = number()?,
            "--iters" => iters = number()?,
            other => bail!("unknown argument {other:?}; {usage}"),
        }
    }
    let op = op.with_context(|| format!("--op is required; {usage}"))?;
    if ranks == 0 || iters == 0 {
        bail!("--ranks and --iters must be positive; {usage}");
    }
    let bytes = match op {
        Op::AllReduce | Op::ReduceScatter | Op::AllGather => bytes / 8 * 8,
        Op::AllToAll => bytes / ranks * ranks,
        Op::Barrier => 0,
        Op::Broadcast => bytes,
    };
    let run = Run { op, bytes, iters };
    let mut slowest = ctx
        .parallelize((0..ranks as u32).collect(), ranks)
        .barrier()
        .map_partitions_with(run, |run: &Run, b, r| rank_main(run, b, r))
        .collect()?
        .pop()
        .context("rank 0 returned no times")?;
    slowest.sort_by(f64::total_cmp);
    let median = slowest[slowest.len() / 2];
    let name = match op {
        Op::Barrier => "barrier",
        Op::Broadcast => "broadcast",
        Op::AllReduce => "all_reduce",
        Op::AllGather => "all_gather",
        Op::ReduceScatter => "reduce_scatter",
        Op::AllToAll => "all_to_all",
    };
    println!(
        "op={name} ranks={ranks} bytes={bytes} median_us={median:.2} algbw_GBps={:.3}",
        bytes as f64 / (median / 1e6) / 1e9
    );
    Ok(())
}
