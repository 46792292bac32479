//! The Storage page (Spark's): every cached RDD with its storage level, partitions
//! cached of all, size in memory and on disk, and one RDD's page with the executors
//! holding its blocks.
//!
//! Invariant: every text shown is escaped; numbers are the store's.

use std::fmt::Write as _;

use crate::html::{bytes, esc, page};
use crate::store::storage::RddStorageInfo;
use crate::store::AppStatus;

fn rdd_row(out: &mut String, base: &str, r: &RddStorageInfo) {
    let _ = write!(
        out,
        "<tr><td class=\"n\"><a href=\"{base}/storage/rdd/{id}\">{id}</a></td><td>{name}</td><td>{level}</td>\
         <td class=\"n\">{cached} / {all}</td><td class=\"n\">{frac:.0}%</td><td class=\"n\">{mem}</td><td class=\"n\">{disk}</td></tr>",
        id = r.rdd_id,
        name = esc(&r.name),
        level = r.storage_level,
        cached = r.partitions_cached,
        all = r.num_partitions,
        frac = if r.num_partitions == 0 {
            0.0
        } else {
            100.0 * f64::from(r.partitions_cached) / f64::from(r.num_partitions)
        },
        mem = bytes(r.memory_bytes),
        disk = bytes(r.disk_bytes),
    );
}

const RDD_HEAD: &str = "<table class=\"storage\"><tr><th>RDD</th><th>Name</th><th>Storage level</th>\
    <th>Partitions cached / total</th><th>Fraction cached</th><th>Size in memory</th><th>Size on disk</th></tr>";

pub(crate) fn storage_page(app: &AppStatus, base: &str) -> String {
    let rdds = app.storage.rdds();
    let mut body = format!("<h2>Cached RDDs ({})</h2>", rdds.len());
    if rdds.is_empty() {
        body.push_str("<p>No RDD is cached (persist, cache or local_checkpoint one).</p>");
    } else {
        body.push_str(RDD_HEAD);
        for r in &rdds {
            rdd_row(&mut body, base, r);
        }
        body.push_str("</table>");
    }
    if app.storage.untracked_blocks > 0 {
        let _ = write!(
            body,
            "<p>{} more blocks were reported than this page tracks.</p>",
            app.storage.untracked_blocks
        );
    }
    page(app, base, "Storage", &body)
}

pub(crate) fn rdd_page(app: &AppStatus, base: &str, r: &RddStorageInfo) -> String {
    let mut body = String::from(RDD_HEAD);
    rdd_row(&mut body, base, r);
    body.push_str(
        "</table><h2>Executors</h2><table class=\"rdd-executors\"><tr><th>Executor</th><th>Blocks</th>\
         <th>Size in memory</th><th>Size on disk</th></tr>",
    );
    for x in &r.executors {
        let _ = write!(
            body,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&x.executor_id),
            x.blocks,
            bytes(x.memory_bytes),
            bytes(x.disk_bytes)
        );
    }
    body.push_str("</table>");
    page(app, base, &format!("RDD {}", r.rdd_id), &body)
}
