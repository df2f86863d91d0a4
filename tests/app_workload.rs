//! A seeded random application workload, replayed through `kill -9`.
//!
//! Each round builds a parent and a child table (the child references the
//! parent with ON DELETE CASCADE and ON UPDATE CASCADE on both sides; the
//! parent has a UNIQUE `code`, a REAL `score`, money as decimal text in the
//! source and integer cents in the target, and an `updated_at` that a target
//! trigger of the application's own touches on every update), loads both
//! sides, gates them, installs the journal and lets an *application*, a
//! Python program on the system's SQLite (`tests/workload/app.py`), make a
//! few hundred random writes to the target: key changes, cascades, REPLACE
//! over a key and over a UNIQUE value, upserts, ignored inserts, failed
//! statements, REAL edge values, `recursive_triggers` on or off per
//! transaction. Then `fence on`, and `replay --batch 7`, SIGKILLed at seeded
//! random moments and re-run until it exits 0.
//!
//! The oracle (`tests/workload/oracle.py`) does not ask the tool: it maps the
//! target back to the source's form itself and compares row by row, storage
//! classes included, REALs by bit pattern. Besides, the source must hold one
//! applied row per journal entry at or below the boundary (nothing applied
//! twice), the killed replay must end like one clean replay, and a second
//! replay must apply nothing.
//!
//! `CUTOVER_SOAK_ROUNDS` sets the rounds (default 50); `CUTOVER_WORKLOAD_SEED`
//! (hex) the seed they are drawn from; `CUTOVER_WORKLOAD_ROUND_SEED` (hex)
//! runs the one round a failure names. A failing round's folder is kept in
//! the system's temporary folder, and its path printed.
//!
//! To tell one cause of failure from another, `CUTOVER_WORKLOAD_WITHOUT`
//! leaves kinds of write out (comma-separated): `edge-reals` (REALs are only
//! quarters below a million: no 0.1+0.2, 1e308, subnormals or 17-digit
//! values), `replace` (no INSERT OR REPLACE),
//! `cascades` (no parent deletes or key changes), `upserts`, `recursive-off`
//! (`recursive_triggers` always on). The test as CI runs it leaves nothing out.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::params;
use support::{Dir, Rng, Spec, Table, dollars};

const APP: &str = include_str!("workload/app.py");
const ORACLE: &str = include_str!("workload/oracle.py");

/// `parent` (amount ↔ cents) and `child`, every other column copied.
fn spec() -> Spec {
    Spec::new()
        .table(
            Table::new("parent")
                .key(["id"])
                .copy("code")
                .copy("score")
                .decimal("amount", "cents", 2)
                .copy("updated_at"),
        )
        .table(
            Table::new("child")
                .key(["id"])
                .copy("parent_id")
                .copy("qty")
                .copy("note"),
        )
}

const SOURCE_DDL: &str = "
CREATE TABLE parent (
    id         INTEGER PRIMARY KEY,
    code       TEXT NOT NULL UNIQUE,
    score      REAL,
    amount     TEXT NOT NULL,
    updated_at INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE child (
    id        INTEGER PRIMARY KEY,
    parent_id INTEGER NOT NULL REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE,
    qty       INTEGER NOT NULL,
    note      TEXT
);
CREATE INDEX child_parent ON child (parent_id);
";

const TARGET_DDL: &str = "
CREATE TABLE parent (
    id         INTEGER PRIMARY KEY,
    code       TEXT NOT NULL UNIQUE,
    score      REAL,
    cents      INTEGER NOT NULL,
    updated_at INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE child (
    id        INTEGER PRIMARY KEY,
    parent_id INTEGER NOT NULL REFERENCES parent (id) ON DELETE CASCADE ON UPDATE CASCADE,
    qty       INTEGER NOT NULL,
    note      TEXT
);
CREATE INDEX child_parent ON child (parent_id);
-- The application's own trigger: every update touches updated_at (the guard
-- stops it re-firing itself when recursive_triggers is on).
CREATE TRIGGER parent_touch AFTER UPDATE ON parent
WHEN NEW.updated_at IS OLD.updated_at
BEGIN
    UPDATE parent SET updated_at = OLD.updated_at + 1 WHERE id = NEW.id;
END;
";

/// Parent rows per round, children per round, application writes per round.
const PARENTS: i64 = 60;
const CHILDREN: i64 = 90;
const WRITES: u64 = 150;

fn hex_env(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        u64::from_str_radix(v.trim().trim_start_matches("0x"), 16)
            .unwrap_or_else(|e| panic!("{name}={v} is not a hex number: {e}")),
    )
}

/// The seed the rounds' seeds are drawn from.
fn base_seed() -> u64 {
    hex_env("CUTOVER_WORKLOAD_SEED").unwrap_or(0x00C0_FFEE_0A99)
}

/// Kinds of write left out (`CUTOVER_WORKLOAD_WITHOUT`); none by default.
fn without() -> String {
    std::env::var("CUTOVER_WORKLOAD_WITHOUT").unwrap_or_default()
}

fn rounds() -> u64 {
    std::env::var("CUTOVER_SOAK_ROUNDS")
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("CUTOVER_SOAK_ROUNDS={v}: {e}"))
        })
        .unwrap_or(50)
}

/// What the campaign counted over all rounds.
#[derive(Default)]
struct Tally {
    kills: u32,
    mid_way: u32,
    entries: i64,
}

#[test]
fn random_application_writes_replayed_through_kills_leave_the_source_equal_to_the_target() {
    let started = Instant::now();
    let seeds: Vec<u64> = match hex_env("CUTOVER_WORKLOAD_ROUND_SEED") {
        Some(s) => vec![s],
        None => {
            let mut rng = Rng::new(base_seed());
            (0..rounds()).map(|_| rng.next_u64()).collect()
        }
    };
    let mut tally = Tally::default();
    for (round, &seed) in seeds.iter().enumerate() {
        let d = Dir::new(&format!("workload-{round}"));
        if let Err(why) = one_round(&d, seed, &mut tally) {
            let kept = keep(&d, seed);
            panic!(
                "round {round} of {} (seed {seed:#x}, base seed {:#x}) failed: {why}\n\
                 the round's folder is kept in {}\n\
                 rerun it alone: CUTOVER_WORKLOAD_ROUND_SEED={seed:x} cargo test --test app_workload",
                seeds.len(),
                base_seed(),
                kept.display()
            );
        }
    }
    eprintln!(
        "{} rounds, {} journal entries replayed, {} kills ({} after a committed batch) in {:?} (base seed {:#x})",
        seeds.len(),
        tally.entries,
        tally.kills,
        tally.mid_way,
        started.elapsed(),
        base_seed()
    );
    // Each round plans one to three kills; a run that finished before its
    // kill ends the round early, so demand only half a kill per round.
    assert!(
        tally.kills as usize * 2 >= seeds.len(),
        "only {} kills landed in {} rounds (base seed {:#x})",
        tally.kills,
        seeds.len(),
        base_seed()
    );
}

/// Copies a failing round's folder somewhere it outlives the test.
fn keep(d: &Dir, seed: u64) -> PathBuf {
    let to = std::env::temp_dir().join(format!("cutover-workload-failed-{seed:x}"));
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to).expect("creating the folder for a failed round");
    for (name, bytes) in d.snapshot().files {
        std::fs::write(to.join(name), bytes).expect("keeping a file of a failed round");
    }
    to
}

/// One round: set up, let the application write, fence, replay through
/// kills, check. `Err` says what went wrong, with the tool's output.
fn one_round(d: &Dir, seed: u64, tally: &mut Tally) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    d.spec(&spec());
    d.create_db("source.db", SOURCE_DDL);
    d.create_db("target.db", TARGET_DDL);
    populate(d, &mut rng);
    d.run(&["gate"], 0);
    d.run(&["journal", "install"], 0);

    let (code, out) = support::python(
        d.path(),
        APP,
        &[
            "target.db",
            &seed.to_string(),
            &WRITES.to_string(),
            "app.log",
            &without(),
        ],
    );
    assert_eq!(code, 0, "the application failed (a test bug):\n{out}");
    let app = out.trim().to_string();
    after_the_writes(d, &mut rng, tally)
        .map_err(|e| format!("the application made its writes ({app}), then {e}"))
}

/// Fence, replay through kills, check.
fn after_the_writes(d: &Dir, rng: &mut Rng, tally: &mut Tally) -> Result<(), String> {
    let fence = d.json(&["fence", "on"], 0);
    let boundary = fence["boundary"]
        .as_i64()
        .unwrap_or_else(|| panic!("no boundary in {fence:#}"));
    let entries = d.int(
        "target.db",
        &format!("SELECT count(*) FROM _cutover_journal WHERE seq <= {boundary}"),
    );
    assert!(entries > 0, "the application's writes left no journal");

    // A clean replay on a copy: how long one takes (the kills aim inside
    // it) and what the source must end as.
    let clean = d.copy("workload-clean");
    let t = Instant::now();
    let out = clean.cutover(&["replay", "--batch", "7"]).output();
    let took = t.elapsed();
    if out.code != Some(0) {
        return Err(format!(
            "a clean, uninterrupted replay did not finish ({entries} journal entries):\n{out}\n{}",
            explain(&clean, &out.stdout)
        ));
    }

    replay_through_kills(d, rng, took, tally)?;
    tally.entries += entries;

    let (equal, report) = oracle(d);
    if !equal {
        return Err(format!(
            "after replay (exit 0), the source differs from the target mapped back:\n{report}"
        ));
    }
    let applied = d.applied_entries("source.db");
    if applied != entries {
        return Err(format!(
            "{applied} applied rows in the source for {entries} journal entries at or below boundary {boundary}"
        ));
    }
    for table in ["parent", "child"] {
        if d.dump("source.db", table) != clean.dump("source.db", table) {
            return Err(format!(
                "table {table}: the source after kills differs from one clean replay"
            ));
        }
    }
    let again = d.json(&["replay", "--batch", "7"], 0);
    if again["applied"] != 0 {
        return Err(format!("a second replay applied entries again: {again:#}"));
    }
    Ok(())
}

/// Sixty parents and ninety children, the same on both sides (the target
/// in cents), REAL edge values among the scores.
fn populate(d: &Dir, rng: &mut Rng) {
    const SCORES: [f64; 6] = [0.1 + 0.2, -0.0, 1e308, 5e-324, 1.0 / 3.0, 42.0];
    let mut s = d.conn("source.db");
    let mut t = d.conn("target.db");
    let st = s.transaction().expect("a source transaction");
    let tt = t.transaction().expect("a target transaction");
    for id in 1..=PARENTS {
        let cents = rng.range(0, 2_000_000) as i64 - 1_000;
        let score = if rng.range(0, 3) == 0 {
            SCORES[rng.range(0, SCORES.len() as u64) as usize]
        } else {
            (rng.range(0, 1 << 53) as f64 / (1u64 << 40) as f64) - 4096.0
        };
        let score = if without().contains("edge-reals") {
            (score.clamp(-1e5, 1e5) * 4.0).round() / 4.0
        } else {
            score
        };
        let code = format!("c{id}");
        st.execute(
            "INSERT INTO parent (id, code, score, amount, updated_at) VALUES (?1, ?2, ?3, ?4, 0)",
            params![id, code, score, dollars(cents)],
        )
        .expect("a source parent");
        tt.execute(
            "INSERT INTO parent (id, code, score, cents, updated_at) VALUES (?1, ?2, ?3, ?4, 0)",
            params![id, code, score, cents],
        )
        .expect("a target parent");
    }
    for id in 1..=CHILDREN {
        let parent = rng.range(1, PARENTS as u64 + 1) as i64;
        let qty = rng.range(0, 1_000) as i64;
        let note = (rng.range(0, 3) > 0).then(|| format!("note {id}"));
        for (tx, what) in [(&st, "a source child"), (&tt, "a target child")] {
            tx.execute(
                "INSERT INTO child (id, parent_id, qty, note) VALUES (?1, ?2, ?3, ?4)",
                params![id, parent, qty, note],
            )
            .expect(what);
        }
    }
    st.commit().expect("committing the source");
    tt.commit().expect("committing the target");
}

/// The independent oracle: (source equals target mapped back, its report).
fn oracle(d: &Dir) -> (bool, String) {
    let (code, out) = support::python(d.path(), ORACLE, &["source.db", "target.db", "app.log"]);
    match code {
        0 => (true, out),
        1 => (false, out),
        _ => panic!("the oracle itself failed (a test bug):\n{out}"),
    }
}

/// What the application did to the row a replay's report names (`in table
/// 'T', key [K]`), and the journal entries naming it.
fn explain(d: &Dir, report: &str) -> String {
    let named = report.split("in table '").nth(1).and_then(|rest| {
        let (table, rest) = rest.split_once("', key [")?;
        let (key, _) = rest.split_once(']')?;
        Some(format!("{table}#{key}"))
    });
    let Some(name) = named else {
        return "(the report names no row)".into();
    };
    let (code, out) = support::python(
        d.path(),
        ORACLE,
        &["source.db", "target.db", "app.log", "--explain", &name],
    );
    assert_eq!(code, 0, "the oracle itself failed (a test bug):\n{out}");
    out
}

/// Applied entries so far, read from a copy so that the folder stays as the
/// kill left it (a hot rollback journal included) for the next run.
fn applied(d: &Dir) -> i64 {
    d.copy("workload-peek").applied_entries("source.db")
}

/// `replay --batch 7`, SIGKILLed after seeded random delays inside a clean
/// run's duration one to three times, then run until it exits 0 by itself.
fn replay_through_kills(
    d: &Dir,
    rng: &mut Rng,
    clean: Duration,
    tally: &mut Tally,
) -> Result<(), String> {
    let planned = rng.range(1, 4);
    let mut last = applied(d);
    let mut history = Vec::new();
    let ms = clean.as_millis().max(20) as u64;
    for attempt in 0..planned {
        // Late in the range most rounds get some batches committed first;
        // early, a few kills land in start-up.
        let delay = Duration::from_millis(rng.range(ms / 20, ms * 9 / 10 + 1));
        let mut child = d
            .cutover(&["replay", "--batch", "7"])
            .env("CUTOVER_BUSY_TIMEOUT_MS", "20000")
            .spawn();
        std::thread::sleep(delay);
        let killed = match child.try_wait().expect("polling") {
            None => {
                child.kill().expect("SIGKILL"); // no cleanup, no rollback
                true
            }
            Some(_) => false,
        };
        let status = child.wait().expect("reaping");
        let now = applied(d);
        history.push(format!(
            "attempt {attempt}: delay {delay:?} of a clean {clean:?}, {}, applied {last} → {now}",
            if killed {
                "killed".to_string()
            } else {
                status.to_string()
            }
        ));
        if now < last {
            return Err(format!(
                "the applied entries went backwards:\n{}",
                history.join("\n")
            ));
        }
        if !killed {
            if status.code() != Some(0) {
                let out = d.cutover(&["replay", "--batch", "7"]).output();
                return Err(format!(
                    "a replay that was not killed failed:\n{}\nrun again:\n{out}",
                    history.join("\n")
                ));
            }
            return Ok(());
        }
        tally.kills += 1;
        if now > last {
            tally.mid_way += 1;
        }
        last = now;
    }
    let out = d.cutover(&["replay", "--batch", "7"]).output();
    if out.code != Some(0) {
        return Err(format!(
            "the replay after the kills did not finish:\n{}\n{out}",
            history.join("\n")
        ));
    }
    Ok(())
}
