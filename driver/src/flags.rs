//! The driver's command-line flags as the web UI's Environment page lists them: every
//! flag of the daemon with the value it runs with (given or default), by its long name.
//!
//! Invariant: a flag whose name names a credential (`--secret-file`,
//! `--operator-secret-file`, `--executor-secret-file`: see
//! `ember_ui::store::environment::is_secret_name`) is listed with a redacted value,
//! never its path or anything read from it; flags not given and without a default are
//! left out.

use clap::{ArgMatches, CommandFactory};
use ember_ui::store::environment::{is_secret_name, REDACTED};

/// `(--flag, value)` for every flag `matches` has a value for, in the command's order.
pub(crate) fn entries<C: CommandFactory>(matches: &ArgMatches) -> Vec<(String, String)> {
    let cmd = C::command();
    cmd.get_arguments()
        .filter_map(|a| {
            let long = a.get_long()?;
            let id = a.get_id().as_str();
            let values: Vec<String> = matches
                .try_get_raw(id)
                .ok()
                .flatten()?
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let name = format!("--{long}");
            let value = if is_secret_name(&name) {
                REDACTED.to_string()
            } else {
                values.join(" ")
            };
            Some((name, value))
        })
        .collect()
}
