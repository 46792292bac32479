//! Logistic regression by full-batch gradient descent on generated dense data:
//! `logreg [--master M] [--mode barrier|tree|floor] [--rows N] [--features D]
//! [--iterations I] [--seed S] [--checkpoint-every K] [--checkpoint-dir DIR]` (defaults:
//! barrier, 1,000,000, 32, 100, 1, 0 = no checkpoints; on a cluster, checkpoints need
//! `--checkpoint-dir`, a directory every executor shares).
//!
//! The rows are generated in the tasks (row `i`'s features and label are a function of
//! `S` and `i` only), one contiguous block of f64 per partition (the default
//! parallelism), and cached before timing. Then `I` iterations of
//! `w -= 0.5 / N * sum over rows of (sigmoid(w.x) - y) x`:
//! - `barrier`: one barrier stage; each task keeps its block and sums the gradient with
//!   `all_reduce_slice` each iteration (checkpointing `w` every K supersteps, and
//!   resuming from the last checkpoint when the stage is rerun);
//! - `tree`: one job per iteration, the gradient summed by `tree_aggregate`;
//! - `floor`: the same loop in this process on as many threads, with no communication
//!   (the compute floor the other two are measured against).
//!
//! Prints `weights=w1,...` (shortest round-trip decimals) and `per_iteration_ms=X` (the
//! iterations' wall time over their count; generation and caching excluded).

use std::time::Instant;

use anyhow::{bail, ensure, Context as _};
use ember::{Rdd, ReduceOp, StorageLevel};
use serde::{Deserialize, Serialize};

/// One partition's rows: `x` row-major (`rows x features`), `y` the labels (0 or 1).
#[derive(Clone, Serialize, Deserialize)]
struct Block {
    features: usize,
    x: Vec<f64>,
    y: Vec<f64>,
}

#[derive(Clone, Copy, Serialize, Deserialize)]
struct Shape {
    rows: u64,
    features: usize,
    seed: u64,
    parts: u64,
    iterations: u32,
    checkpoint_every: u32,
}

const LEARNING_RATE: f64 = 0.5;

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in [0, 1) from `(seed, i)`.
fn uniform(seed: u64, i: u64) -> f64 {
    (splitmix(seed ^ splitmix(i)) >> 11) as f64 / (1u64 << 53) as f64
}

/// Rows `[lo, hi)` of the data set.
fn generate(shape: &Shape, lo: u64, hi: u64) -> Block {
    let d = shape.features;
    let truth: Vec<f64> = (0..d).map(|j| ((j % 7) as f64 - 3.0) / 3.0).collect();
    let mut x = Vec::with_capacity((hi - lo) as usize * d);
    let mut y = Vec::with_capacity((hi - lo) as usize);
    for i in lo..hi {
        let row = x.len();
        for j in 0..d as u64 {
            x.push(uniform(shape.seed, i * d as u64 + j) * 2.0 - 1.0);
        }
        let z: f64 = x[row..].iter().zip(&truth).map(|(a, b)| a * b).sum();
        let label = sigmoid(z) > uniform(shape.seed ^ 0x5DEE_CE66, i);
        y.push(if label { 1.0 } else { 0.0 });
    }
    Block { features: d, x, y }
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// `a . b` with eight independent partial sums (a fixed order, so every mode gets the
/// same bits): a single running sum would wait on each addition's latency.
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0.0f64; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail
}

/// Adds this block's gradient at `w` to `g`.
fn add_gradient(block: &Block, w: &[f64], g: &mut [f64]) {
    let d = block.features;
    for (row, y) in block.x.chunks_exact(d).zip(&block.y) {
        let z = dot(row, w);
        let e = sigmoid(z) - y;
        for (gj, xj) in g.iter_mut().zip(row) {
            *gj += e * xj;
        }
    }
}

fn step(w: &mut [f64], g: &[f64], rows: u64) {
    let scale = LEARNING_RATE / rows as f64;
    for (wj, gj) in w.iter_mut().zip(g) {
        *wj -= scale * gj;
    }
}

fn partition_rows(shape: &Shape, p: u64) -> (u64, u64) {
    (
        p * shape.rows / shape.parts,
        (p + 1) * shape.rows / shape.parts,
    )
}

/// The cached data set: one block per partition.
fn blocks(ctx: &ember::Context, shape: Shape) -> anyhow::Result<Rdd<Block>> {
    let blocks = ctx
        .parallelize((0..shape.parts).collect(), shape.parts as usize)
        .map_with(shape, |s: &Shape, p: u64| {
            let (lo, hi) = partition_rows(s, p);
            generate(s, lo, hi)
        })
        .persist(StorageLevel::Memory);
    let n = blocks.count()?;
    ensure!(n == shape.parts, "expected {} blocks, got {n}", shape.parts);
    Ok(blocks)
}

/// Barrier mode: one stage, all_reduce_slice per iteration. Returns (w, loop seconds).
fn barrier(blocks: &Rdd<Block>, shape: Shape) -> anyhow::Result<(Vec<f64>, f64)> {
    let out = blocks
        .barrier()
        .map_partitions_with(shape, |s: &Shape, b, mut records| {
            let block = records.next().unwrap_or(Block {
                features: s.features,
                x: Vec::new(),
                y: Vec::new(),
            });
            let (mut first, mut w) = (0u32, vec![0.0; s.features]);
            if s.checkpoint_every > 0 {
                if let Some((step_done, saved)) = b.restore_state::<Vec<f64>>()? {
                    (first, w) = (step_done as u32 + 1, saved);
                }
            }
            b.barrier()?;
            let start = Instant::now();
            let mut g = vec![0.0; s.features];
            for it in first..s.iterations {
                g.iter_mut().for_each(|v| *v = 0.0);
                add_gradient(&block, &w, &mut g);
                b.all_reduce_slice(&mut g, ReduceOp::Sum)?;
                step(&mut w, &g, s.rows);
                if s.checkpoint_every > 0 && (it + 1) % s.checkpoint_every == 0 {
                    b.checkpoint_state(u64::from(it), &w)?;
                }
            }
            let secs = start.elapsed().as_secs_f64();
            Ok((b.rank() == 0).then_some((w, secs, s.iterations - first)))
        })
        .collect()?;
    let (w, secs, ran) = out.into_iter().next().context("rank 0 returned nothing")?;
    Ok((
        w,
        secs * f64::from(shape.iterations) / f64::from(ran.max(1)),
    ))
}

/// The `tree_aggregate` form: one job per iteration.
fn tree(blocks: &Rdd<Block>, shape: Shape) -> anyhow::Result<(Vec<f64>, f64)> {
    let mut w = vec![0.0; shape.features];
    let start = Instant::now();
    for _ in 0..shape.iterations {
        let g = blocks
            .map_with(w.clone(), |w: &Vec<f64>, block: Block| {
                let mut g = vec![0.0; w.len()];
                add_gradient(&block, w, &mut g);
                g
            })
            .tree_aggregate(
                vec![0.0; shape.features],
                |mut a: Vec<f64>, b: Vec<f64>| {
                    a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                    a
                },
                |mut a: Vec<f64>, b: Vec<f64>| {
                    a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                    a
                },
                2,
            )?;
        step(&mut w, &g, shape.rows);
    }
    Ok((w, start.elapsed().as_secs_f64()))
}

/// The compute floor: the same loop on `parts` threads of this process, gradients
/// summed in memory.
fn floor(shape: Shape) -> (Vec<f64>, f64) {
    let blocks: Vec<Block> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..shape.parts)
            .map(|p| {
                s.spawn(move || {
                    let (lo, hi) = partition_rows(&shape, p);
                    generate(&shape, lo, hi)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut w = vec![0.0; shape.features];
    let start = Instant::now();
    for _ in 0..shape.iterations {
        let partials: Vec<Vec<f64>> = std::thread::scope(|s| {
            let w = &w;
            let handles: Vec<_> = blocks
                .iter()
                .map(|block| {
                    s.spawn(move || {
                        let mut g = vec![0.0; w.len()];
                        add_gradient(block, w, &mut g);
                        g
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut g = vec![0.0; shape.features];
        for p in &partials {
            g.iter_mut().zip(p).for_each(|(x, y)| *x += y);
        }
        step(&mut w, &g, shape.rows);
    }
    (w, start.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let usage = "usage: logreg [--master M] [--mode barrier|tree|floor] [--rows N] \
                 [--features D] [--iterations I] [--seed S] [--checkpoint-every K] \
                 [--checkpoint-dir DIR]";
    let mut mode = "barrier".to_string();
    let mut shape = Shape {
        rows: 1_000_000,
        features: 32,
        seed: 1,
        parts: ctx.default_parallelism().max(1) as u64,
        iterations: 100,
        checkpoint_every: 0,
    };
    let mut args = ember::job_args().into_iter().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        let number = || -> anyhow::Result<u64> {
            v.parse()
                .map_err(|_| anyhow::anyhow!("{a} needs a whole number, got {v:?}; {usage}"))
        };
        match a.as_str() {
            "--mode" => mode = v.clone(),
            "--rows" => shape.rows = number()?,
            "--features" => shape.features = number()? as usize,
            "--iterations" => shape.iterations = number()? as u32,
            "--seed" => shape.seed = number()?,
            "--checkpoint-every" => shape.checkpoint_every = number()? as u32,
            "--checkpoint-dir" => ctx.set_checkpoint_dir(&v)?,
            other => bail!("unknown argument {other:?}; {usage}"),
        }
    }
    ensure!(
        shape.rows > 0 && shape.features > 0,
        "--rows and --features must be positive"
    );
    let (w, secs) = match mode.as_str() {
        "barrier" => barrier(&blocks(&ctx, shape)?, shape)?,
        "tree" => tree(&blocks(&ctx, shape)?, shape)?,
        "floor" => floor(shape),
        other => bail!("unknown --mode {other:?}; {usage}"),
    };
    let weights: Vec<String> = w.iter().map(|x| x.to_string()).collect();
    println!("weights={}", weights.join(","));
    println!(
        "per_iteration_ms={:.3}",
        secs * 1e3 / f64::from(shape.iterations.max(1))
    );
    Ok(())
}
