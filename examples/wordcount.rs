//! Word count: `wordcount [--master M] [--partitions P] INPUT OUTPUT`.
//!
//! Words are maximal runs of non-whitespace; OUTPUT gets `word<TAB>count` lines in
//! `part-NNNNN` files.

use anyhow::{bail, Context as _};

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let args = Args::parse()?;
    let lines = ctx
        .text_file(&args.input, args.partitions.unwrap_or(ctx.default_parallelism()))
        .with_context(|| format!("reading {}", args.input))?;
    let counts = lines
        .flat_map(|line: String| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .map(|w: String| (w, 1u64))
        .reduce_by_key(|a, b| a + b)
        .map(|(w, c): (String, u64)| format!("{w}\t{c}"));
    counts
        .save_as_text_file(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}

struct Args {
    partitions: Option<usize>,
    input: String,
    output: String,
}

impl Args {
    fn parse() -> anyhow::Result<Args> {
        let mut partitions = None;
        let mut positional = Vec::new();
        let mut it = std::env::args().skip(1);
        while let Some(a) = it.next() {
            match a.as_str() {
                "--master" => {
                    it.next();
                }
                "--partitions" => {
                    let p = it.next().context("--partitions needs a value")?;
                    partitions = Some(p.parse().with_context(|| format!("bad --partitions {p:?}"))?);
                }
                s if s.starts_with("--master=") => {}
                s if s.starts_with("--") => bail!("unknown flag {s}; usage: wordcount [--master M] [--partitions P] INPUT OUTPUT"),
                _ => positional.push(a),
            }
        }
        let [input, output]: [String; 2] = positional
            .try_into()
            .map_err(|_| anyhow::anyhow!("usage: wordcount [--master M] [--partitions P] INPUT OUTPUT"))?;
        Ok(Args { partitions, input, output })
    }
}
