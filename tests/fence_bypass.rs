//! The fence against an adversary. Every ordinary-SQL way another process can
//! write to a fenced target fails (upserts, replaces, `OR IGNORE`, writes
//! through a view or an attached schema, on the table and on the journal).
//! The ways around triggers (DROP TRIGGER, DROP or ALTER TABLE, a connection
//! with triggers disabled, journal rows added or removed behind the fence, a
//! rewritten fence record, triggers planted before `fence on`) are caught:
//! replay exits 1 with "fence breached" naming what changed, and the source
//! is byte-for-byte unchanged. A `fence on` killed half-way leaves a whole
//! fence or none.
//!
//! `tests/fence.rs` has the basic refusals (plain insert, update, delete,
//! a journal insert and delete) and the fence waiting for a writer already in
//! flight (`fence_on_waits_for_a_writer_in_flight_and_puts_its_commit_inside_the_boundary`);
//! this file does not repeat them.

mod support;

use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use support::{Dir, Rows, python};

/// Every row of the target's table and journal, and the fence row.
fn target_rows(d: &Dir) -> (Rows, Rows, Rows) {
    (
        d.dump("target.db", "orders"),
        d.dump("target.db", "_cutover_journal_1"),
        d.query(
            "target.db",
            "SELECT boundary, journal_rows, fingerprint FROM _cutover_fence",
        ),
    )
}

/// A Python program that runs a SQL script on a database in its own process
/// (statements autocommit one by one); prints `ok`, or the error and exits 3.
const PY_SCRIPT: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], timeout=2, isolation_level=None)
try:
    con.executescript(sys.argv[2])
except sqlite3.Error as e:
    print("error:", e)
    sys.exit(3)
print("ok")
"#;

/// Writes another process tries on a fenced target; each must fail with the
/// fence's message.
const WRITES: &[(&str, &str)] = &[
    (
        "insert or ignore",
        "INSERT OR IGNORE INTO orders (id, cents, status) VALUES (105, 1, 'active')",
    ),
    (
        "insert or replace over an existing row",
        "INSERT OR REPLACE INTO orders (id, cents, status) VALUES (102, 1, 'active')",
    ),
    (
        "replace into",
        "REPLACE INTO orders (id, cents, status) VALUES (102, 1, 'active')",
    ),
    (
        "upsert",
        "INSERT INTO orders (id, cents, status) VALUES (102, 1, 'active') ON CONFLICT (id) DO UPDATE SET cents = excluded.cents",
    ),
    (
        "insert on conflict do nothing",
        "INSERT INTO orders (id, cents, status) VALUES (106, 1, 'active') ON CONFLICT DO NOTHING",
    ),
    (
        "insert from select",
        "INSERT INTO orders (id, cents, status) SELECT id + 1000, cents, status FROM orders",
    ),
    ("update or ignore", "UPDATE OR IGNORE orders SET cents = 1"),
    (
        "update or replace onto another key",
        "UPDATE OR REPLACE orders SET id = 101 WHERE id = 102",
    ),
    (
        "update from",
        "UPDATE orders SET cents = o.cents + 1 FROM (SELECT id, cents FROM orders) AS o WHERE o.id = orders.id",
    ),
    (
        "delete returning",
        "DELETE FROM orders WHERE id = 102 RETURNING *",
    ),
    ("delete everything", "DELETE FROM orders"),
    (
        "savepoint then release",
        "SAVEPOINT s; UPDATE orders SET cents = 2 WHERE id = 101; RELEASE s;",
    ),
    (
        "recursive triggers on",
        "PRAGMA recursive_triggers = ON; REPLACE INTO orders (id, cents, status) VALUES (101, 3, 'closed');",
    ),
    (
        "query_only off",
        "PRAGMA query_only = OFF; UPDATE orders SET cents = 4;",
    ),
    (
        "journal insert or replace",
        "INSERT OR REPLACE INTO _cutover_journal_1 (seq, op, n1, n2, n3) VALUES (3, 'insert', 105, 1, 'active')",
    ),
    (
        "journal update",
        "UPDATE _cutover_journal_1 SET n2 = 1 WHERE seq = 1",
    ),
    (
        "journal upsert",
        "INSERT INTO _cutover_journal_1 (seq, op) VALUES (1, 'insert') ON CONFLICT (seq) DO UPDATE SET op = 'delete'",
    ),
    (
        "journal insert or ignore",
        "INSERT OR IGNORE INTO _cutover_journal_1 (seq, op) VALUES (1000, 'insert')",
    ),
    (
        "journal delete of the last entry",
        "DELETE FROM _cutover_journal_1 WHERE seq = (SELECT max(seq) FROM _cutover_journal)",
    ),
];

#[test]
fn every_ordinary_sql_write_from_another_process_is_refused() {
    let d = Dir::orders_fenced("fence-every-write");
    let before = target_rows(&d);
    let source = d.bytes("source.db");
    for (what, sql) in WRITES {
        let (code, out) = python(d.path(), PY_SCRIPT, &["target.db", sql]);
        assert_eq!(code, 3, "{what} was not refused: {out}");
        assert!(out.contains("cutover fence"), "{what}: {out}");
        assert_eq!(target_rows(&d), before, "{what} changed the target");
    }
    assert_eq!(d.bytes("source.db"), source);
    d.run(&["fence", "status"], 0);
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 3, "{json:#}");
}

#[test]
fn a_write_through_a_view_or_an_attached_schema_is_refused() {
    let d = Dir::orders_fenced("fence-view-attach");
    let before = target_rows(&d);
    // An INSTEAD OF trigger on a view writes to the table: the table's own
    // fence triggers still fire.
    let (code, out) = python(
        d.path(),
        PY_SCRIPT,
        &[
            "target.db",
            "CREATE TEMP VIEW v AS SELECT * FROM orders;
             CREATE TEMP TRIGGER vi INSTEAD OF UPDATE ON v BEGIN
                 UPDATE orders SET cents = NEW.cents WHERE id = OLD.id;
             END;
             UPDATE v SET cents = 5 WHERE id = 102;",
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cutover fence"), "{out}");
    // Another database that attaches the target and writes by schema name.
    d.create_db("other.db", "CREATE TABLE x (y);");
    let (code, out) = python(
        d.path(),
        PY_SCRIPT,
        &[
            "other.db",
            "ATTACH 'target.db' AS t;
             INSERT INTO t.orders (id, cents, status) VALUES (107, 1, 'active');",
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cutover fence"), "{out}");
    let (code, out) = python(
        d.path(),
        PY_SCRIPT,
        &[
            "other.db",
            "ATTACH 'target.db' AS t; DELETE FROM t._cutover_journal_1;",
        ],
    );
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cutover fence"), "{out}");
    assert_eq!(target_rows(&d), before);
    d.run(&["fence", "status"], 0);
}

// --- ways around the triggers: caught, named, nothing written -----------------------

/// Fences the running example, runs `breach` on the target through a
/// connection of the test's own (triggers disabled when `no_triggers`), and
/// checks that replay stops with "fence breached" naming `named`, exit 1,
/// every file byte-for-byte as before; so does a dry run and `fence status`.
fn breach_is_caught(name: &str, no_triggers: bool, breach: &str, named: &[&str]) {
    let d = Dir::orders_fenced(name);
    let conn = d.conn("target.db");
    if no_triggers {
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
            .expect("disabling triggers");
    }
    conn.execute_batch(breach)
        .unwrap_or_else(|e| panic!("{name}: the breach itself failed: {e}"));
    drop(conn);
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    let mut expected = vec!["fence breached"];
    expected.extend_from_slice(named);
    out.assert_mentions(&expected);
    d.assert_unchanged(&before, &format!("{name}: replay over a breached fence"));
    let json = d.json(&["replay"], 1);
    assert_eq!(json["applied"], 0, "{name}: {json:#}");
    assert!(
        json["breach"]
            .as_str()
            .is_some_and(|b| b.contains("fence breached")),
        "{name}: {json:#}"
    );
    let out = d.cutover(&["replay", "--dry-run"]).output();
    assert_ne!(
        out.code,
        Some(0),
        "{name}: a dry run planned from a breached fence\n{out}"
    );
    let out = d.run(&["fence", "status"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, &format!("{name}: dry run and fence status"));
}

#[test]
fn journal_rows_added_with_triggers_disabled_are_a_breach() {
    breach_is_caught(
        "breach-journal-added",
        true,
        "INSERT INTO _cutover_journal_1 (seq, op, n1, n2, n3) VALUES (1000, 'insert', 105, 100, 'active');",
        &["journal", "4"],
    );
}

#[test]
fn journal_rows_removed_with_triggers_disabled_are_a_breach() {
    breach_is_caught(
        "breach-journal-removed",
        true,
        "DELETE FROM _cutover_journal_1 WHERE seq = 2;",
        &["journal"],
    );
}

#[test]
fn journal_rows_rewritten_with_triggers_disabled_are_a_breach() {
    // Same count, same last seq: only the digest sees it.
    breach_is_caught(
        "breach-journal-rewritten",
        true,
        "UPDATE _cutover_journal_1 SET n2 = 1 WHERE seq = 1;",
        &["journal entries were rewritten"],
    );
}

#[test]
fn a_row_deleted_with_triggers_disabled_is_a_breach_naming_the_table() {
    breach_is_caught(
        "breach-row-deleted",
        true,
        "DELETE FROM orders WHERE id = 102;",
        &["rows of table orders"],
    );
}

#[test]
fn a_row_inserted_with_triggers_disabled_is_a_breach_naming_the_table() {
    breach_is_caught(
        "breach-row-inserted",
        true,
        "INSERT INTO orders (id, cents, status) VALUES (999, 1, 'active');",
        &["rows of table orders"],
    );
}

#[test]
fn every_fence_trigger_dropped_is_a_breach_naming_it() {
    for (i, trigger) in [
        "_cutover_fence_insert_orders",
        "_cutover_fence_update_orders",
        "_cutover_fence_delete_orders",
        "_cutover_fence_insert__cutover_journal_1",
        "_cutover_fence_update__cutover_journal_1",
        "_cutover_fence_delete__cutover_journal_1",
        "_cutover_journal_update_orders",
    ]
    .iter()
    .enumerate()
    {
        breach_is_caught(
            &format!("breach-dropped-{i}"),
            false,
            &format!("DROP TRIGGER \"{trigger}\";"),
            &[trigger, "dropped"],
        );
    }
}

#[test]
fn a_trigger_or_index_added_to_the_fenced_table_is_a_breach() {
    breach_is_caught(
        "breach-new-trigger",
        false,
        "CREATE TRIGGER sneaky AFTER INSERT ON orders BEGIN SELECT 1; END;",
        &["sneaky"],
    );
    breach_is_caught(
        "breach-new-index",
        false,
        "CREATE INDEX by_cents ON orders (cents);",
        &["by_cents"],
    );
}

#[test]
fn the_journal_dropped_is_a_breach() {
    breach_is_caught(
        "breach-journal-dropped",
        false,
        "DROP TABLE _cutover_journal_1;",
        &["_cutover_journal_1", "dropped"],
    );
}

#[test]
fn the_fenced_table_swapped_for_a_copy_without_triggers_is_a_breach() {
    breach_is_caught(
        "breach-table-swapped",
        false,
        "ALTER TABLE orders RENAME TO orders_old;
         CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL);
         INSERT INTO orders SELECT * FROM orders_old;
         UPDATE orders SET cents = 1 WHERE id = 102;",
        &["orders"],
    );
}

/// The schema changes no trigger can stop (DROP TRIGGER, DROP TABLE, ALTER
/// TABLE; docs/journal.md, the fence), which a spec check meets first.
const SCHEMA_BREACHES: &[(&str, &str)] = &[
    ("drop-table", "DROP TABLE orders;"),
    ("add-column", "ALTER TABLE orders ADD COLUMN note TEXT;"),
    (
        "rename-column",
        "ALTER TABLE orders RENAME COLUMN status TO state;",
    ),
];

#[test]
fn a_dropped_or_altered_fenced_table_never_lets_replay_write() {
    for (name, sql) in SCHEMA_BREACHES {
        let d = Dir::orders_fenced(&format!("schema-breach-{name}"));
        d.exec("target.db", sql);
        let before = d.snapshot();
        let out = d.cutover(&["replay"]).output();
        assert!(matches!(out.code, Some(1 | 2)), "{name}\n{out}");
        d.assert_unchanged(&before, &format!("replay after {name}"));
    }
}

// Regression test. Until 3092b6f: DROP TABLE / ALTER TABLE on a fenced table makes
// replay exit 2 with spec advice ('fix the table name in the spec', 'map a source column
// to it') instead of exit 1 'fence breached' naming the table.
#[test]
fn a_dropped_or_altered_fenced_table_is_a_fence_breach_naming_it() {
    for (name, sql) in SCHEMA_BREACHES {
        let d = Dir::orders_fenced(&format!("schema-breach-named-{name}"));
        d.exec("target.db", sql);
        let before = d.snapshot();
        let out = d.cutover(&["replay"]).output();
        assert_eq!(out.code, Some(1), "{name}\n{out}");
        out.assert_mentions(&["fence breached", "orders"]);
        d.assert_unchanged(&before, &format!("replay after {name}"));
    }
}

// --- the fence record and the fence's own triggers ---------------------------------------

#[test]
fn a_lowered_boundary_never_lets_replay_report_success() {
    let d = Dir::orders_fenced("boundary-lowered");
    if d.try_exec("target.db", "UPDATE _cutover_fence SET boundary = 2")
        .is_err()
    {
        return; // The fence record is fenced too: nothing to get past.
    }
    let out = d.cutover(&["replay"]).output();
    assert_ne!(
        out.code,
        Some(0),
        "replay called a short rollback done\n{out}"
    );
}

// Regression test. Until 3092b6f: _cutover_fence itself is not fenced: another process
// lowers the boundary (UPDATE _cutover_fence SET boundary = 2); fence status says
// intact, replay applies 2 of 3 entries, and fence off lifts the fence without --force.
#[test]
fn the_fence_record_cannot_be_rewritten_behind_the_fence() {
    let d = Dir::orders_fenced("fence-record-rewritten");
    let source = d.bytes("source.db");
    let (code, out) = python(
        d.path(),
        support::PY_WRITE,
        &["target.db", "UPDATE _cutover_fence SET boundary = 2"],
    );
    if code == 3 {
        assert!(out.contains("cutover fence"), "{out}");
        return;
    }
    // It went through: then everything downstream must notice.
    let out = d.run(&["fence", "status"], 1);
    out.assert_mentions(&["fence breached"]);
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached"]);
    assert_eq!(d.bytes("source.db"), source);
    d.run(&["fence", "off"], 2);
}

// Regression test. Until 3092b6f: fence on keeps a trigger planted under a fence
// trigger's name (CREATE TRIGGER IF NOT EXISTS) and probes only INSERT, so it reports
// 'read-only for every writer' (exit 0) while another process can DELETE journal
// entries.
#[test]
fn a_trigger_planted_under_a_fence_triggers_name_does_not_weaken_the_fence() {
    let d = Dir::orders_after_writes("planted-fence-trigger");
    d.exec(
        "target.db",
        "CREATE TRIGGER \"_cutover_fence_delete__cutover_journal_1\" BEFORE DELETE ON _cutover_journal_1 BEGIN SELECT 1; END;",
    );
    let out = d.cutover(&["fence", "on"]).output();
    if out.code != Some(0) {
        return; // Refusing to fence over a planted trigger is fine too.
    }
    let before = target_rows(&d);
    let (code, out) = python(
        d.path(),
        support::PY_WRITE,
        &["target.db", "DELETE FROM _cutover_journal_1 WHERE seq = 3"],
    );
    assert_eq!(code, 3, "fence on said read-only, but: {out}");
    assert_eq!(target_rows(&d), before);
}

#[test]
fn writes_past_a_planted_fence_trigger_are_still_caught_by_replay() {
    let d = Dir::orders_after_writes("planted-fence-trigger-caught");
    d.exec(
        "target.db",
        "CREATE TRIGGER \"_cutover_fence_delete__cutover_journal_1\" BEFORE DELETE ON _cutover_journal_1 BEGIN SELECT 1; END;",
    );
    let fenced = d.cutover(&["fence", "on"]).output();
    let (code, _) = python(
        d.path(),
        support::PY_WRITE,
        &["target.db", "DELETE FROM _cutover_journal_1 WHERE seq = 3"],
    );
    if code != 0 {
        // The planted trigger did not weaken the fence: nothing got past.
        assert_eq!(fenced.code, Some(0), "{fenced}");
        d.run(&["replay"], 0);
        return;
    }
    let before = d.snapshot();
    let out = d.cutover(&["replay"]).output();
    assert!(matches!(out.code, Some(1 | 2)), "{out}");
    d.assert_unchanged(&before, "replay after a write past a planted trigger");
}

// --- a breach during the replay ------------------------------------------------------------

#[test]
fn a_write_with_triggers_disabled_during_a_replay_stops_it_before_its_next_batch() {
    let d = Dir::new("breach-mid-replay");
    let entries = support::fenced_orders_workload(&d, 2_000, 3_000, 0xB4EAC4);
    let mut child = d
        .cutover(&["replay", "--batch", "10"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "20000")
        .spawn();
    // Wait for the first committed batch, then write behind the fence.
    let started = Instant::now();
    loop {
        let n = support::applied_seqs(&d).len();
        if n > 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the replay never committed a batch"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let conn = d.conn("target.db");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
        .expect("disabling triggers");
    conn.execute(
        "UPDATE orders SET cents = cents + 1 WHERE id = (SELECT min(id) FROM orders)",
        [],
    )
    .expect("a write with triggers off");
    drop(conn);
    let status = child.wait().expect("waiting for the replay");
    let applied = support::applied_seqs(&d);
    let journal = support::journal_seqs(&d, i64::MAX);
    assert_eq!(
        applied[..],
        journal[..applied.len()],
        "applied entries must be a prefix of the journal"
    );
    if status.code() == Some(0) {
        // The whole replay finished before the write: nothing to prove, but
        // the next replay must notice the write.
        assert_eq!(applied.len() as i64, entries);
    } else {
        assert_eq!(status.code(), Some(1), "the replay must stop with exit 1");
        assert!((applied.len() as i64) < entries);
    }
    let before = d.snapshot();
    let out = d.run(&["replay", "--batch", "10"], 1);
    out.assert_mentions(&["fence breached", "orders"]);
    d.assert_unchanged(&before, "replay after a breach mid-way");
}

// --- fence on, killed half-way ---------------------------------------------------------------

/// Asserts the target has no fence at all: no fence row, no fence trigger,
/// another process can write, and a later `fence on` sets a whole fence.
fn no_fence_at_all(d: &Dir) {
    let json = d.json(&["fence", "status"], 0);
    assert_eq!(json["fenced"], false, "{json:#}");
    let triggers = d.int(
        "target.db",
        "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_cutover\\_fence\\_%' ESCAPE '\\'",
    );
    assert_eq!(triggers, 0, "fence triggers without a fence row");
    let fence_rows = if d.has_table("target.db", "_cutover_fence") {
        d.int("target.db", "SELECT count(*) FROM _cutover_fence")
    } else {
        0
    };
    assert_eq!(fence_rows, 0);
    let json = d.json(&["fence", "on"], 0);
    assert_eq!(json["boundary"], 3, "{json:#}");
    for t in ["orders", "_cutover_journal_1"] {
        for op in ["insert", "update", "delete"] {
            let name = format!("_cutover_fence_{op}_{t}");
            let n = d.int(
                "target.db",
                &format!(
                    "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = '{name}'"
                ),
            );
            assert_eq!(n, 1, "{name} is missing after fence on");
        }
    }
    d.run(&["replay"], 0);
}

#[test]
fn fence_on_killed_while_waiting_for_a_writer_leaves_no_fence() {
    let d = Dir::orders_after_writes("fence-killed-waiting");
    let before = d.snapshot();
    let conn = d.conn("target.db");
    conn.execute_batch("BEGIN IMMEDIATE; UPDATE orders SET cents = cents WHERE id = 102;")
        .expect("holding the write lock");
    let mut child = d
        .cutover(&["fence", "on"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().expect("polling fence on").is_none(),
        "fence on did not wait for the writer"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaping fence on");
    conn.execute_batch("ROLLBACK").expect("releasing the lock");
    drop(conn);
    d.assert_unchanged(&before, "fence on killed while it waited");
    no_fence_at_all(&d);
}

#[test]
fn fence_on_killed_while_its_commit_waits_for_a_reader_leaves_no_fence() {
    // A reader's shared lock lets `fence on` take its write lock, install the
    // triggers and the fence row in its transaction, and then makes COMMIT
    // wait for the exclusive lock. Killed there, nothing of it may remain.
    let d = Dir::orders_after_writes("fence-killed-committing");
    let reader = d.conn("target.db");
    reader
        .execute_batch("BEGIN; SELECT count(*) FROM orders;")
        .expect("a read transaction");
    let n: i64 = reader
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .expect("reading inside the transaction");
    assert_eq!(n, 3);
    let mut child = d
        .cutover(&["fence", "on"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .spawn();
    // The rollback journal appears once the transaction has changed a page.
    let started = Instant::now();
    while !d.exists("target.db-journal") {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "fence on never started its transaction"
        );
        assert!(
            child.try_wait().expect("polling").is_none(),
            "fence on finished while a reader held the database"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().expect("polling fence on").is_none(),
        "fence on committed past a reader"
    );
    child.kill().expect("SIGKILL");
    child.wait().expect("reaping fence on");
    reader.execute_batch("COMMIT").expect("ending the read");
    drop(reader);
    no_fence_at_all(&d);
}

#[test]
fn a_schema_change_is_a_breach_whatever_the_case_of_the_table_name_in_the_spec() {
    let d = Dir::orders("breach-mixed-case");
    d.spec(&support::ORDERS_SPEC.replace(
        "name = \"orders\"",
        "name = \"orders\"\nsource_table = \"ORDERS\"\ntarget_table = \"Orders\"",
    ));
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.exec("target.db", support::ORDERS_APP_WRITES);
    d.run(&["fence", "on"], 0);
    d.exec("target.db", "CREATE INDEX by_cents ON orders (cents);");
    let before = d.snapshot();
    let out = d.run(&["fence", "status"], 1);
    out.assert_mentions(&["fence breached", "by_cents"]);
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached", "by_cents"]);
    d.assert_unchanged(
        &before,
        "replay after a schema change under a mixed-case name",
    );
}
