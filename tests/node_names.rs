//! RDD names are bounded where they are made: `text_file` over a long comma-separated
//! path list (its operator text is the whole list) gets a short name, and so do the job
//! description and the event-log lines made from it. Alone in its binary: it sets
//! `EMBER_EVENT_LOG_DIR`.

#[test]
fn text_file_over_a_long_path_list_gets_a_bounded_name_and_event_log_lines() {
    let logs = tempfile::tempdir().unwrap();
    let input = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let paths: Vec<String> = (0..300)
        .map(|i| {
            let p = input
                .path()
                .join(format!("part-{i:03}-{}", "n".repeat(100)));
            std::fs::write(&p, format!("line {i}\n")).unwrap();
            p.to_str().unwrap().to_string()
        })
        .collect();
    let list = paths.join(",");
    assert!(list.len() > 30_000);

    std::env::set_var("EMBER_EVENT_LOG_DIR", logs.path());
    let mut conf = ember::Conf::local(2, 256 << 20);
    conf.progress = false;
    conf.local_dir = Some(work.path().to_path_buf());
    let ctx = ember::Context::with_conf(conf).unwrap();
    std::env::remove_var("EMBER_EVENT_LOG_DIR");

    let line = line!() + 1;
    let rdd = ctx.text_file(&list, 2).unwrap();
    let name = rdd.name().to_string();
    assert!(
        name.chars().count() <= 256,
        "{} chars",
        name.chars().count()
    );
    assert!(
        name.starts_with(&format!("text_file({}", &paths[0][..60])),
        "{name}"
    );
    let left_out = list.len() - (name.find("… (").unwrap() - "text_file(".len());
    assert!(
        name.ends_with(&format!(
            "… ({} more bytes) at tests/node_names.rs:{line}",
            left_out + 1
        )),
        "{name}"
    );
    let mapped = rdd.map(|l: String| l.len());
    assert!(mapped.name().starts_with("map at tests/node_names.rs:"));
    assert_eq!(rdd.count().unwrap(), 300);
    drop(ctx);

    let log = std::fs::read_dir(logs.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&log).unwrap();
    let longest = text.lines().map(str::len).max().unwrap();
    assert!(longest < 2048, "an event-log line of {longest} bytes");
    let replayed = ember_ui::event_log::replay(&log).unwrap();
    let jobs = replayed.jobs();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].description, format!("count of {name}"));
}
