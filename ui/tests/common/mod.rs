//! Helpers shared by the UI's HTTP tests: a UI server on an ephemeral loopback port,
//! and plain HTTP/1.1 requests to it.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

use ember_ui::{Auth, Source};

/// Serves `source` on an ephemeral loopback port; returns its address and a stopper.
pub fn serve(
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
pub fn request(addr: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String) {
    let (code, _, body) = exchange(addr, method, path, headers);
    (code, body)
}

/// `GET path`: (status, its `Location` header).
pub fn location(addr: &str, path: &str, headers: &[&str]) -> (u16, Option<String>) {
    let (code, head, _) = exchange(addr, "GET", path, headers);
    let to = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("location")
            .then(|| v.trim().to_string())
    });
    (code, to)
}

/// `METHOD path` with extra header lines: (status, response head, body).
fn exchange(addr: &str, method: &str, path: &str, headers: &[&str]) -> (u16, String, String) {
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
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (code, head.to_string(), body.to_string())
}

/// `GET path`: (status, body).
pub fn get(addr: &str, path: &str) -> (u16, String) {
    request(addr, "GET", path, &[])
}

/// `GET path`, following one redirect (an old `/jobs/ID` or `/stages/ID` address
/// answers 303 to its application's): (status, body).
#[allow(dead_code)]
pub fn get_followed(addr: &str, path: &str) -> (u16, String) {
    match location(addr, path, &[]) {
        (303, Some(to)) => get(addr, &to),
        _ => get(addr, path),
    }
}

/// `GET path` answered 200, its body parsed as JSON.
pub fn json(addr: &str, path: &str) -> serde_json::Value {
    let (code, body) = get(addr, path);
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}
