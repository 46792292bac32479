//! Command-line parsing shared by the examples:
//! `NAME [--master M] [--partitions P] [EXTRA FLAGS] INPUT OUTPUT`.
//!
//! Included by each example with `#[path = "support/args.rs"] mod args;` (every example
//! is its own crate root, so there is no shared crate to put it in). `--master` is read
//! by `ember::Context::from_env()`; `ember::job_args()` hands this parser the rest. Every flag also accepts the
//! `--flag=value` form.

// Each example uses a different subset of this module.
#![allow(dead_code)]

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context as _};

/// Parsed command line.
#[derive(Debug)]
pub struct Args {
    /// `--partitions P` (at least 1), if given.
    pub partitions: Option<usize>,
    /// Values of the example-specific flags, by flag name (`"--iterations"`).
    extra: HashMap<&'static str, String>,
    usage: String,
    pub input: String,
    pub output: String,
}

impl Args {
    /// Parses the job's arguments (`ember::job_args()`) for example `name`, which also accepts the flags in
    /// `extra` (each takes one value), e.g. `&[("--iterations", "N")]`. `None` means
    /// `--help` was asked for and the usage has been printed: return from `main` (rather
    /// than `process::exit`) so that the context is dropped and cleans up.
    pub fn parse(name: &str, extra: &[(&'static str, &str)]) -> anyhow::Result<Option<Args>> {
        Args::parse_from(name, extra, ember::job_args().into_iter().skip(1))
    }

    /// Parses `args` (without the program name); see [`Args::parse`].
    pub fn parse_from(
        name: &str,
        extra: &[(&'static str, &str)],
        args: impl IntoIterator<Item = String>,
    ) -> anyhow::Result<Option<Args>> {
        let usage = usage(name, extra);
        let mut partitions = None;
        let mut extra_values = HashMap::new();
        let mut positional = Vec::new();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            if arg == "--" {
                positional.extend(it.by_ref());
                break;
            }
            if arg == "-h" || arg == "--help" {
                println!("{usage}");
                return Ok(None);
            }
            if !arg.starts_with("--") || arg.len() == 2 {
                positional.push(arg);
                continue;
            }
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = |what: &str| -> anyhow::Result<String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .with_context(|| format!("{flag} needs a value ({what})\n{usage}")),
                }
            };
            match flag.as_str() {
                "--partitions" => {
                    let p = value("P")?;
                    let n: usize = p.parse().ok().filter(|&n| n > 0).with_context(|| {
                        format!("bad --partitions {p:?}: expected a positive integer\n{usage}")
                    })?;
                    partitions = Some(n);
                }
                f => match extra.iter().find(|(name, _)| *name == f) {
                    Some(&(name, what)) => {
                        extra_values.insert(name, value(what)?);
                    }
                    None => bail!("unknown flag {f}\n{usage}"),
                },
            }
        }
        let [input, output]: [String; 2] = positional.try_into().map_err(|p: Vec<String>| {
            anyhow!(
                "expected INPUT and OUTPUT, got {} argument(s)\n{usage}",
                p.len()
            )
        })?;
        Ok(Some(Args {
            partitions,
            extra: extra_values,
            usage,
            input,
            output,
        }))
    }

    /// The value of example-specific flag `name` parsed as `T`, or `default`.
    pub fn get_or<T>(&self, name: &str, default: T) -> anyhow::Result<T>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        match self.extra.get(name) {
            Some(v) => v
                .parse()
                .map_err(|e| anyhow!("bad {name} {v:?}: {e}\n{}", self.usage)),
            None => Ok(default),
        }
    }
}

fn usage(name: &str, extra: &[(&'static str, &str)]) -> String {
    let mut u = format!("usage: {name} [--master M] [--partitions P]");
    for (flag, what) in extra {
        u.push_str(&format!(" [{flag} {what}]"));
    }
    u.push_str(" INPUT OUTPUT");
    u
}
