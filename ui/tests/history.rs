//! The history server over logs that are not clean: bad lines in the middle (unknown
//! event kinds, junk, lines over the reader's limit), torn last lines, logs that grow
//! or appear between listings, and a writer given events too long for one line.

mod common;

use std::io::Write;
use std::path::Path;

use common::{get, json, serve};

use ember_ui::event::StageRef;
use ember_ui::event_log::{replay, CUT_TEXT_BYTES, MAX_LINE_BYTES};
use ember_ui::log_reader::{LogReader, MAX_WARNINGS};
use ember_ui::{AppEvent, AppStatus, Auth, EventLogWriter, Source};

fn line(e: &AppEvent) -> String {
    serde_json::to_string(e).unwrap() + "\n"
}

fn started(name: &str) -> String {
    line(&AppEvent::AppStarted {
        name: name.into(),
        time_ms: 7,
    })
}

fn job(job_id: u64, application: &str, description: &str) -> String {
    line(&AppEvent::JobSubmitted {
        pool_share: Default::default(),
        job_group: Default::default(),
        pool: Default::default(),
        job_id,
        application: application.into(),
        number: Some(job_id),
        description: description.into(),
        stages: vec![StageRef {
            stage_id: job_id as u32,
            number: Some(0),
            name: "map at src/main.rs:3".into(),
            num_tasks: 1,
            parents: vec![],
            shuffle_id: None,
            operators: Vec::new(),
            more_operators: 0,
        }],
        time_ms: 8,
    })
}

fn job_ended(job_id: u64) -> String {
    line(&AppEvent::JobEnded {
        job_id,
        succeeded: true,
        failure: None,
        time_ms: 9,
    })
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A log whose lines 3 to 6 are bad and whose last line is torn.
fn bad_log(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("bad-1-2.jsonl");
    let long = job(5, "huge", &"x".repeat(MAX_LINE_BYTES + 500_000));
    let text = [
        started("many paths"),
        job(0, "a", "count of text_file"),
        "{\"junk\":\"x\"}\n".into(),
        "{\"event\":\"stage_retried_in_a_newer_version\",\"stage_id\":1}\n".into(),
        long,
        "not json\n".into(),
        job(1, "b", "collect of map"),
        job_ended(0),
        "{\"event\":\"job_ended\",\"job_".into(),
    ]
    .concat();
    std::fs::write(&path, text).unwrap();
    path
}

fn jobs(status: &AppStatus) -> Vec<(u64, String, String)> {
    status
        .jobs()
        .iter()
        .map(|j| {
            let v = serde_json::to_value(j).unwrap();
            (
                v["job_id"].as_u64().unwrap(),
                v["description"].as_str().unwrap().to_string(),
                v["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_log_with_bad_lines_in_the_middle_keeps_every_other_event() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_log(dir.path());
    let status = replay(&path).unwrap();
    assert_eq!(status.name, "many paths");
    assert_eq!(
        jobs(&status),
        [
            (1, "collect of map".to_string(), "running".to_string()),
            (0, "count of text_file".to_string(), "succeeded".to_string()),
        ]
    );

    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let apps = json(&addr, "/api/v1/applications");
    assert_eq!(apps.as_array().unwrap().len(), 1, "{apps}");
    assert_eq!(apps[0]["id"], "bad-1-2");
    assert_eq!(apps[0]["name"], "many paths");
    assert_eq!(apps[0]["jobs"], 2);
    let listed = json(&addr, "/api/v1/applications/bad-1-2/jobs");
    assert_eq!(listed[1]["description"], "count of text_file", "{listed}");
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn the_reader_names_each_skipped_line_and_reads_only_what_was_appended() {
    let dir = tempfile::tempdir().unwrap();
    let path = bad_log(dir.path());
    let mut status = AppStatus::default();
    let mut reader = LogReader::new(&path);
    let first = reader.read_new(&mut status).unwrap();
    assert_eq!(first.events, 4);
    let skipped: Vec<String> = first.skipped.iter().map(|e| e.to_string()).collect();
    let at = |n: usize| format!("{}:{n}: ", path.display());
    assert_eq!((skipped.len(), first.skipped_lines), (4, 4), "{skipped:?}");
    assert!(skipped[0].starts_with(&at(3)), "{skipped:?}");
    assert!(
        skipped[1].starts_with(&at(4))
            && skipped[1].contains("does not know (stage_retried_in_a_newer_version)"),
        "{skipped:?}"
    );
    assert!(
        skipped[2].starts_with(&at(5))
            && skipped[2].contains(&format!("longer than {MAX_LINE_BYTES} bytes"))
            && skipped[2].len() < 400,
        "{:?}",
        &skipped[2][..skipped[2].len().min(400)]
    );
    assert!(
        skipped[3].starts_with(&at(6)) && skipped[3].contains("\"not json\""),
        "{skipped:?}"
    );
    // The torn line is left for the next read, which sees it whole.
    let torn = "{\"event\":\"job_ended\",\"job_".len() as u64;
    assert_eq!(first.partial_bytes, torn);
    assert_eq!(
        reader.offset(),
        std::fs::metadata(&path).unwrap().len() - torn
    );
    append(
        &path,
        &format!(
            "id\":1,\"succeeded\":false,\"failure\":\"boom\",\"time_ms\":10}}\n{}",
            job(2, "c", "third")
        ),
    );
    let second = reader.read_new(&mut status).unwrap();
    assert_eq!((second.events, second.skipped.len()), (2, 0));
    assert_eq!(
        jobs(&status),
        [
            (2, "third".to_string(), "running".to_string()),
            (1, "collect of map".to_string(), "failed".to_string()),
            (0, "count of text_file".to_string(), "succeeded".to_string()),
        ]
    );
    assert_eq!(reader.offset(), std::fs::metadata(&path).unwrap().len());
}

#[test]
fn many_bad_lines_are_counted_but_only_the_first_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.jsonl");
    let junk = "{\"junk\":\"x\"}\n".repeat(50);
    std::fs::write(
        &path,
        [started("x"), junk, job(0, "a", "after the junk")].concat(),
    )
    .unwrap();
    let mut status = AppStatus::default();
    let read = LogReader::new(&path).read_new(&mut status).unwrap();
    assert_eq!(
        (read.events, read.skipped.len(), read.skipped_lines),
        (2, MAX_WARNINGS, 50)
    );
    assert!(read.skipped[MAX_WARNINGS - 1]
        .to_string()
        .starts_with(&format!("{}:{}: ", path.display(), MAX_WARNINGS + 1)));
    assert_eq!(jobs(&status)[0].1, "after the junk");
}

#[test]
fn a_log_that_does_not_start_with_app_started_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.jsonl");
    std::fs::write(&path, format!("{{\"junk\":\"x\"}}\n{}", started("x"))).unwrap();
    let err = replay(&path).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:1: ", path.display())) && err.contains("app_started"),
        "{err}"
    );
}

#[test]
fn the_listing_reads_logs_that_grew_or_appeared_since_the_last_one() {
    let dir = tempfile::tempdir().unwrap();
    let grows = dir.path().join("grows-1-1.jsonl");
    std::fs::write(
        &grows,
        [started("first run"), job(0, "a", "count")].concat(),
    )
    .unwrap();
    // Created but not written yet, as a driver that just started.
    let fresh = dir.path().join("fresh-2-2.jsonl");
    std::fs::write(&fresh, "").unwrap();
    let gone = dir.path().join("gone-3-3.jsonl");
    std::fs::write(&gone, started("removed later")).unwrap();

    let (addr, stop, thread) = serve(Source::History(dir.path().to_path_buf()), Auth::Open);
    let apps = json(&addr, "/api/v1/applications");
    let ids: Vec<&str> = apps
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gone-3-3", "grows-1-1"], "{apps}");
    assert_eq!(apps[1]["jobs"], 1);
    assert_eq!(get(&addr, "/api/v1/applications/fresh-2-2/jobs").0, 404);

    append(
        &grows,
        &[
            "{\"junk\":\"x\"}\n".to_string(),
            job(1, "second session", "collect"),
        ]
        .concat(),
    );
    append(
        &fresh,
        &[started("second run"), job(0, "b", "first")].concat(),
    );
    std::fs::remove_file(&gone).unwrap();
    let apps = json(&addr, "/api/v1/applications");
    let got: Vec<(String, String, u64)> = apps
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["name"].as_str().unwrap().to_string(),
                a["jobs"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("fresh-2-2".to_string(), "second run".to_string(), 1),
            ("grows-1-1".to_string(), "first run".to_string(), 2),
        ],
        "{apps}"
    );
    let grown = json(&addr, "/api/v1/applications/grows-1-1/jobs");
    assert_eq!(grown[0]["application"], "second session", "{grown}");
    assert_eq!(get(&addr, "/api/v1/applications/gone-3-3/jobs").0, 404);
    // A page of a log appended to since the last listing is read up to date.
    append(&grows, &job(2, "third session", "reduce"));
    let page = json(&addr, "/api/v1/applications/grows-1-1/jobs");
    assert_eq!(page[0]["application"], "third session", "{page}");
    stop.send(()).unwrap();
    thread.join().unwrap();
}

#[test]
fn the_writer_cuts_an_event_too_long_for_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = EventLogWriter::create(dir.path(), &"é".repeat(MAX_LINE_BYTES), 1).unwrap();
    let huge = format!("text_file({})", "a,".repeat(MAX_LINE_BYTES));
    let mut submitted = job(0, "a", &huge);
    submitted.pop();
    let e: AppEvent = serde_json::from_str(&submitted).unwrap();
    w.write(&e).unwrap();
    w.write(&serde_json::from_str(job_ended(0).trim_end()).unwrap())
        .unwrap();
    w.flush().unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert!(text.lines().all(|l| l.len() <= MAX_LINE_BYTES));
    let mut status = AppStatus::default();
    let read = LogReader::new(&path).read_new(&mut status).unwrap();
    assert_eq!((read.events, read.skipped.len()), (3, 0));
    assert!(status.name.len() <= CUT_TEXT_BYTES && status.name.ends_with("é…"));
    let (id, description, state) = jobs(&status).remove(0);
    assert_eq!((id, state.as_str()), (0, "succeeded"));
    assert!(
        description.len() <= CUT_TEXT_BYTES
            && description.starts_with("text_file(a,a,")
            && description.ends_with('…'),
        "{}",
        &description[..100]
    );
}

/// A `job_submitted` line of exactly `bytes` bytes before its newline.
fn job_of_len(job_id: u64, bytes: usize) -> String {
    let base = job(job_id, "a", "").len() - 1;
    let l = job(job_id, "a", &"d".repeat(bytes - base));
    assert_eq!(l.len(), bytes + 1);
    l
}

#[test]
fn a_line_of_exactly_the_bound_is_read_and_one_byte_over_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // The writer writes an event of exactly the bound whole, and the reader reads it.
    let exact = job_of_len(0, MAX_LINE_BYTES);
    let mut w = EventLogWriter::create(dir.path(), "w", 1).unwrap();
    w.write(&serde_json::from_str(exact.trim_end()).unwrap())
        .unwrap();
    w.flush().unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    assert!(std::fs::read_to_string(&path).unwrap().ends_with(&exact));
    let status = replay(&path).unwrap();
    let read: Vec<_> = jobs(&status)
        .into_iter()
        .map(|(id, d, _)| (id, d.len()))
        .collect();
    let base = job(0, "a", "").len() - 1;
    assert_eq!(read, vec![(0, MAX_LINE_BYTES - base)]);

    // A first line of exactly the bound starts the log; one byte over is skipped.
    let base = started("").len() - 1;
    let first = started(&"n".repeat(MAX_LINE_BYTES - base));
    assert_eq!(first.len(), MAX_LINE_BYTES + 1);
    let path = dir.path().join("exact-1-2.jsonl");
    let text = first + &job_of_len(1, MAX_LINE_BYTES + 1) + &job(2, "a", "ok") + &job_ended(2);
    std::fs::write(&path, text).unwrap();
    let mut status = AppStatus::default();
    let read = LogReader::new(&path).read_new(&mut status).unwrap();
    assert_eq!((read.events, read.skipped.len()), (3, 1));
    let ids: Vec<u64> = jobs(&status).into_iter().map(|(id, _, _)| id).collect();
    assert_eq!(ids, vec![2]);
}
