//! A real `ember-driver` process for the UI tests: killed and reaped however a test
//! ends, and plain HTTP/1.1 requests to its UI.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Child;

/// The driver process, SIGKILLed and reaped however the test ends.
pub struct Driver(pub Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `METHOD path` on `addr` with `auth` (an Authorization value) and extra header lines:
/// (status, body).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    auth: Option<&str>,
    extra: &[&str],
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(super::WAIT)).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(a) = auth {
        head.push_str(&format!("Authorization: {a}\r\n"));
    }
    for h in extra {
        head.push_str(&format!("{h}\r\n"));
    }
    head.push_str("Content-Length: 0\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    (code, body)
}
