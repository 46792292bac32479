//! PageRank: `pagerank [--master M] [--partitions P] [--iterations N]
//! [--checkpoint-every K] [--checkpoint-dir D] INPUT OUTPUT`.
//!
//! INPUT is an edge list, one `src dst` pair of node ids (any non-whitespace strings)
//! per line; empty lines and lines starting with `#` are skipped, anything else fails
//! the job with its `file:line`. The iteration is that of Spark's `SparkPageRank`
//! example: every node with out-links starts at rank 1.0; each of the N iterations
//! (default 10) sends `rank / outdegree` along every distinct edge and sets
//! `rank = 0.15 + 0.85 * sum of contributions` (so nodes without in-links drop out).
//! OUTPUT gets `node<TAB>rank` lines, the rank printed with six decimals.
//! `--checkpoint-every K` checkpoints the ranks every K iterations (into
//! `--checkpoint-dir D`, which cluster mode needs: a directory all executors share),
//! so recovery after a lost executor restarts from the last checkpoint instead of the
//! first iteration. The ranks do not depend on it.

#[path = "support/args.rs"]
mod args;

#[path = "support/alloc.rs"]
mod alloc;

use anyhow::Context as _;
use ember::LinePosition;

fn main() -> anyhow::Result<()> {
    alloc::keep_freed_memory();
    let ctx = ember::Context::from_env()?;
    let flags = [
        ("--iterations", "N"),
        ("--checkpoint-every", "K"),
        ("--checkpoint-dir", "D"),
    ];
    let Some(args) = args::Args::parse("pagerank", &flags)? else {
        return Ok(()); // --help
    };
    let iterations: u32 = args.get_or("--iterations", 10)?;
    let checkpoint_every: u32 = args.get_or("--checkpoint-every", 0)?;
    let checkpoint_dir: String = args.get_or("--checkpoint-dir", String::new())?;
    if !checkpoint_dir.is_empty() {
        ctx.set_checkpoint_dir(&checkpoint_dir)
            .with_context(|| format!("checkpoint dir {checkpoint_dir}"))?;
    }
    let parts = args.partitions.unwrap_or(ctx.default_parallelism());
    let lines = ctx
        .text_file_with_positions(&args.input, parts)
        .with_context(|| format!("reading {}", args.input))?;
    let links = lines
        .flat_map(|(pos, line): (LinePosition, String)| parse_edge(&pos, &line))
        .distinct()
        .group_by_key()
        .cache();
    let mut ranks = links.map_values(|_: Vec<String>| 1.0f64);
    for i in 0..iterations {
        let contributions =
            links
                .join(&ranks)
                .flat_map(|(_, (dsts, rank)): (String, (Vec<String>, f64))| {
                    let share = rank / dsts.len() as f64;
                    dsts.into_iter()
                        .map(move |dst| (dst, share))
                        .collect::<Vec<_>>()
                });
        ranks = contributions
            .reduce_by_key(|a: f64, b: f64| a + b)
            .map_values(|r: f64| 0.15 + 0.85 * r);
        if checkpoint_every > 0 && (i + 1) % checkpoint_every == 0 {
            ranks = ranks.checkpoint().context("checkpointing the ranks")?;
        }
    }
    ranks
        .map(|(node, rank): (String, f64)| format!("{node}\t{rank:.6}"))
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}

/// The edge on `line`, `None` for a blank or `#` comment line; panics (failing the
/// job with the line's position) on anything else.
fn parse_edge(pos: &LinePosition, line: &str) -> Option<(String, String)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut fields = line.split_whitespace();
    match (fields.next(), fields.next(), fields.next()) {
        (Some(src), Some(dst), None) => Some((src.to_string(), dst.to_string())),
        _ => panic!(
            "malformed line at {pos}: {}: expected src dst",
            ember::io::excerpt(line)
        ),
    }
}
