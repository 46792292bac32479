//! Fetching job binaries from a (fake) driver: verified before they are stored.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;

use ember_executor::binaries::{BinaryError, BinaryStore};

use crate::common::{
    chunks_of, driver_conn, sha256_hex, start_driver, start_driver_with_chunks, within,
};

#[tokio::test]
async fn a_binary_that_does_not_match_its_hash_is_refused_and_not_kept() {
    let claimed = sha256_hex(b"the real binary");
    let served = b"something else entirely".to_vec();
    let actual = sha256_hex(&served);
    let driver = start_driver(HashMap::from([(claimed.clone(), served)]), Some("s")).await;
    let dir = tempfile::tempdir().unwrap();
    let store = BinaryStore::new(dir.path());
    let conn = driver_conn(&driver.url, Some("s")).await;

    let err = within("ensure", store.ensure(&claimed, &conn))
        .await
        .unwrap_err();
    assert!(matches!(err, BinaryError::HashMismatch { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "binary {claimed} fetched from the driver does not match its hash (content hashes \
             to {actual}); refusing to run it"
        )
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing kept"
    );
}

#[tokio::test]
async fn a_matching_binary_is_stored_executable_and_fetched_once() {
    let content = b"#!/bin/sh\nexit 0\n".repeat(10);
    let sha = sha256_hex(&content);
    let driver = start_driver(HashMap::from([(sha.clone(), content.clone())]), None).await;
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(BinaryStore::new(dir.path()));
    let conn = driver_conn(&driver.url, None).await;

    // Concurrent tasks of one binary share one fetch.
    let mut joins = Vec::new();
    for _ in 0..4 {
        let (store, conn, sha) = (store.clone(), conn.clone(), sha.clone());
        joins.push(tokio::spawn(async move { store.ensure(&sha, &conn).await }));
    }
    for j in joins {
        let path = within("ensure", j).await.unwrap().unwrap();
        assert_eq!(path, dir.path().join(&sha));
    }
    assert_eq!(driver.fetches.load(Ordering::SeqCst), 1);
    let path = dir.path().join(&sha);
    assert_eq!(std::fs::read(&path).unwrap(), content);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temp left"
    );

    // Present already: no fetch.
    store.ensure(&sha, &conn).await.unwrap();
    assert_eq!(driver.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_decompression_bomb_or_more_than_announced_is_refused_and_not_kept() {
    // A chunk of 1 MiB of zeros, compressed, declared as 1,000 bytes.
    let content = vec![0u8; 1000];
    let sha = sha256_hex(&content);
    let mut bomb = ember_proto::binary_chunk::encode(&vec![0u8; 1 << 20]);
    bomb.raw_len = 1000;
    bomb.sha256 = sha.clone();
    bomb.total_len = 1000;
    // The right bytes, then one more chunk than the length announced.
    let longer = b"#!/bin/sh\nexit 0\n".to_vec();
    let longer_sha = sha256_hex(&longer);
    let mut too_many = chunks_of(&longer_sha, &longer);
    too_many.push(ember_proto::binary_chunk::encode(b"extra"));
    let driver = start_driver_with_chunks(
        HashMap::from([(sha.clone(), content), (longer_sha.clone(), longer)]),
        HashMap::from([(sha.clone(), vec![bomb]), (longer_sha.clone(), too_many)]),
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let store = BinaryStore::new(dir.path());
    let conn = driver_conn(&driver.url, None).await;

    let err = within("ensure", store.ensure(&sha, &conn))
        .await
        .unwrap_err();
    assert!(matches!(err, BinaryError::Decode { .. }), "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "binary {sha} fetched from the driver: LZ4 binary chunk of "
        )) && err
            .to_string()
            .contains("does not decode to the 1000 bytes it declares"),
        "{err}"
    );
    let err = within("ensure", store.ensure(&longer_sha, &conn))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "binary {longer_sha} fetched from the driver: binary chunks decode to more than \
             the 17 bytes the binary declares (17 bytes before a chunk of 5); refusing it"
        )
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing kept"
    );
}

#[tokio::test]
async fn bad_hashes_and_unknown_binaries_are_errors() {
    let driver = start_driver(HashMap::new(), None).await;
    let dir = tempfile::tempdir().unwrap();
    let store = BinaryStore::new(dir.path());
    let conn = driver_conn(&driver.url, None).await;
    for bad in ["", "../../etc/passwd", &"A".repeat(64), &"a".repeat(63)] {
        let err = store.ensure(bad, &conn).await.unwrap_err();
        assert!(matches!(err, BinaryError::BadHash(_)), "{bad}: {err}");
    }
    assert_eq!(driver.fetches.load(Ordering::SeqCst), 0);
    let unknown = sha256_hex(b"nobody uploaded this");
    let err = store.ensure(&unknown, &conn).await.unwrap_err();
    assert!(matches!(err, BinaryError::Fetch { .. }), "{err}");
    assert!(err.to_string().contains("NotFound"), "{err}");
}

#[test]
fn unused_binaries_past_the_max_age_are_deleted_and_leased_ones_kept() {
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(BinaryStore::new(dir.path()));
    let (a, b) = (sha256_hex(b"binary a"), sha256_hex(b"binary b"));
    for name in [a.as_str(), b.as_str(), "unrelated.txt"] {
        std::fs::write(dir.path().join(name), b"x").unwrap();
    }
    let lease = store.acquire(&a);
    // Just seen or used: kept under the default age.
    assert!(store.collect_garbage(Duration::from_secs(3600)).is_empty());
    // Any age: the binary with a live worker stays, the unused one goes.
    assert_eq!(store.collect_garbage(Duration::ZERO), vec![b.clone()]);
    assert!(dir.path().join(&a).exists() && !dir.path().join(&b).exists());
    drop(lease); // its worker is gone: just used now
    assert!(store.collect_garbage(Duration::from_secs(3600)).is_empty());
    assert_eq!(store.collect_garbage(Duration::ZERO), vec![a.clone()]);
    assert!(
        dir.path().join("unrelated.txt").exists(),
        "only binaries are collected"
    );
}
