//! Runs one SQL query over Parquet or CSV files and writes its result as CSV:
//! `sql [--master M] --table NAME=PATH [--table NAME=PATH ...] [--explain] QUERY OUTPUT`.
//!
//! Each `--table` registers the files at PATH (a file, a directory or a glob) as table
//! NAME: Parquet if the path (or, for a directory, its files) ends in `.parquet`, CSV
//! with a header line otherwise. The result goes to OUTPUT as `part-*` files and
//! `_SUCCESS`, a header line in every part file (rows in any order unless the query
//! orders them; floats as shortest round-trip decimals, dates as YYYY-MM-DD, NULL as an
//! empty field). `--explain` prints the plan and its ember stages first.

use anyhow::{bail, Context as _};

struct Args {
    tables: Vec<(String, String)>,
    explain: bool,
    query: String,
    output: String,
}

const USAGE: &str =
    "usage: sql [--master M] --table NAME=PATH [--table NAME=PATH ...] [--explain] QUERY OUTPUT";

fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut tables = Vec::new();
    let mut positional = Vec::new();
    let mut explain = false;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let table = if arg == "--table" {
            Some(it.next().context("--table needs NAME=PATH")?)
        } else {
            arg.strip_prefix("--table=").map(str::to_string)
        };
        if let Some(t) = table {
            let Some((name, path)) = t.split_once('=') else {
                bail!("--table {}: expected NAME=PATH", ember::io::excerpt(&t));
            };
            if name.is_empty() || path.is_empty() {
                bail!("--table {}: expected NAME=PATH", ember::io::excerpt(&t));
            }
            tables.push((name.to_string(), path.to_string()));
        } else if arg == "--explain" {
            explain = true;
        } else if arg == "-h" || arg == "--help" {
            println!("{USAGE}");
            return Ok(None);
        } else if arg.starts_with("--") && arg.len() > 2 {
            bail!("unknown flag {}\n{USAGE}", ember::io::excerpt(&arg));
        } else {
            positional.push(arg);
        }
    }
    let [query, output]: [String; 2] = positional.try_into().map_err(|p: Vec<String>| {
        anyhow::anyhow!(
            "expected QUERY and OUTPUT, got {} argument(s)\n{USAGE}",
            p.len()
        )
    })?;
    if tables.is_empty() {
        bail!("no --table given\n{USAGE}");
    }
    Ok(Some(Args {
        tables,
        explain,
        query,
        output,
    }))
}

fn is_parquet(path: &str) -> bool {
    if path.ends_with(".parquet") {
        return true;
    }
    std::fs::read_dir(path)
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        })
        .unwrap_or(false)
}

fn main() -> anyhow::Result<()> {
    let ctx = ember::Context::from_env()?;
    let Some(args) = parse(ember::job_args().into_iter().skip(1))? else {
        return Ok(());
    };
    let sql = ember_sql::SqlContext::new(&ctx)?;
    for (name, path) in &args.tables {
        if is_parquet(path) {
            sql.register_parquet(name, path)
        } else {
            sql.register_csv(name, path)
        }
        .with_context(|| format!("registering table {name} at {path}"))?;
    }
    let df = sql.sql(&args.query).context("planning the query")?;
    if args.explain {
        println!("{}", df.explain()?);
    }
    df.write_csv(&args.output)
        .with_context(|| format!("writing {}", args.output))?;
    Ok(())
}
