//! The operator credential (`--operator-secret-file`): what opens the web UI, the REST
//! API and `/metrics` across every application, and cross-session actions (the UI's
//! kill of any job). Clients never hold it; it must differ from the cluster secret.
//!
//! Invariants: the secret is the file's contents trimmed, never empty; off loopback it
//! has at least [`MIN_CHARS`] characters; it never appears in a log line or an error.

use std::path::Path;

use crate::auth;

/// Environment variable naming the operator secret's file, used when the command line
/// gives none (a compose or Kubernetes secret mount).
pub const FILE_ENV: &str = "EMBER_OPERATOR_SECRET_FILE";

/// The command-line flag, as errors name it.
pub const FLAG: &str = "--operator-secret-file";

/// Fewest characters of a secret a daemon bound to a non-loopback address accepts.
pub const MIN_CHARS: usize = auth::MIN_SECRET_CHARS;

/// The operator secret: the trimmed contents of `file` if given, else of the file
/// [`FILE_ENV`] names, else none. Errors (naming the file and the flag) if the file
/// cannot be read, is empty, or, when `host` is not loopback, holds fewer than
/// [`MIN_CHARS`] characters ([`auth::load_secret_file`], [`auth::check_strength`]).
pub fn load(file: Option<&Path>, host: &str) -> Result<Option<String>, String> {
    let secret = auth::load_secret_file(file, FILE_ENV, FLAG)?;
    if let Some(s) = &secret {
        auth::check_strength(s, host, FLAG)?;
    }
    Ok(secret)
}

/// [`load`], refusing an operator secret equal to any of `others` (the secret's name,
/// as in "cluster", and the secret, if the daemon has it): whoever holds one of those
/// must not hold the operator's credential too. Compared in constant time.
pub fn load_distinct(
    file: Option<&Path>,
    host: &str,
    others: &[(&str, Option<&str>)],
) -> Result<Option<String>, String> {
    let secret = load(file, host)?;
    if let Some(op) = &secret {
        for (name, other) in others {
            if other.is_some_and(|o| auth::constant_time_eq(op.as_bytes(), o.as_bytes())) {
                return Err(format!(
                    "the operator secret ({FLAG}) must differ from the {name} secret: \
                     whoever holds the {name} secret must not hold the operator's"
                ));
            }
        }
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_trimmed_empty_and_short_off_loopback_are_errors() {
        let dir = std::env::temp_dir().join(format!("ember-operator-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("operator");
        std::fs::write(&f, "short\n").unwrap();
        assert_eq!(
            load(Some(&f), "127.0.0.1").unwrap().as_deref(),
            Some("short")
        );
        let err = load(Some(&f), "0.0.0.0").unwrap_err();
        assert!(err.contains(FLAG) && err.contains("at least 32"), "{err}");
        assert!(!err.contains("short\n"), "the secret is never in an error");
        std::fs::write(&f, "x".repeat(32)).unwrap();
        assert!(load(Some(&f), "0.0.0.0").unwrap().is_some());
        std::fs::write(&f, " \n").unwrap();
        assert!(load(Some(&f), "127.0.0.1")
            .unwrap_err()
            .contains("is empty"));
        let missing = dir.join("missing");
        assert!(load(Some(&missing), "127.0.0.1")
            .unwrap_err()
            .contains("cannot read"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
