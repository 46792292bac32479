//! The fair comparator's order and the pool file's checks.

use super::file::parse;
use super::*;

#[test]
fn a_needy_pool_goes_before_a_satisfied_one_then_running_per_weight() {
    // Below its min share first, whatever the weights.
    assert!(FairKey::new(2, 1, 3) < FairKey::new(0, 100, 0));
    // Among the needy: running per min share.
    assert!(FairKey::new(1, 1, 4) < FairKey::new(1, 1, 2));
    // Among the satisfied: running per weight, exactly (3/3 == 1/1).
    assert!(FairKey::new(2, 3, 0) < FairKey::new(1, 1, 0));
    assert_eq!(
        FairKey::new(3, 3, 0).cmp(&FairKey::new(1, 1, 0)),
        Ordering::Equal
    );
}

#[test]
fn the_application_name_drops_the_drivers_session_number() {
    assert_eq!(application_name("nightly #12"), "nightly");
    assert_eq!(application_name("a #b #3"), "a #b");
    assert_eq!(application_name("no number #"), "no number #");
    assert_eq!(application_name("word #x"), "word #x");
    assert_eq!(application_name(""), "");
}

#[test]
fn a_pool_file_sets_applications_and_pools() {
    let parsed = parse(
        r#"
        [applications."nightly etl"]
        weight = 2
        min_share = 4

        [pools.etl]
        weight = 3
        mode = "FAIR"

        [pools.adhoc]
        "#,
    )
    .unwrap();
    assert_eq!(
        parsed.applications["nightly etl"],
        PoolSettings {
            weight: 2,
            min_share: 4,
            mode: SchedulingMode::Fair
        }
    );
    assert_eq!(
        parsed.pools["etl"],
        PoolSettings {
            weight: 3,
            min_share: 0,
            mode: SchedulingMode::Fair
        }
    );
    assert_eq!(parsed.pools["adhoc"], PoolSettings::default());
}

#[test]
fn a_bad_pool_file_says_what_and_where() {
    let err = |text: &str| parse(text).err().expect("refused");
    let e = err("[pools.etl]\nweight = 0\n");
    assert!(
        e.contains("[pools.\"etl\"]: weight must be at least 1"),
        "{e}"
    );
    let e = err("[pools.etl]\nmode = \"round robin\"\n");
    assert!(e.contains("neither \"fifo\" nor \"fair\""), "{e}");
    let e = err("[pools.etl]\nwieght = 2\n");
    assert!(e.contains("wieght") && e.contains("line 2"), "{e}");
    let e = err("[applications.x]\nmode = \"fair\"\n");
    assert!(e.contains("mode is not a setting of a session"), "{e}");
    let e = err("[pool.etl]\n");
    assert!(e.contains("pool"), "{e}");
    let long = "p".repeat(ember_proto::limits::MAX_JOB_PROPERTY_BYTES + 1);
    let e = err(&format!("[pools.{long}]\n"));
    assert!(e.contains("over the limit") && e.len() < 300, "{e}");
}

#[test]
fn a_missing_or_oversized_pool_file_is_named() {
    let dir = std::env::temp_dir().join(format!("ember-pools-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("missing.toml");
    let mut config = FairConfig::default();
    let e = config.load_pool_file(&missing).unwrap_err().to_string();
    assert!(e.contains("missing.toml"), "{e}");
    let big = dir.join("big.toml");
    std::fs::write(&big, vec![b'#'; MAX_POOL_FILE_BYTES as usize + 10]).unwrap();
    let e = config.load_pool_file(&big).unwrap_err().to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(e.contains("big.toml") && e.contains("over"), "{e}");
}
