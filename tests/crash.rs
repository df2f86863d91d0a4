//! A replay killed at any moment and run again ends exactly where one clean
//! replay ends: the whole replay commits in one transaction with its applied
//! sequence numbers, or nothing of it does, so a kill leaves the source as
//! it was or wholly replayed, and a rerun applies nothing twice and loses
//! nothing.
//!
//! The journal is large enough (thousands of entries in batches of 50) that
//! a `kill -9` after a seeded random delay lands in the middle of the
//! replay; the test checks that it did, so it cannot pass by never
//! interrupting anything.

mod support;

use std::time::{Duration, Instant};

use support::{Dir, FAULT_EXIT, Layout, Rng, Rows, each_layout, int, text};

/// The seed of every random choice; printed on failure.
const SEED: u64 = 0x00C0_FFEE_2024;

/// What a clean replay leaves in the source: every row, and the applied
/// sequence numbers (without times or delivery labels).
fn source_state(d: &Dir) -> (Rows, Vec<i64>) {
    (
        d.dump("source.db", "orders"),
        d.applied_seqs("source.db", "target.db"),
    )
}

/// Entries recorded as applied in the source (0 before the first replay).
fn applied(d: &Dir) -> i64 {
    d.applied_entries("source.db")
}

/// Applied entries as a copy of the folder shows them, so that the folder
/// itself stays exactly as the kill left it (a hot rollback journal
/// included) for the next `cutover replay` to recover.
fn applied_in_copy(d: &Dir) -> (i64, bool) {
    let hot = d.exists("source.db-journal")
        && d.bytes("source.db-journal")
            .starts_with(&[0xd9, 0xd5, 0x05, 0xf9]);
    (applied(&d.copy("peek")), hot)
}

/// A clean, uninterrupted replay of a copy of `d`: the expected end state,
/// and how long it took.
fn clean_replay(d: &Dir, batch: &str) -> ((Rows, Vec<i64>), Duration) {
    let clean = d.copy("clean");
    let started = Instant::now();
    let json = clean.json(&["replay", "--batch", batch], 0);
    let took = started.elapsed();
    assert_eq!(json["verdict"], "pass", "the clean replay failed: {json:#}");
    (source_state(&clean), took)
}

#[test]
fn kill_9_during_replay_then_rerun_equals_one_clean_replay() {
    let d = Dir::new("kill-replay");
    let entries = support::fenced_orders_workload(&d, 20_000, 6_000, SEED);
    let (expected, took) = clean_replay(&d, "50");
    assert_eq!(expected.1.len() as i64, entries);

    let mut rng = Rng::new(SEED ^ 0x5EED);
    let source_before = d.dump("source.db", "orders");
    let mut interrupted_mid_way = 0;
    let mut history = Vec::new();
    let span = took.as_millis().max(20) as u64;
    for round in 0..12 {
        let (before, _) = applied_in_copy(&d);
        if before == entries || interrupted_mid_way >= 3 {
            break;
        }
        // Somewhere in the first half of what a whole replay takes.
        let delay = Duration::from_millis(rng.range(span / 10, span / 2 + 1));
        let mut child = d.cutover(&["replay", "--batch", "50"]).spawn();
        std::thread::sleep(delay);
        let finished = child.try_wait().unwrap();
        if finished.is_none() {
            child.kill().unwrap(); // SIGKILL on Unix: no cleanup, no rollback.
        }
        let status = child.wait().unwrap();
        let (after, journal_left) = applied_in_copy(&d);
        history.push(format!(
            "round {round}: delay {delay:?}, {status}, applied {before} → {after} of {entries}{}",
            if journal_left {
                ", hot rollback journal left behind"
            } else {
                ""
            }
        ));
        assert!(
            after == 0 || after == entries,
            "a kill left part of the journal applied: {history:#?}"
        );
        if after == 0 {
            assert!(
                d.copy("peek-rows").dump("source.db", "orders") == source_before,
                "a kill before the commit changed the source: {history:#?}"
            );
            if finished.is_none() {
                interrupted_mid_way += 1;
            }
        }
    }
    assert!(
        interrupted_mid_way > 0,
        "no kill landed in the middle of the replay (seed {SEED:#x}, a clean replay took {took:?}): {history:#?}"
    );
    let json = d.json(&["replay", "--batch", "50"], 0);
    assert_eq!(json["verdict"], "pass", "{json:#}");
    assert_eq!(
        json["previously_applied"].as_i64().unwrap()
            + json["applied"].as_i64().unwrap()
            + json["already_in_place"].as_i64().unwrap(),
        entries,
        "{json:#}\n{history:#?}"
    );
    assert!(
        source_state(&d) == expected,
        "the source after kills and a rerun differs from one clean replay (seed {SEED:#x}): {history:#?}"
    );
    eprintln!("clean replay took {took:?}; {history:#?}");
    // And nothing is left to do.
    let json = d.json(&["replay", "--batch", "50"], 0);
    assert_eq!(json["applied"], 0, "{json:#}");
}

/// Crashes the replay at `fault`, checks what is committed (the whole
/// journal or nothing), reruns, and compares with a clean replay.
fn fault_then_rerun(fault: &str, committed_everything: bool) {
    let d = Dir::new(&format!("fault-{fault}"));
    let entries = support::fenced_orders_workload(&d, 300, 400, SEED ^ 0xFA17);
    let (expected, _) = clean_replay(&d, "50");
    let before = d.dump("source.db", "orders");

    d.cutover(&["replay", "--batch", "50"])
        .env("CUTOVER_FAULT", fault)
        .expect(FAULT_EXIT);
    let crashed = applied(&d);
    if committed_everything {
        assert_eq!(crashed, entries, "{fault}: the whole replay committed");
    } else {
        assert_eq!(crashed, 0, "{fault}: nothing committed");
        assert_eq!(
            d.dump("source.db", "orders"),
            before,
            "{fault}: a batch that never committed changed the source"
        );
    }
    let json = d.json(&["replay", "--batch", "50"], 0);
    assert_eq!(json["previously_applied"], crashed, "{json:#}");
    assert_eq!(
        json["applied"].as_i64().unwrap() + json["already_in_place"].as_i64().unwrap(),
        entries - crashed,
        "{json:#}"
    );
    assert!(
        source_state(&d) == expected,
        "{fault}: the source after the crash and a rerun differs from one clean replay"
    );
}

#[test]
fn replay_crash_mid_batch_then_rerun_equals_one_clean_replay() {
    fault_then_rerun("mid-batch", false);
}

#[test]
fn replay_crash_before_commit_then_rerun_equals_one_clean_replay() {
    fault_then_rerun("before-commit", false);
}

#[test]
fn replay_crash_after_commit_then_rerun_equals_one_clean_replay() {
    fault_then_rerun("after-commit", true);
}

/// The running example's replay crashed at each point (one entry a batch),
/// on every layout: what committed is exactly the whole journal or
/// nothing, and a rerun leaves the source as the application's writes
/// carried back by hand, each entry applied once.
fn replay_crashed_at_each_point_then_rerun_ends_as_one_replay(layout: Layout) {
    let rolled_back = vec![
        vec![int(101), text("14.00"), text("A")],
        vec![int(102), text("7.50"), text("C")],
        vec![int(104), text("9.00"), text("A")],
    ];
    for (fault, committed) in [("mid-batch", 0), ("before-commit", 0), ("after-commit", 3)] {
        let d = Dir::orders_fenced_on(layout, &format!("replay-{fault}"));
        let before = d.dump("source.db", "orders");
        d.cutover(&["replay", "--batch", "1"])
            .env("CUTOVER_FAULT", fault)
            .expect(FAULT_EXIT);
        assert_eq!(applied(&d), committed, "{fault}: entries committed");
        if committed == 0 {
            assert_eq!(d.dump("source.db", "orders"), before, "{fault}");
        }
        let json = d.json(&["replay", "--batch", "1"], 0);
        assert_eq!(json["previously_applied"], committed, "{fault}: {json:#}");
        assert_eq!(json["applied"], 3 - committed, "{fault}: {json:#}");
        assert_eq!(d.dump("source.db", "orders"), rolled_back, "{fault}");
        let seqs = d.applied_seqs("source.db", "target.db");
        let journal = support::journal_seqs(&d, i64::MAX);
        assert_eq!(seqs, journal, "{fault}: each entry applied once");
    }
}
each_layout!(replay_crashed_at_each_point_then_rerun_ends_as_one_replay);

#[test]
fn a_replay_killed_after_its_commit_is_whole_and_the_rerun_applies_nothing() {
    // The first run commits every batch at once and dies before recording
    // its verdict; the next one, under the same fault, has nothing to apply,
    // commits nothing, so it is not killed, and records the pass.
    let d = Dir::new("fault-after-commit");
    let entries = support::fenced_orders_workload(&d, 100, 120, SEED ^ 0xB47C);
    let (expected, _) = clean_replay(&d, "25");
    d.cutover(&["replay", "--batch", "25"])
        .env("CUTOVER_FAULT", "after-commit")
        .expect(FAULT_EXIT);
    assert_eq!(applied(&d), entries, "the whole journal committed at once");
    let out = d
        .cutover(&["replay", "--batch", "25", "--format", "json"])
        .env("CUTOVER_FAULT", "after-commit")
        .output();
    assert_eq!(out.code, Some(0), "{out}");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(json["applied"], 0, "{json:#}");
    assert_eq!(json["previously_applied"], entries, "{json:#}");
    assert_eq!(applied(&d), entries);
    assert!(source_state(&d) == expected);
    d.cutover(&["status"]).expect(0);
}

/// A Python writer that dies (no rollback, no cleanup) in the middle of a
/// transaction big enough to spill pages into the database file: it leaves a
/// hot rollback journal, as a `kill -9` during a commit does.
const PY_DIE_MID_TRANSACTION: &str = r#"
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size = 1")
con.execute("BEGIN IMMEDIATE")
con.execute("UPDATE filler SET x = x + 1")
os._exit(0)
"#;

#[test]
fn read_only_commands_work_after_a_crash_left_a_hot_journal() {
    let d = Dir::orders_fenced("hot-journal");
    // Unmapped tables in the source are none of the spec's business.
    d.exec(
        "source.db",
        "CREATE TABLE filler (x INTEGER);
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
         INSERT INTO filler SELECT i FROM n;",
    );
    let rows = d.dump("source.db", "orders");
    let (code, out) = support::python(d.path(), PY_DIE_MID_TRANSACTION, &["source.db"]);
    assert_eq!(code, 0, "{out}");
    let header = d.bytes("source.db-journal");
    assert_eq!(
        header.get(..4),
        Some(&[0xd9, 0xd5, 0x05, 0xf9][..]),
        "the writer left no hot journal; the test proves nothing"
    );
    // What an operator runs first after a crash: where do we stand?
    let json = d.json(&["status"], 0);
    assert_eq!(json["replayed"], 0, "{json:#}");
    d.run(&["fence", "status"], 0);
    d.run(&["journal", "status"], 0);
    d.run(&["replay", "--dry-run"], 0);
    d.run(&["check"], 0);
    assert_eq!(d.dump("source.db", "orders"), rows);
    d.run(&["replay"], 0);
}

#[test]
fn two_replays_at_once_apply_each_entry_exactly_once() {
    let d = Dir::new("two-replays");
    let entries = support::fenced_orders_workload(&d, 1_000, 600, SEED ^ 0x2222);
    let (expected, _) = clean_replay(&d, "20");
    let outs: Vec<support::Output> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut c = d.cutover(&["--format", "json", "replay", "--batch", "20"]);
                    // Each waits for the other's batches, not half a second.
                    c.env("CUTOVER_BUSY_TIMEOUT_MS", "20000");
                    c.output()
                })
            })
            .collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut applied_total = 0;
    for out in &outs {
        assert_eq!(out.code, Some(0), "{out}");
        let json = out.json();
        applied_total +=
            json["applied"].as_i64().unwrap() + json["already_in_place"].as_i64().unwrap();
    }
    assert_eq!(applied_total, entries, "{}\n{}", outs[0], outs[1]);
    assert!(source_state(&d) == expected);
}
