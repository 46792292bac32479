//! What clients name (app names, job descriptions, call sites), as the driver keeps,
//! logs and shows it.
//!
//! Invariants:
//! - A client-chosen string the driver logs or shows has every control character
//!   escaped (`\n`, `\u{1b}`, ...), so it can never forge a log line or a terminal
//!   escape, and is at most its bound in bytes of the client's text, cut at a character
//!   boundary and marked with how much was left out and which bound cut it.
//! - Nothing here allocates in proportion to the client's string beyond the bound.

/// Bytes of a client's app name the driver keeps (longer names are cut).
pub const MAX_APP_NAME_BYTES: usize = 256;

pub use ember_scheduler::limits::escaped_prefix;

/// A client's app name as the driver keeps, logs and shows it.
pub fn app_name(raw: &str) -> String {
    escaped_prefix(raw, MAX_APP_NAME_BYTES, "app names")
}

/// Entries of a client's configuration the driver keeps (the rest are left out).
pub const MAX_CONF_ENTRIES: usize = 64;
/// Bytes of each configuration name or value the driver keeps.
pub const MAX_CONF_BYTES: usize = 1024;

/// A configuration name or value of a client, as the Environment page shows it.
pub fn conf_text(raw: &str) -> String {
    escaped_prefix(raw, MAX_CONF_BYTES, "configuration entries")
}

/// A job description or call site as the driver logs it (at most
/// [`ember_scheduler::limits::MAX_LOGGED_BYTES`]).
pub fn logged(raw: &str) -> String {
    ember_scheduler::limits::for_log(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_names_cut_at_a_char_boundary() {
        assert_eq!(app_name("wordcount"), "wordcount");
        assert_eq!(
            app_name("a\nINFO forged\r\t\u{1b}[31m"),
            "a\\nINFO forged\\r\\t\\u{1b}[31m"
        );
        // 'é' is two bytes: a cut inside it keeps the whole character out.
        let s = format!("{}é tail", "x".repeat(3));
        assert_eq!(
            escaped_prefix(&s, 4, "names"),
            format!(
                "xxx… ({} bytes more; names are cut at 4 bytes)",
                s.len() - 3
            )
        );
        let long = "y".repeat(1 << 20);
        let kept = app_name(&long);
        assert!(kept.starts_with(&"y".repeat(MAX_APP_NAME_BYTES)));
        assert!(kept.ends_with(&format!(
            "… ({} bytes more; app names are cut at 256 bytes)",
            (1 << 20) - 256
        )));
    }
}
