//! Two processes doing the same job at the same time, against the same
//! databases: two replays, two loads, two applies of one feed, and a replay
//! racing an apply of its own exported journal. Whatever the interleaving,
//! each process exits 0 or with a clear message, every journal entry is
//! recorded exactly once in `_cutover_applied`, every delivery has one
//! receipt, and the end state equals one clean run.
//!
//! The journals are large (about 3,000 entries in batches of 50) so that the
//! two runs overlap; `tests/crash.rs` has a smaller two-replays test.

mod support;

use std::sync::Barrier;

use support::{Dir, Output, Rows, applied_seqs, journal_seqs};

/// Runs every command at once (released together by a barrier) and returns
/// their outputs in order.
fn together(cmds: Vec<support::Cmd>) -> Vec<Output> {
    let barrier = Barrier::new(cmds.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = cmds
            .iter()
            .map(|c| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    c.output()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a runner thread"))
            .collect()
    })
}

/// `cutover --format json ARGS --spec spec.toml` that waits long for locks.
fn patient(d: &Dir, args: &[&str]) -> support::Cmd {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    let mut c = d.cutover(&all);
    c.env("CUTOVER_BUSY_TIMEOUT_MS", "30000");
    c
}

/// One line per run: its exit and the counts it reported.
fn summary(outs: &[Output]) -> String {
    outs.iter()
        .map(|o| {
            let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_default();
            format!(
                "exit {:?} applied {} in_place {} raced {}",
                o.code, j["applied"], j["already_in_place"], j["raced"]
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each run exited 0, or exited 2 saying another run got there first.
fn each_clean(outs: &[Output], other: &str) {
    for out in outs {
        support::assert_no_panic(out);
        match out.code {
            Some(0) => {}
            Some(2) => assert!(
                out.stderr.contains(other),
                "a concurrent run failed without saying why\n{out}"
            ),
            _ => panic!("unexpected exit\n{out}"),
        }
    }
    assert!(
        outs.iter().any(|o| o.code == Some(0)),
        "neither run finished the job\n{}\n{}",
        outs[0],
        outs[1]
    );
}

/// The source's rows and applied seqs after one clean replay of a copy.
fn clean_replay(d: &Dir) -> (Rows, Vec<i64>) {
    let c = d.copy("clean");
    c.run(&["replay", "--batch", "50"], 0);
    (c.dump("source.db", "orders"), applied_seqs(&c))
}

#[test]
fn two_replays_started_together_apply_each_entry_exactly_once() {
    let d = Dir::new("two-replays-3000");
    let entries = support::fenced_orders_workload(&d, 2_000, 3_000, 0x2E91A7);
    let boundary = d.json(&["fence", "status"], 0)["boundary"]
        .as_i64()
        .expect("a boundary");
    let expected = clean_replay(&d);
    assert_eq!(expected.1, journal_seqs(&d, boundary));
    for round in 0..3 {
        let r = d.copy(&format!("round-{round}"));
        let outs = together(vec![
            patient(&r, &["replay", "--batch", "50"]),
            patient(&r, &["replay", "--batch", "50"]),
        ]);
        eprintln!("two replays, round {round}: {}", summary(&outs));
        each_clean(&outs, "another replay");
        let seqs = applied_seqs(&r);
        assert_eq!(
            seqs.len() as i64,
            entries,
            "round {round}: every entry recorded once"
        );
        // The runs hold the entries they count, and never overlap.
        assert_eq!(
            r.applied_entries("source.db"),
            r.applied_seqs("source.db", "target.db").len() as i64
        );
        assert_eq!(seqs, expected.1, "round {round}");
        assert_eq!(r.dump("source.db", "orders"), expected.0, "round {round}");
        let work: i64 = outs
            .iter()
            .filter(|o| o.code == Some(0))
            .map(|o| {
                let j = o.json();
                j["applied"].as_i64().unwrap_or(0) + j["already_in_place"].as_i64().unwrap_or(0)
            })
            .sum();
        assert!(work <= entries, "round {round}: {work} > {entries} entries");
        let again = r.json(&["replay", "--batch", "50"], 0);
        assert_eq!(again["applied"], 0, "{again:#}");
    }
}

#[test]
fn two_loads_started_together_load_each_row_once() {
    let d = Dir::orders("two-loads");
    {
        let mut s = d.conn("source.db");
        let tx = s.transaction().expect("a transaction");
        tx.execute("DELETE FROM orders", []).expect("emptying");
        {
            let mut st = tx
                .prepare("INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            for id in 1..=20_000i64 {
                st.execute(rusqlite::params![
                    id,
                    support::dollars(id * 7 % 100_000),
                    if id % 3 == 0 { "C" } else { "A" }
                ])
                .expect("a source row");
            }
        }
        tx.commit().expect("committing");
    }
    let clean = d.copy("clean-load");
    clean.run(&["load", "--batch", "500"], 0);
    let expected = clean.dump("target.db", "orders");
    for round in 0..2 {
        let r = d.copy(&format!("load-round-{round}"));
        let outs = together(vec![
            patient(&r, &["load", "--batch", "500"]),
            patient(&r, &["load", "--batch", "500"]),
        ]);
        each_clean(&outs, "another load");
        assert_eq!(r.dump("target.db", "orders"), expected, "round {round}");
        r.run(&["gate"], 0);
        let json = r.json(&["load", "--batch", "500"], 0);
        assert_eq!(json["tables"][0]["loaded"], 0, "{json:#}");
    }
    // Two reloads over a target someone changed: the last word is one whole
    // load, never a mix.
    let r = d.copy("replace-round");
    r.run(&["load"], 0);
    r.exec(
        "target.db",
        "UPDATE orders SET cents = 1 WHERE id % 100 = 0; DELETE FROM orders WHERE id % 77 = 0;",
    );
    let outs = together(vec![
        patient(&r, &["load", "--replace", "--batch", "500"]),
        patient(&r, &["load", "--replace", "--batch", "500"]),
    ]);
    each_clean(&outs, "another load");
    assert_eq!(r.dump("target.db", "orders"), expected);
    r.run(&["gate"], 0);
}

#[test]
fn two_applies_of_the_same_feed_started_together_apply_each_delivery_once() {
    let d = Dir::new("two-applies");
    let entries = support::fenced_orders_workload(&d, 1_000, 3_000, 0xA9911E5);
    d.run(
        &[
            "journal",
            "export",
            "--out",
            "feed.jsonl",
            "--delivery-size",
            "50",
        ],
        0,
    );
    let expected = clean_replay(&d);
    for round in 0..2 {
        let r = d.copy(&format!("apply-round-{round}"));
        let apply = ["apply", "--feed", "feed.jsonl", "--into", "source"];
        let outs = together(vec![patient(&r, &apply), patient(&r, &apply)]);
        for out in &outs {
            support::assert_no_panic(out);
            assert_eq!(out.code, Some(0), "round {round}\n{out}");
        }
        // Each delivery was applied by exactly one of them.
        let deliveries = outs[0].json()["deliveries"]
            .as_array()
            .expect("deliveries")
            .len();
        for i in 0..deliveries {
            let statuses: Vec<String> = outs
                .iter()
                .map(|o| {
                    o.json()["deliveries"][i]["status"]
                        .as_str()
                        .unwrap_or("")
                        .to_string()
                })
                .collect();
            assert_eq!(
                statuses.iter().filter(|s| *s == "applied").count(),
                1,
                "round {round}, delivery {i}: {statuses:?}"
            );
        }
        assert_eq!(
            r.int("source.db", "SELECT count(*) FROM _cutover_deliveries"),
            deliveries as i64
        );
        let seqs = applied_seqs(&r);
        assert_eq!(seqs.len() as i64, entries, "round {round}");
        assert_eq!(seqs, expected.1, "round {round}");
        assert_eq!(r.dump("source.db", "orders"), expected.0, "round {round}");
        r.run(&["gate"], 0);
    }
}

#[test]
fn a_replay_and_an_apply_of_its_exported_feed_together_apply_each_entry_once() {
    let d = Dir::new("replay-and-apply");
    let entries = support::fenced_orders_workload(&d, 1_000, 3_000, 0x5EA7);
    d.run(
        &[
            "journal",
            "export",
            "--out",
            "feed.jsonl",
            "--delivery-size",
            "50",
        ],
        0,
    );
    let expected = clean_replay(&d);
    for round in 0..2 {
        let r = d.copy(&format!("mixed-round-{round}"));
        let outs = together(vec![
            patient(&r, &["replay", "--batch", "50"]),
            patient(&r, &["apply", "--feed", "feed.jsonl", "--into", "source"]),
        ]);
        eprintln!("replay and apply, round {round}: {}", summary(&outs));
        for out in &outs {
            support::assert_no_panic(out);
            assert!(
                matches!(out.code, Some(0 | 2)),
                "round {round}: unexpected exit\n{out}"
            );
        }
        // Whatever stopped, a plain replay finishes the job exactly once.
        r.run(&["replay", "--batch", "50"], 0);
        let seqs = applied_seqs(&r);
        assert_eq!(seqs.len() as i64, entries, "round {round}");
        assert_eq!(seqs, expected.1, "round {round}");
        assert_eq!(r.dump("source.db", "orders"), expected.0, "round {round}");
    }
}

#[test]
fn a_gate_never_sees_another_process_s_uncommitted_write() {
    let d = Dir::orders_loaded("gate-uncommitted");
    let writer = d.conn("target.db");
    writer
        .execute_batch(
            "BEGIN IMMEDIATE;
             UPDATE orders SET cents = 1 WHERE id = 101;
             DELETE FROM orders WHERE id = 102;",
        )
        .expect("an open write transaction");
    let json = d.json(&["gate"], 0);
    assert_eq!(json["verdict"], "pass", "{json:#}");
    writer.execute_batch("ROLLBACK").expect("rolling back");
}

#[test]
fn two_fence_ons_started_together_set_one_fence() {
    for round in 0..3 {
        let d = Dir::orders_after_writes(&format!("two-fences-{round}"));
        let outs = together(vec![
            patient(&d, &["fence", "on"]),
            patient(&d, &["fence", "on"]),
        ]);
        for out in &outs {
            support::assert_no_panic(out);
            assert_eq!(out.code, Some(0), "round {round}\n{out}");
            assert_eq!(out.json()["boundary"], 3, "round {round}\n{out}");
        }
        assert_eq!(d.int("target.db", "SELECT count(*) FROM _cutover_fence"), 1);
        for t in ["orders", "_cutover_journal_1"] {
            for op in ["insert", "update", "delete"] {
                let name = format!("_cutover_fence_{op}_{t}");
                let n = d.int(
                    "target.db",
                    &format!(
                        "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = '{name}'"
                    ),
                );
                assert_eq!(n, 1, "round {round}: {name}");
            }
        }
        d.run(&["fence", "status"], 0);
        d.run(&["replay"], 0);
    }
}
