//! `Context::ui_token()`: in cluster mode a context can hand its session's token to the
//! driver's web UI, which then shows that application and nothing cluster-wide; the
//! cluster secret alone opens nothing there. Local mode has no token.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::cluster::Cluster;
use ember::{Conf, Context, Master};

const CLUSTER: &str = "cluster-secret-for-the-ui-token-test";
const OPERATOR: &str = "operator-secret-for-the-ui-token-test";

/// `GET path` with `Authorization: Bearer token`: (status, body).
fn get(addr: &str, path: &str, token: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let body = out.split_once("\r\n\r\n").map(|x| x.1.to_string());
    (out[9..12].parse().unwrap(), body.unwrap_or_default())
}

#[test]
fn a_cluster_contexts_ui_token_opens_its_own_application_only() {
    assert_eq!(common::ctx(1).ui_token(), None, "local mode has none");

    let scratch = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with_ui(0, 1, CLUSTER, OPERATOR, scratch.path());
    let ui = cluster.ui_address();
    // The only test in this binary: no other thread reads the environment.
    std::env::set_var("EMBER_SECRET", CLUSTER);
    let mut conf = Conf::from_env_vars().unwrap();
    conf.master = Master::Cluster(cluster.url.clone());
    let ctx = Context::with_conf(conf).unwrap();
    let token = ctx.ui_token().expect("a cluster context has a UI token");
    assert_eq!(token.len(), 64);

    assert_eq!(get(&ui, "/api/v1/jobs", &token), (200, "[]".to_string()));
    assert_eq!(get(&ui, "/api/v1/executors", &token).0, 403);
    assert_eq!(get(&ui, "/api/v1/jobs", CLUSTER).0, 401);
    assert_eq!(get(&ui, "/api/v1/executors", OPERATOR).0, 200);
    drop(ctx);
    // A closed session's token opens nothing.
    let mut closed = 0;
    for _ in 0..250 {
        closed = get(&ui, "/api/v1/jobs", &token).0;
        if closed == 401 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(closed, 401, "the token outlived its session");
}
