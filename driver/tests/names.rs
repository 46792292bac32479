//! What clients name reaches the driver's log escaped and bounded: an app name with a
//! newline is one log line, a 1 MB app name is cut at 256 bytes with the cut marked,
//! and a node name with a newline is one "submitting stage" line.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use ember_proto::SubmitJobRequest;

/// Log lines written by the driver under test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[tokio::test]
async fn app_names_are_logged_escaped_and_cut_at_their_bound() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();
    let driver = start(Options::default()).await;
    let mut c = client(driver.addr, None).await;
    let sha = upload(&mut c, b"bin").await;

    let (first, _session) =
        open_named(&mut c, &sha, "evil\nINFO forged: session opened".into()).await;
    let lines = captured.lines();
    let opened: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("session opened"))
        .collect();
    assert_eq!(opened.len(), 1, "{lines:#?}");
    assert!(
        opened[0].contains(r"app=evil\nINFO forged: session opened"),
        "{}",
        opened[0]
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("INFO forged")),
        "{lines:#?}"
    );

    let huge = "n".repeat(1 << 20);
    let _second = open_named(&mut c, &sha, huge).await;
    let lines = captured.lines();
    let opened: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("session opened"))
        .collect();
    assert_eq!(opened.len(), 2, "{lines:#?}");
    let line = opened[1];
    assert!(line.len() < 1024, "a {} byte log line", line.len());
    let kept = format!(
        "app={}… ({} bytes more; app names are cut at 256 bytes)",
        "n".repeat(256),
        (1 << 20) - 256
    );
    assert!(line.contains(&kept), "{line}");

    // A node name with a newline: the scheduler's "submitting stage" line escapes it.
    let mut plan = tiny_plan(first.id_base, 1, &sha);
    plan.nodes[0].name = "tiny\nINFO forged stage".into();
    let req = SubmitJobRequest {
        session_id: first.session_id,
        plan: Some(plan),
        new_broadcasts: vec![],
    };
    let req = ember_proto::auth::with_session_token(tonic::Request::new(req), &first.session_token)
        .unwrap();
    let _job = c.submit_job(req).await.expect("job accepted");
    let deadline = std::time::Instant::now() + WAIT;
    let line = loop {
        let lines = captured.lines();
        if let Some(l) = lines.iter().find(|l| l.contains("submitting stage")) {
            break l.clone();
        }
        assert!(std::time::Instant::now() < deadline, "{lines:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    assert!(
        line.contains(r"submitting stage tiny\nINFO forged stage"),
        "{line}"
    );
    let lines = captured.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("INFO forged")),
        "{lines:#?}"
    );
}
