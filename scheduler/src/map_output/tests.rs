//! The map-output tracker's tests.

use super::*;

fn loc(m: u32, e: &str) -> MapLocation {
    MapLocation {
        map_partition: m,
        executor_id: e.into(),
        ..Default::default()
    }
}

#[test]
fn tracks_missing_outputs_and_executor_loss() {
    let mut t = MapOutputTracker::default();
    t.register_shuffle(7, 3);
    assert_eq!(t.missing(7), vec![0, 1, 2]);
    t.register_output(7, loc(0, "a"));
    t.register_output(7, loc(1, "b"));
    t.register_output(7, loc(2, "a"));
    assert!(t.is_available(7));
    assert_eq!(t.executor_lost("a").0, vec![7]);
    assert_eq!(t.missing(7), vec![0, 2]);
    assert_eq!(
        t.executor_lost("a").0,
        Vec::<u32>::new(),
        "a holds nothing now"
    );
    assert_eq!(t.missing(7), vec![0, 2], "output 1 lives on b");
    assert_eq!(t.executor_lost("b").0, vec![7]);
    assert_eq!(t.missing(7), vec![0, 1, 2]);
    assert!(!t.is_available(7));
    // A second status for one partition (a speculative copy) counts once.
    t.register_output(7, loc(0, "a"));
    t.register_output(7, loc(0, "b"));
    t.register_output(7, loc(1, "a"));
    assert!(!t.is_available(7), "output 2 is still missing");
    t.register_output(7, loc(2, "b"));
    assert!(t.is_available(7));
    assert_eq!(t.executor_lost("b").0, vec![7]);
    assert!(!t.is_available(7));
    assert_eq!(t.missing(7), vec![0, 2]);
}

fn sized(m: u32, e: &str, reduces: u32) -> MapLocation {
    MapLocation {
        block_sizes: (0..reduces).map(|r| u64::from(m * 1000 + r)).collect(),
        shuffle_address: format!("{e}:1"),
        ..loc(m, e)
    }
}

/// What a reduce task reads, from an independent walk over the registered statuses.
fn expected(t: &MapOutputTracker, sid: u32, r: u32) -> Vec<MapLocation> {
    t.locations(sid)
        .into_iter()
        .map(|l| match l.block_sizes.get(r as usize) {
            Some(&size) => MapLocation {
                block_sizes: vec![size],
                first_reduce: r,
                ..l
            },
            None => l,
        })
        .collect() // `locations` is in map order
}

#[test]
fn gathered_inputs_are_what_each_reducer_reads_however_outputs_change() {
    let reduces = COLUMN_BLOCK * 2 + 5;
    let mut t = MapOutputTracker::default();
    t.register_shuffle(1, 6);
    for m in [0, 1, 2, 4] {
        t.register_output(1, sized(m, if m % 2 == 0 { "a" } else { "b" }, reduces));
    }
    let read = |t: &mut MapOutputTracker, r: u32| {
        let input = t.input_for(1, Some(r));
        assert_eq!(input.reduce, r);
        let mut got = input.map_locations().expect("consistent input");
        got.sort_by_key(|l| l.map_partition);
        got
    };
    // Every reducer, out of order and twice (a retry takes a column already handed
    // out), sees exactly its blocks.
    let order: Vec<u32> = (0..reduces).rev().chain([3, 3, COLUMN_BLOCK + 1]).collect();
    for &r in &order {
        assert_eq!(read(&mut t, r), expected(&t, 1, r), "reducer {r}");
    }
    // Descending, the three aligned blocks are gathered once each; the retries of 3
    // are made alone, and 129 (block 1, no longer held) gathers once more.
    assert_eq!(t.shuffles[&1].gather_passes, 4);
    // An output registered after a block was gathered is in the next inputs.
    assert_eq!(read(&mut t, 10).len(), 4);
    t.register_output(1, sized(3, "c", reduces));
    assert_eq!(read(&mut t, 11), expected(&t, 1, 11));
    assert_eq!(read(&mut t, 11).len(), 5);
    // A lost executor's outputs leave the gathered block too.
    t.executor_lost("a");
    for r in [12, 13, reduces - 1] {
        let got = read(&mut t, r);
        assert_eq!(got, expected(&t, 1, r));
        assert!(
            got.iter().all(|l| l.executor_id != "a"),
            "reducer {r}: {got:?}"
        );
    }
    // A status with fewer blocks than the reducers: sent as it is, never guessed.
    t.register_output(1, sized(5, "d", 3));
    for r in [0, 2, 3, 40] {
        assert_eq!(read(&mut t, r), expected(&t, 1, r), "reducer {r}");
    }
    assert_eq!(
        t.input_for(1, Some(40)).maps.len(),
        1,
        "map 5 has no block 40"
    );
}

#[test]
fn gathered_sizes_are_packed_as_narrow_as_they_fit_and_read_back_exactly() {
    let reduces = 40;
    let row = |m: u32, big: u64| -> MapLocation {
        MapLocation {
            block_sizes: (0..reduces).map(|r| u64::from(m + r) % 200 + big).collect(),
            ..sized(m, "a", reduces)
        }
    };
    let mut t = MapOutputTracker::default();
    t.register_shuffle(2, 4);
    for m in 0..4 {
        t.register_output(2, row(m, 0));
    }
    // (the largest size so far, bytes per packed size)
    for (step, want_bytes) in [(0, 1), (1, 2), (2, 4)] {
        match step {
            1 => t.register_output(2, row(1, 60_000)),
            2 => t.register_output(2, row(3, 1 << 40)),
            _ => {}
        }
        for r in 0..reduces {
            let input = t.input_for(2, Some(r));
            assert_eq!(input.block_size_bytes as usize, want_bytes, "reducer {r}");
            let mut got = input.map_locations().expect("consistent input");
            got.sort_by_key(|l| l.map_partition);
            assert_eq!(got, expected(&t, 2, r), "reducer {r}, step {step}");
        }
    }
}

#[test]
fn a_lost_executors_stored_outputs_are_read_from_storage_and_the_rest_rerun() {
    let mut t = MapOutputTracker::default();
    t.register_shuffle(4, 4);
    let stored = |m: u32, e: &str| MapLocation {
        stored: true,
        ..sized(m, e, 3)
    };
    t.register_output(4, stored(0, "a"));
    t.register_output(4, sized(1, "a", 3));
    t.register_output(4, stored(2, "b"));
    t.register_output(4, stored(3, "a"));
    // Gather the reducers' inputs once before the loss, as a running job would have.
    let _ = t.input_for(4, Some(0));
    let (lost, kept) = t.executor_lost("a");
    assert_eq!(
        (lost, kept),
        (
            vec![4],
            Kept {
                from_replicas: 0,
                from_storage: 2
            }
        )
    );
    assert_eq!(
        t.missing(4),
        vec![1],
        "only the unstored output of a reruns"
    );
    for r in 0..3 {
        let got = t.input_for(4, Some(r)).map_locations().unwrap();
        let by_map: Vec<(u32, &str, &str, bool, u64)> = got
            .iter()
            .map(|l| {
                (
                    l.map_partition,
                    l.executor_id.as_str(),
                    l.shuffle_address.as_str(),
                    l.from_storage,
                    l.block_sizes[0],
                )
            })
            .collect();
        assert_eq!(
            by_map,
            vec![
                (0, "a", "", true, u64::from(r)),
                (2, "b", "b:1", false, 2000 + u64::from(r)),
                (3, "a", "", true, 3000 + u64::from(r)),
            ],
            "reducer {r}"
        );
        // A task's description says where to read, not whether a live output is stored.
        let want: Vec<MapLocation> = expected(&t, 4, r)
            .into_iter()
            .map(|l| MapLocation {
                stored: l.from_storage,
                ..l
            })
            .collect();
        assert_eq!(got, want, "reducer {r}");
    }
    // Losing the executor again changes nothing: its outputs live in storage now.
    assert_eq!(t.executor_lost("a"), (Vec::new(), Kept::default()));
    // A reducer that read the lost executor before the loss was known changes nothing.
    assert_eq!(t.fetch_failed("a", 4, false), Vec::<u32>::new());
    assert_eq!(t.missing(4), vec![1]);
    assert_eq!(
        t.kept_if_lost("b").from_storage,
        1,
        "b's stored output is still read from b"
    );
    assert_eq!(
        t.kept_if_lost("a"),
        Kept::default(),
        "a's are read from storage already"
    );
    // A bad stored copy: every stored copy of a's outputs of the shuffle is presumed
    // bad (a store that went away would otherwise cost an attempt per copy).
    assert_eq!(t.fetch_failed("a", 4, true), vec![4]);
    assert_eq!(t.missing(4), vec![0, 1, 3]);
    assert_eq!(t.fetch_failed("a", 4, true), Vec::<u32>::new());
    // A live executor's failed fetch: its stored output goes to storage, as on loss.
    assert_eq!(t.fetch_failed("b", 4, false), Vec::<u32>::new());
    assert_eq!(t.missing(4), vec![0, 1, 3]);
    let two = t
        .locations(4)
        .into_iter()
        .find(|l| l.map_partition == 2)
        .unwrap();
    assert!(two.from_storage && two.stored);
}

#[test]
fn a_lost_executors_replicated_outputs_are_served_by_their_first_live_replica() {
    let mut t = MapOutputTracker::default();
    t.register_shuffle(5, 4);
    let host = |e: &str| MapHost {
        executor_id: e.to_string().into(),
        shuffle_address: format!("{e}:1").into(),
        from_storage: false,
    };
    let replicated = |m: u32, e: &str, on: &[&str]| MapLocation {
        replicas: on.iter().map(|r| host(r)).collect(),
        ..sized(m, e, 3)
    };
    t.register_output(5, replicated(0, "a", &["b", "c"]));
    t.register_output(5, sized(1, "a", 3));
    t.register_output(5, replicated(2, "b", &["a"]));
    t.register_output(5, replicated(3, "a", &["c"]));
    let _ = t.input_for(5, Some(0));
    assert_eq!(
        t.kept_if_lost("a"),
        Kept {
            from_replicas: 2,
            from_storage: 0
        }
    );
    let (lost, kept) = t.executor_lost("a");
    assert_eq!(lost, vec![5], "map 1 had no replica");
    assert_eq!(kept.from_replicas, 2);
    assert_eq!(t.missing(5), vec![1]);
    // Map 0 moved to b (its first replica) keeping c; map 3 to c; b's own output lost
    // its replica on a.
    assert_eq!(t.replicas_of(5, 0), vec!["c".to_string()]);
    assert!(t.replicas_of(5, 2).is_empty() && t.replicas_of(5, 3).is_empty());
    for r in 0..3 {
        let got = t.input_for(5, Some(r)).map_locations().unwrap();
        let by_map: Vec<(u32, &str, &str, u64)> = got
            .iter()
            .map(|l| {
                (
                    l.map_partition,
                    l.executor_id.as_str(),
                    l.shuffle_address.as_str(),
                    l.block_sizes[0],
                )
            })
            .collect();
        assert_eq!(
            by_map,
            vec![
                (0, "b", "b:1", u64::from(r)),
                (2, "b", "b:1", 2000 + u64::from(r)),
                (3, "c", "c:1", 3000 + u64::from(r)),
            ],
            "reducer {r}"
        );
        assert_eq!(got, expected(&t, 5, r), "reducer {r}");
        assert!(
            got.iter().all(|l| l.replicas.is_empty()),
            "tasks get no replica lists"
        );
    }
    // b fails a fetch (a damaged replica, say): map 0 goes on to c, map 2 is lost.
    assert_eq!(t.fetch_failed("b", 5, false), vec![5]);
    assert_eq!(t.missing(5), vec![1, 2]);
    let zero = t
        .locations(5)
        .into_iter()
        .find(|l| l.map_partition == 0)
        .unwrap();
    assert_eq!(
        (zero.executor_id.as_str(), zero.shuffle_address.as_str()),
        ("c", "c:1")
    );
    // Its last copy gone, the output is lost as under `local`.
    assert_eq!(t.executor_lost("c").0, vec![5]);
    assert_eq!(t.missing(5), vec![0, 1, 2, 3]);
}

#[test]
fn a_decommissioning_executor_moves_only_outputs_with_no_other_copy() {
    let mut t = MapOutputTracker::default();
    t.register_shuffle(6, 4);
    let host = MapHost {
        executor_id: "b".to_string().into(),
        shuffle_address: "b:1".to_string().into(),
        from_storage: false,
    };
    t.register_output(6, sized(0, "a", 2));
    t.register_output(
        6,
        MapLocation {
            replicas: vec![host.clone()],
            ..sized(1, "a", 2)
        },
    );
    t.register_output(
        6,
        MapLocation {
            stored: true,
            ..sized(2, "a", 2)
        },
    );
    t.register_output(6, sized(3, "b", 2));
    assert_eq!(t.unreplicated_on("a"), vec![(6, 0)]);
    // A moved copy is recorded once, only while `a` serves the output, never on `a`.
    assert!(t.add_replica(6, 0, "a", host.clone()));
    assert!(!t.add_replica(6, 0, "a", host.clone()), "already there");
    assert!(!t.add_replica(6, 3, "a", host.clone()), "b serves map 3");
    let on_a = MapHost {
        executor_id: "a".to_string().into(),
        ..host
    };
    assert!(
        !t.add_replica(6, 1, "a", on_a),
        "a copy on its own executor"
    );
    assert!(t.unreplicated_on("a").is_empty());
    assert_eq!(t.replicas_of(6, 0), vec!["b".to_string()]);
}
