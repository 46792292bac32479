//! Micro-benchmark of the collectives, OSU style: spawns R processes of itself (ranks
//! talking over Unix sockets in a temporary directory it removes, or TCP on 127.0.0.1),
//! times each op K times after K/10 + 2 warm-up calls, and prints one line per op:
//!
//! `op=all_reduce ranks=2 bytes=8 median_us=12.3 algbw_GBps=0.001 iters=1000`
//!
//! `bytes` is each rank's buffer (f64 elements for all_reduce, each rank's contribution
//! for all_gather), `median_us` the median over calls of the slowest rank's time for that
//! call, `algbw_GBps` = bytes / median seconds / 1e9.
//!
//! Usage: `coll_bench [--ranks 2,4] [--iters 1000] [--transport unix|tcp] [--sweep]
//! [--sockbuf BYTES]` (`--sockbuf`: `CommOptions::socket_buffer_bytes`);
//! `--sweep` adds all_reduce at sizes from 1 KiB to 1 MiB with each algorithm forced, to
//! place `ALL_REDUCE_RING_MIN_BYTES`, and the ring at 4 and 16 MiB.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use ember_collective::{
    AllReduceAlgorithm, CommOptions, Communicator, Endpoint, PeerAddr, ReduceOp, StageKey,
};

const KEY_ENV: &str = "COLL_BENCH_KEY";

/// One benchmarked operation.
#[derive(Clone, Copy)]
enum Op {
    Barrier,
    AllReduce(usize, Option<AllReduceAlgorithm>),
    AllGather(usize),
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Barrier => "barrier",
            Op::AllReduce(_, None) => "all_reduce",
            Op::AllReduce(_, Some(AllReduceAlgorithm::RecursiveDoubling)) => "all_reduce_rd",
            Op::AllReduce(_, Some(AllReduceAlgorithm::Ring)) => "all_reduce_ring",
            Op::AllGather(_) => "all_gather",
        }
    }

    fn bytes(self) -> usize {
        match self {
            Op::Barrier => 0,
            Op::AllReduce(b, _) | Op::AllGather(b) => b,
        }
    }

    /// Timed calls: fewer for large messages, so a run stays short.
    fn iters(self, k: usize) -> usize {
        match self.bytes() {
            b if b >= 16 << 20 => (k / 50).max(10),
            b if b >= 1 << 20 => (k / 4).max(10),
            _ => k,
        }
    }
}

fn ops(sweep: bool) -> Vec<Op> {
    let mut ops = vec![
        Op::Barrier,
        Op::AllReduce(8, None),
        Op::AllReduce(64 << 10, None),
        Op::AllReduce(1 << 20, None),
        Op::AllReduce(64 << 20, None),
        Op::AllGather(64 << 10),
    ];
    if sweep {
        for kib in [1, 4, 16, 32, 48, 64, 128, 256, 1024] {
            for alg in [
                AllReduceAlgorithm::RecursiveDoubling,
                AllReduceAlgorithm::Ring,
            ] {
                ops.push(Op::AllReduce(kib << 10, Some(alg)));
            }
        }
        // Where the ring leaves the caches.
        for mib in [4, 16] {
            ops.push(Op::AllReduce(mib << 20, Some(AllReduceAlgorithm::Ring)));
        }
    }
    ops
}

struct Args {
    ranks: Vec<usize>,
    iters: usize,
    tcp: bool,
    sweep: bool,
    sockbuf: Option<usize>,
    child: Option<(usize, usize, String)>,
}

fn parse_args() -> Args {
    let mut args = Args {
        ranks: vec![2],
        iters: 1000,
        tcp: false,
        sweep: false,
        sockbuf: None,
        child: None,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let value = |i: usize| {
        argv.get(i + 1)
            .cloned()
            .unwrap_or_else(|| die(&format!("{} needs a value", argv[i])))
    };
    while i < argv.len() {
        match argv[i].as_str() {
            "--ranks" => {
                args.ranks = value(i)
                    .split(',')
                    .map(|r| r.parse().unwrap_or_else(|_| die("bad --ranks")))
                    .collect();
                i += 1;
            }
            "--iters" => {
                args.iters = value(i).parse().unwrap_or_else(|_| die("bad --iters"));
                i += 1;
            }
            "--transport" => {
                args.tcp = match value(i).as_str() {
                    "tcp" => true,
                    "unix" => false,
                    _ => die("--transport is unix or tcp"),
                };
                i += 1;
            }
            "--sweep" => args.sweep = true,
            "--sockbuf" => {
                args.sockbuf = Some(value(i).parse().unwrap_or_else(|_| die("bad --sockbuf")));
                i += 1;
            }
            "--child" => {
                // --child RANK WORLD DIR
                let rank = value(i).parse().unwrap_or_else(|_| die("bad child rank"));
                let world = argv
                    .get(i + 2)
                    .and_then(|w| w.parse().ok())
                    .unwrap_or_else(|| die("bad child world"));
                let dir = argv
                    .get(i + 3)
                    .cloned()
                    .unwrap_or_else(|| die("child needs a dir"));
                args.child = Some((rank, world, dir));
                i += 3;
            }
            other => die(&format!("unknown argument {other}")),
        }
        i += 1;
    }
    args
}

fn die(message: &str) -> ! {
    eprintln!("coll_bench: {message}");
    std::process::exit(2)
}

fn main() {
    let args = parse_args();
    match &args.child {
        Some((rank, world, dir)) => child(&args, *rank, *world, dir),
        None => {
            for &world in &args.ranks {
                parent(&args, world);
            }
        }
    }
}

/// Kills the children if the parent fails.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn parent(args: &Args, world: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = StageKey::random().expect("key");
    let key_hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let exe = std::env::current_exe().expect("own path");
    let mut children = Children(Vec::new());
    for rank in 0..world {
        let mut command = Command::new(&exe);
        command
            .arg("--child")
            .arg(rank.to_string())
            .arg(world.to_string())
            .arg(dir.path())
            .args(["--iters", &args.iters.to_string()])
            .env(KEY_ENV, &key_hex)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if args.tcp {
            command.args(["--transport", "tcp"]);
        }
        if args.sweep {
            command.arg("--sweep");
        }
        if let Some(bytes) = args.sockbuf {
            command.args(["--sockbuf", &bytes.to_string()]);
        }
        children.0.push(command.spawn().expect("spawn a rank"));
    }
    let mut readers: Vec<_> = children
        .0
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("stdout")).lines())
        .collect();
    let addrs: Vec<String> = readers
        .iter_mut()
        .map(|lines| {
            let line = lines.next().expect("a rank's address").expect("read");
            line.strip_prefix("addr ")
                .unwrap_or_else(|| die(&format!("unexpected line {line}")))
                .to_string()
        })
        .collect();
    for child in &mut children.0 {
        let mut stdin = child.stdin.take().expect("stdin");
        for addr in &addrs {
            writeln!(stdin, "{addr}").expect("send addresses");
        }
    }
    // Every rank prints one `times` line per op, in the same order.
    for op in ops(args.sweep) {
        let per_rank: Vec<Vec<f64>> = readers
            .iter_mut()
            .map(|lines| {
                let line = lines.next().expect("a rank's times").expect("read");
                let rest = line
                    .strip_prefix("times ")
                    .unwrap_or_else(|| die(&format!("rank failed: {line}")));
                rest.split(' ')
                    .map(|t| t.parse::<f64>().expect("a time"))
                    .collect()
            })
            .collect();
        let calls = per_rank[0].len();
        let mut slowest: Vec<f64> = (0..calls)
            .map(|i| per_rank.iter().map(|t| t[i]).fold(0.0, f64::max))
            .collect();
        slowest.sort_by(f64::total_cmp);
        let median_us = if calls % 2 == 1 {
            slowest[calls / 2]
        } else {
            (slowest[calls / 2 - 1] + slowest[calls / 2]) / 2.0
        };
        let algbw = op.bytes() as f64 / (median_us * 1e-6) / 1e9;
        println!(
            "op={} ranks={world} bytes={} median_us={median_us:.2} algbw_GBps={algbw:.3} iters={calls}",
            op.name(),
            op.bytes()
        );
    }
    for child in &mut children.0 {
        let status = child.wait().expect("wait");
        if !status.success() {
            die(&format!("a rank exited with {status}"));
        }
    }
    children.0.clear();
}

fn child(args: &Args, rank: usize, world: usize, dir: &str) {
    let key_hex = std::env::var(KEY_ENV).unwrap_or_else(|_| die("no key"));
    let key_bytes: Vec<u8> = (0..key_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&key_hex[i..i + 2], 16).unwrap_or_else(|_| die("bad key")))
        .collect();
    let key = StageKey::try_from(&key_bytes[..]).unwrap_or_else(|e| die(&e.to_string()));
    let endpoint = if args.tcp {
        Endpoint::bind_tcp("127.0.0.1".parse().unwrap())
    } else {
        Endpoint::bind_unix(std::path::Path::new(dir))
    }
    .unwrap_or_else(|e| die(&e.to_string()));
    println!("addr {}", endpoint.addr());
    std::io::stdout().flush().unwrap();
    let stdin = std::io::stdin();
    let peers: Vec<PeerAddr> = stdin
        .lock()
        .lines()
        .take(world)
        .map(|l| {
            PeerAddr::parse(&l.expect("read an address")).unwrap_or_else(|e| die(&e.to_string()))
        })
        .collect();
    let mut opts = CommOptions::default();
    if let Some(bytes) = args.sockbuf {
        opts.socket_buffer_bytes = Some(bytes);
    }
    let mut comm = Communicator::connect(endpoint, rank, &peers, &key, opts)
        .unwrap_or_else(|e| die(&format!("rank {rank}: {e}")));
    let mut out = std::io::stdout().lock();
    for op in ops(args.sweep) {
        let iters = op.iters(args.iters);
        let times = time_op(&mut comm, op, iters);
        let text: Vec<String> = times.iter().map(|t| format!("{t:.3}")).collect();
        writeln!(out, "times {}", text.join(" ")).unwrap();
        out.flush().unwrap();
    }
}

/// Each timed call's duration in microseconds, after the warm-up calls.
fn time_op(comm: &mut Communicator, op: Op, iters: usize) -> Vec<f64> {
    let warmup = iters / 10 + 2;
    let mut data = vec![0.0f64; op.bytes() / 8];
    let mut times = Vec::with_capacity(iters);
    comm.barrier().unwrap_or_else(|e| die(&e.to_string()));
    for i in 0..warmup + iters {
        let start = Instant::now();
        match op {
            Op::Barrier => comm.barrier(),
            Op::AllReduce(_, None) => comm.all_reduce_slice(&mut data, ReduceOp::Sum),
            Op::AllReduce(_, Some(alg)) => {
                comm.all_reduce_slice_with(&mut data, ReduceOp::Sum, alg)
            }
            Op::AllGather(_) => comm.all_gather_slice(&data).map(|_| ()),
        }
        .unwrap_or_else(|e| die(&format!("{}: {e}", op.name())));
        if i >= warmup {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    times
}
