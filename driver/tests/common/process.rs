//! A real `ember-driver` process for the UI tests: started and its two addresses read,
//! killed and reaped however a test ends, and plain HTTP/1.1 requests to its UI.

use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, ChildStdout, Command, Stdio};

/// The driver process, SIGKILLed and reaped however the test ends.
pub struct Driver(pub Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Spawns `cmd` (an `ember-driver` daemon) with its stdout piped and reads the two lines
/// it prints: (the process, the rest of its stdout, the gRPC address, the UI address).
/// Keep the stdout alive as long as the driver runs.
pub fn start(cmd: &mut Command) -> (Driver, Lines<BufReader<ChildStdout>>, SocketAddr, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn ember-driver");
    let stdout = child.stdout.take().unwrap();
    let driver = Driver(child);
    let mut lines = BufReader::new(stdout).lines();
    let mut line = || lines.next().expect("a line").expect("utf-8");
    let grpc: SocketAddr = line()
        .strip_prefix("ember-driver listening on http://")
        .expect("the gRPC line")
        .parse()
        .unwrap();
    let ui = line()
        .strip_prefix("ember-driver ui on http://")
        .expect("the UI line")
        .to_string();
    (driver, lines, grpc, ui)
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
