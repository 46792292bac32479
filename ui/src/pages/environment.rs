//! The Environment page (Spark's): each configuration section (the driver's flags, an
//! application's configuration) as a table of names and values.
//!
//! Invariant: values are the store's, where credentials are already redacted
//! (`store::environment`); every text is escaped.

use std::fmt::Write as _;

use crate::html::{esc, page};
use crate::store::AppStatus;

pub(crate) fn environment_page(app: &AppStatus, base: &str) -> String {
    let mut body = String::new();
    let sections = app.environment.sections();
    if sections.is_empty() {
        body.push_str("<p>No configuration was reported.</p>");
    }
    for s in sections {
        let title = if s.application.is_empty() {
            esc(&s.title)
        } else {
            format!("{} of {}", esc(&s.title), esc(&s.application))
        };
        let _ = write!(
            body,
            "<h2>{title}</h2><table class=\"environment\"><tr><th>Name</th><th>Value</th></tr>"
        );
        for (k, v) in &s.entries {
            let _ = write!(body, "<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
        }
        body.push_str("</table>");
    }
    page(app, base, "Environment", &body)
}
