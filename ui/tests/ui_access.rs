//! Who sees what in the UI and what an address may name: stage ids in addresses are
//! full 64-bit numbers (2^32 + 1 is no stage, not stage 1).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use ember_ui::event::StageRef;
use ember_ui::{AppEvent, AppStatus, Auth, Source};
use parking_lot::RwLock;

/// A job of one stage (stage 1) in application `app`, job id `job`.
fn job_events(job: u64, stage: u32, app: &str) -> Vec<AppEvent> {
    vec![
        AppEvent::JobSubmitted {
            job_id: job,
            application: app.into(),
            number: Some(job),
            description: format!("count at {app}.rs:{job}"),
            stages: vec![StageRef {
                stage_id: stage,
                number: Some(stage),
                name: format!("map at {app}.rs:{stage}"),
                num_tasks: 1,
                parents: vec![],
                shuffle_id: None,
            }],
            time_ms: 10,
        },
        AppEvent::StageSubmitted {
            stage_id: stage,
            attempt: 1,
            tasks: 1,
            time_ms: 11,
        },
    ]
}

fn store(events: &[AppEvent]) -> Arc<RwLock<AppStatus>> {
    let mut s = AppStatus::new("ember-driver", 0);
    for e in events {
        s.apply(e);
    }
    Arc::new(RwLock::new(s))
}

/// Serves `source` on an ephemeral loopback port; returns its address and a stopper.
fn serve(
    source: Source,
    auth: Auth,
) -> (
    String,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx
                .send(listener.local_addr().unwrap().to_string())
                .unwrap();
            ember_ui::serve(listener, source, auth, async {
                let _ = stop_rx.await;
            })
            .await
            .unwrap();
        });
    });
    (addr_rx.recv().unwrap(), stop_tx, thread)
}

/// `METHOD path` with extra header lines: (status, body).
fn request(addr: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    (code, body)
}

fn get(addr: &str, path: &str) -> (u16, String) {
    request(addr, "GET", path, &[])
}

#[test]
fn stage_ids_in_addresses_are_not_cut_to_32_bits() {
    let (addr, stop, thread) = serve(Source::Live(store(&job_events(0, 1, ""))), Auth::Open);
    assert_eq!(get(&addr, "/api/v1/stages/1").0, 200);
    assert_eq!(get(&addr, "/stages/1").0, 200);
    let wrapped = 4_294_967_297u64; // 2^32 + 1
    for path in [
        format!("/api/v1/stages/{wrapped}"),
        format!("/api/v1/stages/{wrapped}/tasks"),
        format!("/stages/{wrapped}"),
        format!("/api/v1/stages/{}", u64::MAX),
        // Past u64: still 404, never an error page or a panic.
        "/api/v1/stages/18446744073709551617".to_string(),
        "/api/v1/jobs/18446744073709551616".to_string(),
    ] {
        let (code, body) = get(&addr, &path);
        assert_eq!(code, 404, "{path}: {body}");
        assert!(!body.contains("map at"), "{path} showed a stage: {body}");
    }
    stop.send(()).unwrap();
    thread.join().unwrap();
}
