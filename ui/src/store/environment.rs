//! What the Environment page shows: sections of `(name, value)` configuration entries
//! (the driver's flags, an application's configuration), from `environment` events.
//!
//! Invariants: a value whose name looks like a credential ([`is_secret_name`]: secret,
//! password, token, credential, private or access key) is stored as [`REDACTED`],
//! whatever the sender did, so neither a page nor the JSON can show it; a section
//! replaces an earlier one of the same application and title; memory is bounded: at
//! most [`MAX_SECTIONS`] sections (a new one past that replaces the oldest
//! application's; with none, it is dropped), [`MAX_ENTRIES`] entries
//! each, names cut to [`MAX_NAME_BYTES`] and values to [`MAX_VALUE_BYTES`].

use serde::Serialize;

pub const MAX_SECTIONS: usize = 64;
pub const MAX_ENTRIES: usize = 256;
pub const MAX_NAME_BYTES: usize = 256;
pub const MAX_VALUE_BYTES: usize = 4096;
/// What a redacted value reads (Spark's text).
pub const REDACTED: &str = "*********(redacted)";

/// Whether an entry named `name` holds a credential (its value is never shown).
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase().replace(['-', '_', '.'], " ");
    [
        "secret",
        "password",
        "token",
        "credential",
        "private key",
        "access key",
    ]
    .iter()
    .any(|w| n.contains(w))
}

/// One section of the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvSection {
    /// The application it belongs to; empty for the driver's or local mode's.
    pub application: String,
    pub title: String,
    pub entries: Vec<(String, String)>,
}

/// Every section, in the order they first came.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    sections: Vec<EnvSection>,
}

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut out = s[..s.floor_char_boundary(max.saturating_sub('…'.len_utf8()))].to_string();
    out.push('…');
    out
}

impl Environment {
    pub(crate) fn set(&mut self, application: &str, title: &str, entries: &[(String, String)]) {
        let entries: Vec<(String, String)> = (entries.iter().take(MAX_ENTRIES))
            .map(|(k, v)| {
                let v = if is_secret_name(k) {
                    REDACTED.to_string()
                } else {
                    cut(v, MAX_VALUE_BYTES)
                };
                (cut(k, MAX_NAME_BYTES), v)
            })
            .collect();
        let section = EnvSection {
            application: cut(application, MAX_NAME_BYTES),
            title: cut(title, MAX_NAME_BYTES),
            entries,
        };
        let same = (self.sections.iter())
            .position(|s| s.application == section.application && s.title == section.title);
        match same {
            Some(i) => self.sections[i] = section,
            None => {
                if self.sections.len() >= MAX_SECTIONS {
                    // The oldest application's section goes (a driver runs many).
                    match self.sections.iter().position(|s| !s.application.is_empty()) {
                        Some(i) => {
                            self.sections.remove(i);
                        }
                        None => return,
                    }
                }
                self.sections.push(section);
            }
        }
    }

    pub fn sections(&self) -> &[EnvSection] {
        &self.sections
    }

    /// The sections of `application` only (the driver's flags are the operator's).
    pub(crate) fn scoped(&self, application: &str) -> Environment {
        Environment {
            sections: (self.sections.iter())
                .filter(|s| s.application == application)
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_redacted_by_name_and_sections_bounded() {
        for name in [
            "--secret-file",
            "operator_secret_file",
            "EMBER_SECRET",
            "db.password",
            "session token",
            "aws_access_key_id",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["--host", "--ui-port", "executor memory", "keys"] {
            assert!(!is_secret_name(name), "{name}");
        }
        let mut e = Environment::default();
        e.set(
            "",
            "flags",
            &[
                ("--secret-file".into(), "/run/s".into()),
                ("--host".into(), "h".into()),
            ],
        );
        assert_eq!(
            e.sections()[0].entries,
            [
                ("--secret-file".to_string(), REDACTED.to_string()),
                ("--host".to_string(), "h".to_string())
            ]
        );
        for i in 0..MAX_SECTIONS + 3 {
            e.set(&format!("app #{i}"), "Configuration", &[]);
        }
        assert_eq!(e.sections().len(), MAX_SECTIONS);
        // The driver's section stays; the oldest applications' went.
        assert_eq!(e.sections()[0].title, "flags");
        assert_eq!(e.sections()[1].application, "app #4");
        assert_eq!(
            e.sections()[MAX_SECTIONS - 1].application,
            format!("app #{}", MAX_SECTIONS + 2)
        );
    }
}
