//! A peer process killed with SIGKILL while this rank is blocked on it makes this rank
//! fail with `PeerLost`, not hang. The peer is this test binary run again as a child,
//! executing only the ignored `child_rank` entry below.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ember_collective::{
    CollectiveError, CommOptions, Communicator, Endpoint, PeerAddr, ReduceOp, StageKey,
};

const CHILD_DIR: &str = "EMBER_COLLECTIVE_TEST_CHILD_DIR";
const CHILD_KEY: &str = "EMBER_COLLECTIVE_TEST_CHILD_KEY";
const WATCHDOG: Duration = Duration::from_secs(120);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Rank 1, in the child process: reports its address, reads rank 0's, connects, takes
/// part in one barrier, then makes no further call until its stdin closes.
#[test]
#[ignore = "the child side of killed_peer_process_fails_the_others"]
fn child_rank() {
    let dir = std::env::var(CHILD_DIR).expect("run by killed_peer_process_fails_the_others");
    let key = StageKey::try_from(&unhex(&std::env::var(CHILD_KEY).unwrap())[..]).unwrap();
    let endpoint = Endpoint::bind_unix(std::path::Path::new(&dir)).unwrap();
    println!("addr {}", endpoint.addr());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let peers = vec![
        PeerAddr::parse(line.trim()).unwrap(),
        endpoint.addr().clone(),
    ];
    let mut comm =
        Communicator::connect(endpoint, 1, &peers, &key, CommOptions::default()).unwrap();
    comm.barrier().unwrap();
    println!("barrier done");
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn killed_peer_process_fails_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let key = StageKey::random().unwrap();
    let endpoint = Endpoint::bind_unix(dir.path()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_rank",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir.path())
        .env(CHILD_KEY, hex(key.as_bytes()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().unwrap();
    let (line_tx, line_rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line_tx.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = |prefix: &str| loop {
        let line = line_rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: the child said nothing");
        // libtest may print "test child_rank ... " before it on the same line.
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].to_string();
        }
    };
    let child_addr = PeerAddr::parse(&next_line("addr ")).unwrap();
    let mut stdin = child.0.stdin.take().unwrap();
    writeln!(stdin, "{}", endpoint.addr()).unwrap();
    let peers = vec![endpoint.addr().clone(), child_addr];
    let abort = endpoint.abort_handle();
    let (outcome_tx, outcome_rx) = mpsc::channel();
    thread::spawn(move || {
        let mut comm =
            Communicator::connect(endpoint, 0, &peers, &key, CommOptions::default()).unwrap();
        comm.barrier().unwrap();
        let mut data = vec![1.0f64; 1000];
        let _ = outcome_tx.send(comm.all_reduce_slice(&mut data, ReduceOp::Sum));
    });
    next_line("barrier done");
    // Rank 0 is (or is about to be) blocked on the child: kill -9 it.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    match outcome_rx.recv_timeout(WATCHDOG) {
        Ok(Err(CollectiveError::PeerLost { rank: 1, .. })) => {}
        Ok(other) => panic!("expected PeerLost from rank 1, got {other:?}"),
        Err(_) => {
            abort.abort();
            panic!("watchdog: rank 0 hung on a killed peer");
        }
    }
    drop(stdin);
}
