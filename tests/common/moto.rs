//! A real S3-compatible server for tests: moto (`moto_server`, from PyPI's
//! `moto[server]`) on an ephemeral loopback port, killed when dropped.
//!
//! `EMBER_TEST_MOTO_SERVER` names the `moto_server` executable (`.ci/run` sets it to
//! the one it installs); else it is looked up on `PATH`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Moto {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Moto {
    /// Starts a server and waits (at most 60 s) until it answers.
    pub fn start() -> Moto {
        // A path is made absolute here: the server runs in its own directory.
        let exe = match std::env::var("EMBER_TEST_MOTO_SERVER") {
            Ok(p) => std::path::absolute(&p)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or(p),
            Err(_) => "moto_server".into(),
        };
        let dir = tempfile::Builder::new()
            .prefix("ember-moto-")
            .tempdir()
            .unwrap();
        let log_path = dir.path().join("moto.log");
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let log = std::fs::File::create(&log_path).unwrap();
            let child = Command::new(&exe)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .current_dir(dir.path())
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start {exe} ({e}): install it with `pip install 'moto[server]'` \
                         or run .ci/run, which does"
                    )
                });
            let mut child = Killed(Some(child));
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut exited = false;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.0.as_mut().unwrap().try_wait() {
                    exited = true; // the port was taken meanwhile: try another
                    break;
                }
                if request(port, "GET", "/", b"").is_some() {
                    return Moto {
                        child: child.0.take().unwrap(),
                        port,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if !exited {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("moto did not answer within 60 s:\n{log}");
            }
        }
        panic!("moto could not start on any of 5 ports");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The AWS environment variables that point object_store at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// Creates bucket `name`.
    pub fn create_bucket(&self, name: &str) {
        let status = self
            .request("PUT", &format!("/{name}"), b"")
            .expect("moto answers");
        assert!(status < 300, "creating bucket {name}: HTTP {status}");
    }

    /// The keys of bucket `bucket` under `prefix` (the first 1,000), sorted.
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let path = format!("/{bucket}?list-type=2&prefix={prefix}");
        let (status, body) = exchange(self.port, "GET", &path, b"").expect("moto answers");
        assert!(
            status < 300,
            "listing {bucket}/{prefix}: HTTP {status}: {body}"
        );
        let mut keys: Vec<String> = body
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_string()))
            .collect();
        keys.sort();
        keys
    }

    fn request(&self, method: &str, path: &str, body: &[u8]) -> Option<u16> {
        request(self.port, method, path, body)
    }
}

/// A child killed when dropped (until taken).
struct Killed(Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One plain HTTP/1.1 request to `port`; the status code, or `None` if nothing answered.
fn request(port: u16, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    exchange(port, method, path, body).map(|(status, _)| status)
}

/// One plain HTTP/1.1 request to `port`; the status code and the body.
fn exchange(port: u16, method: &str, path: &str, body: &[u8]) -> Option<(u16, String)> {
    {
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).ok()?;
        s.write_all(body).ok()?;
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        let status = reply.split_whitespace().nth(1)?.parse().ok()?;
        let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Some((status, body.to_string()))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
