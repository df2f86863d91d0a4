//! The fence holds against every writer: a second connection in this process
//! and a writer in another OS process (Python's sqlite3 module, or psql on
//! PostgreSQL) both fail
//! with "cutover fence" and change nothing. It lives in the file, so it
//! outlasts the process that set it; only `fence off` lifts it. What triggers
//! cannot stop (a dropped trigger, a journal written behind the fence) replay
//! notices and reports as "fence breached", writing nothing.

mod support;

use std::time::{Duration, Instant};

use rusqlite::config::DbConfig;
use support::{Dir, Layout, Rows, each_layout};

/// Every row of the target's table and journal, to prove nothing changed.
fn target_rows(d: &Dir) -> (Rows, Rows) {
    (
        d.dump("target.db", "orders"),
        d.dump("target.db", "_cutover_journal_1"),
    )
}

const WRITES: &[(&str, &str)] = &[
    (
        "insert",
        "INSERT INTO orders (id, cents, status) VALUES (105, 100, 'active')",
    ),
    ("update", "UPDATE orders SET cents = 1 WHERE id = 102"),
    ("delete", "DELETE FROM orders WHERE id = 102"),
    (
        "journal insert",
        "INSERT INTO _cutover_journal_1 (seq, op, n1, n2, n3) VALUES (1000, 'insert', 105, 100, 'active')",
    ),
    ("journal delete", "DELETE FROM _cutover_journal_1"),
    (
        "journal image update",
        "UPDATE _cutover_journal_1 SET n2 = 1 WHERE seq = (SELECT min(seq) FROM _cutover_journal_1)",
    ),
];

/// Each write from the target engine's own client in another process
/// (Python's sqlite3, psql) is refused naming the fence, and nothing changes.
fn another_process_cannot_write_to_a_fenced_target(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "fence-other-process");
    let before = target_rows(&d);
    for (what, sql) in WRITES {
        let err = d
            .try_client("target.db", sql)
            .expect_err(&format!("{what} from another process was not refused"));
        assert!(err.contains("cutover fence"), "{what}: {err}");
    }
    assert_eq!(target_rows(&d), before);
    d.run(&["fence", "status"], 0);
}
each_layout!(another_process_cannot_write_to_a_fenced_target);

#[test]
fn a_second_connection_cannot_write_to_a_fenced_target() {
    let d = Dir::orders_fenced("fence-second-connection");
    let before = target_rows(&d);
    for (what, sql) in WRITES {
        let err = d
            .try_exec("target.db", sql)
            .expect_err(&format!("{what} went through the fence"));
        assert!(err.contains("cutover fence"), "{what}: {err}");
    }
    // query_only is not what holds: a connection that sets nothing is refused.
    let conn = d.conn("target.db");
    let q: i64 = conn
        .query_row("PRAGMA query_only", [], |r| r.get(0))
        .unwrap();
    assert_eq!(q, 0);
    let err = conn
        .execute("UPDATE orders SET status = 'closed'", [])
        .unwrap_err();
    assert!(err.to_string().contains("cutover fence"), "{err}");
    drop(conn);
    assert_eq!(target_rows(&d), before);
}

#[test]
fn the_fence_survives_the_process_that_set_it() {
    let d = Dir::orders_fenced("fence-survives");
    // `fence on` has exited; the fence is in the file.
    let fence = d.query("target.db", "SELECT boundary FROM _cutover_fence");
    assert_eq!(fence, vec![vec![support::int(3)]]);
    let triggers = d.int(
        "target.db",
        "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_cutover\\_fence\\_%' ESCAPE '\\'",
    );
    assert_eq!(
        triggers, 18,
        "three each on orders, the journal's table, its list of entries, its identity and its column lists, and three guarding the fence row"
    );
    let err = d
        .try_exec("target.db", "DELETE FROM orders")
        .expect_err("a fresh connection wrote through the fence");
    assert!(err.contains("cutover fence"), "{err}");
    let json = d.json(&["fence", "status"], 0);
    assert_eq!(json["fenced"], true, "{json:#}");
    assert_eq!(json["intact"], true, "{json:#}");
    assert_eq!(json["boundary"], 3, "{json:#}");
}

fn fence_off_lifts_the_fence_for_every_writer(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "fence-off-lifts");
    d.run(&["replay"], 0);
    d.run(&["fence", "off"], 0);
    assert_eq!(d.int("target.db", "SELECT count(*) FROM _cutover_fence"), 0);
    d.client(
        "target.db",
        "INSERT INTO orders (id, cents, status) VALUES (105, 100, 'active')",
    );
    d.exec("target.db", "UPDATE orders SET cents = 1 WHERE id = 102");
    assert_eq!(
        d.query(
            "target.db",
            "SELECT cents FROM orders WHERE id IN (102, 105) ORDER BY id"
        ),
        vec![vec![support::int(1)], vec![support::int(100)]]
    );
    let json = d.json(&["fence", "status"], 0);
    assert_eq!(json["fenced"], false, "{json:#}");
}
each_layout!(fence_off_lifts_the_fence_for_every_writer);

fn fence_off_force_lifts_an_unreplayed_fence(layout: Layout) {
    let d = Dir::orders_fenced_on(layout, "fence-off-force");
    d.run(&["fence", "off"], 2);
    assert!(d.try_exec("target.db", "DELETE FROM orders").is_err());
    let out = d.run(&["fence", "off", "--force"], 0);
    out.assert_mentions(&["forced"]);
    d.exec("target.db", "DELETE FROM orders WHERE id = 102");
}
each_layout!(fence_off_force_lifts_an_unreplayed_fence);

#[test]
fn replay_stops_with_fence_breached_when_a_fence_trigger_was_dropped() {
    let d = Dir::orders_fenced("breach-dropped-trigger");
    d.exec("target.db", "DROP TRIGGER \"_cutover_fence_insert_orders\"");
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, "replay over a breached fence");
    let out = d.run(&["fence", "status"], 1);
    out.assert_mentions(&["fence breached", "orders"]);
    // The dry run must not plan from a breached fence as if it held either.
    let out = d.cutover(&["replay", "--dry-run"]).output();
    d.assert_unchanged(&before, "replay --dry-run over a breached fence");
    assert_ne!(
        out.code,
        Some(0),
        "dry run called a breached fence fine\n{out}"
    );
}

#[test]
fn replay_stops_with_fence_breached_when_the_journal_grew_behind_the_fence() {
    let d = Dir::orders_fenced("breach-journal-grew");
    d.exec(
        "target.db",
        "DROP TRIGGER \"_cutover_fence_insert__cutover_journal_1\";
         INSERT INTO _cutover_journal_1 (seq, op, n1, n2, n3) VALUES (1000, 'insert', 105, 100, 'active');",
    );
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, "replay over a grown journal");
    assert_eq!(
        d.dump("source.db", "orders"),
        Dir::orders("pristine").dump("source.db", "orders")
    );
}

#[test]
fn replay_stops_with_fence_breached_when_a_fence_trigger_is_recreated_differently() {
    let d = Dir::orders_fenced("breach-altered-trigger");
    d.exec(
        "target.db",
        "DROP TRIGGER \"_cutover_fence_delete_orders\";
         CREATE TRIGGER \"_cutover_fence_delete_orders\" BEFORE DELETE ON orders BEGIN SELECT 1; END;",
    );
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, "replay over an altered fence");
}

#[test]
fn a_resumed_replay_stops_when_the_fence_was_breached_in_between() {
    let d = Dir::orders_fenced("breach-between-runs");
    d.cutover(&["replay", "--batch", "1"])
        .env("CUTOVER_FAULT", "after-commit")
        .expect(support::FAULT_EXIT);
    // The replay commits whole: every entry, before its verdict.
    assert_eq!(d.applied_entries("source.db"), 3);
    d.exec("target.db", "DROP TRIGGER \"_cutover_fence_update_orders\"");
    let before = d.snapshot();
    let out = d.run(&["replay", "--batch", "1"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, "resumed replay over a breached fence");
}

#[test]
fn a_write_with_triggers_disabled_is_caught_before_the_switch_back() {
    // A connection can switch triggers off; the fence cannot stop it. The
    // fence's fingerprint covers the fenced tables' rows, so replay stops
    // with exit 1 and names the table before anyone switches back.
    let d = Dir::orders_fenced("triggers-disabled");
    let conn = d.conn("target.db");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
        .unwrap();
    conn.execute("UPDATE orders SET cents = 1 WHERE id = 102", [])
        .expect("with triggers off the fence does not fire");
    drop(conn);
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached", "rows of table orders"]);
}

#[test]
fn a_write_with_triggers_disabled_is_a_breach_and_replay_writes_nothing() {
    let d = Dir::orders_fenced("triggers-disabled-breach");
    let conn = d.conn("target.db");
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)
        .unwrap();
    conn.execute("UPDATE orders SET cents = 1 WHERE id = 102", [])
        .unwrap();
    drop(conn);
    let before = d.snapshot();
    let out = d.run(&["replay"], 1);
    out.assert_mentions(&["fence breached"]);
    d.assert_unchanged(&before, "replay over a fence bypassed with triggers off");
}

/// The system calls that put a thread to sleep for a while (`nanosleep`,
/// `clock_nanosleep`), by number.
#[cfg(target_arch = "x86_64")]
const SLEEP_CALLS: &[u64] = &[35, 230];
#[cfg(target_arch = "aarch64")]
const SLEEP_CALLS: &[u64] = &[101, 115];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const SLEEP_CALLS: &[u64] = &[];

/// Whether process `pid` is waiting for a SQLite lock that another
/// connection holds. SQLite's busy handler retries the lock between sleeps
/// (`usleep`), holding nothing while it sleeps, so the wait leaves no trace
/// in the database; the kernel shows it: a thread asleep in `nanosleep`
/// (`wchan`, else the system call it is in). Nothing else in cutover sleeps
/// on a SQLite target.
fn waiting_for_a_lock(pid: u32) -> bool {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    threads.flatten().any(|t| {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        let call = read("syscall");
        read("wchan").contains("nanosleep")
            || call
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| SLEEP_CALLS.contains(&n))
    })
}

#[test]
fn fence_on_waits_for_a_writer_in_flight_and_puts_its_commit_inside_the_boundary() {
    let d = Dir::orders_after_writes("fence-waits");
    let conn = d.conn("target.db");
    conn.execute_batch(
        "BEGIN IMMEDIATE; INSERT INTO orders (id, cents, status) VALUES (105, 100, 'active');",
    )
    .unwrap();
    // Ten seconds, so that only a fence on that does not wait at all fails.
    let mut child = d
        .cutover(&["fence", "on"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .spawn();
    // The writer commits only once fence on is seen waiting for its lock:
    // whatever fence on read before asking for the lock, it read without the
    // insert.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !waiting_for_a_lock(child.id()) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("fence on ended ({status}) without waiting for the writer in flight");
        }
        assert!(
            Instant::now() < deadline,
            "fence on was never seen waiting for the writer in flight"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "fence on failed");
    let json = d.json(&["fence", "status"], 0);
    assert_eq!(
        json["boundary"], 4,
        "the in-flight insert is inside: {json:#}"
    );
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 4, "{json:#}");
    assert_eq!(
        d.query("source.db", "SELECT * FROM orders WHERE id = 105"),
        vec![vec![
            support::int(105),
            support::text("1.00"),
            support::text("A")
        ]]
    );
}

#[test]
fn fence_on_gives_up_when_a_writer_holds_the_lock_and_leaves_no_fence() {
    let d = Dir::orders_after_writes("fence-lock-timeout");
    let before = target_rows(&d);
    let conn = d.conn("target.db");
    conn.execute_batch("BEGIN IMMEDIATE; UPDATE orders SET cents = 5 WHERE id = 102;")
        .unwrap();
    // CUTOVER_BUSY_TIMEOUT_MS=500: it waits half a second, then reports.
    let out = d.run(&["fence", "on"], 2);
    out.assert_mentions(&["target.db", "lock"]);
    conn.execute_batch("ROLLBACK").unwrap();
    drop(conn);
    assert_eq!(target_rows(&d), before);
    let json = d.json(&["fence", "status"], 0);
    assert_eq!(json["fenced"], false, "{json:#}");
    d.exec("target.db", "UPDATE orders SET cents = 5 WHERE id = 102");
}

/// The fingerprint's digests, recomputed by Python from the target file
/// with the bytes docs/journal.md gives: a fence set by one version of
/// cutover is checked alike by the next (the digests are read and hashed on
/// separate threads, a buffer at a time; the bytes must not change).
#[test]
fn the_fence_fingerprint_is_sha256_over_the_documented_bytes() {
    let d = Dir::orders_fenced("fingerprint-bytes");
    let script = r#"
import hashlib, json, sqlite3, struct, sys
db = sqlite3.connect("target.db")
def value(v):
    if v is None: return b"\x00"
    if isinstance(v, int): return b"\x01" + struct.pack("<q", v)
    if isinstance(v, float): return b"\x02" + struct.pack("<d", v)
    if isinstance(v, str): v = v.encode(); return b"\x03" + struct.pack("<Q", len(v)) + v
    return b"\x04" + struct.pack("<Q", len(v)) + v
parts = json.loads(db.execute("SELECT parts FROM _cutover_fence").fetchone()[0])
rows = hashlib.sha256()
for row in db.execute("SELECT id, cents, status FROM orders ORDER BY id"):
    rows.update(b"".join(value(v) for v in row))
journal = hashlib.sha256()
for seq, img, op in db.execute("SELECT seq, img, op FROM _cutover_journal ORDER BY seq"):
    op = op.encode()
    journal.update(struct.pack("<qqQ", seq, img, len(op)) + op)
tables = [r[0] for r in db.execute(
    "SELECT name FROM sqlite_schema WHERE type = 'table' AND name GLOB '_cutover_journal_[0-9]*' ORDER BY name")]
assert tables == ["_cutover_journal_1"], tables
for t in tables:
    journal.update(struct.pack("<Q", len(t)) + t.encode())
    for row in db.execute(f'SELECT rowid, * FROM "{t}" ORDER BY rowid'):
        journal.update(b"".join(value(v) for v in row))
assert parts["journal_rows"] > 0, parts["journal_rows"]
assert parts["content"] == [["orders", rows.hexdigest()]], (parts["content"], rows.hexdigest())
assert parts["digest"] == journal.hexdigest(), (parts["digest"], journal.hexdigest())
print("ok")
"#;
    let (code, out) = support::python(d.path(), script, &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok"), "{out}");
}

/// What the target holds that `fence on` could change: catalogue and rows
/// of every table, and on PostgreSQL the database's event triggers and each
/// sequence's position, which the catalogue and rows do not show.
fn whole_target(d: &Dir) -> (support::Image, Rows) {
    let extra = if d.engine_of("target.db") == "postgres" {
        d.query(
            "target.db",
            "SELECT 'event trigger ' || evtname FROM pg_event_trigger
             UNION ALL
             SELECT 'sequence ' || sequencename || ' ' || coalesce(last_value::text, '-')
             FROM pg_sequences WHERE schemaname = current_schema()
             ORDER BY 1",
        )
    } else {
        Vec::new()
    };
    (d.image("target.db"), extra)
}

/// The running example after the application's writes, with a target on
/// which the fence's proof fails though every write of the application and
/// of cutover goes through. On SQLite the target is a STRICT table whose
/// `cents` has a default of the wrong type, which no write uses (each names
/// `cents`): the proof's insert of a row of defaults is refused for its
/// type ("cannot store TEXT value in INTEGER column") before any trigger
/// runs. On PostgreSQL a BEFORE INSERT trigger of the application refuses
/// a duplicate order in its own words, and is named so that it fires
/// before the fence's (triggers fire in name order): the proof's insert of
/// a copy of a row is turned away by it, not by the fence.
fn target_that_defeats_the_proof(layout: Layout, name: &str) -> Dir {
    let target = if layout.target_on_pg() {
        support::ORDERS_TARGET
    } else {
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL DEFAULT 'none', status TEXT NOT NULL) STRICT;"
    };
    let d = Dir::with_on(
        layout,
        name,
        &support::Spec::orders(),
        support::ORDERS_SOURCE,
        target,
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    if layout.target_on_pg() {
        d.client(
            "target.db",
            "CREATE FUNCTION orders_no_duplicate() RETURNS trigger LANGUAGE plpgsql AS $$
             DECLARE taken boolean;
             BEGIN
                 EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE id = $1)', TG_TABLE_SCHEMA, TG_TABLE_NAME)
                     INTO taken USING NEW.id;
                 IF taken THEN
                     RAISE EXCEPTION 'order % already exists', NEW.id;
                 END IF;
                 RETURN NEW;
             END $$;
             CREATE TRIGGER \"BI_orders\" BEFORE INSERT ON orders
                 FOR EACH ROW EXECUTE FUNCTION orders_no_duplicate();",
        );
    }
    d.client("target.db", support::ORDERS_APP_WRITES);
    d
}

/// A fence whose proof fails ends in exit 2, naming the table and the
/// write, and takes itself off again: the target's schema, triggers, rows,
/// functions, event triggers and sequences are exactly as before `fence
/// on`, writers can write again, and nothing was kept in the source.
fn an_unproven_fence_leaves_the_target_as_it_was(layout: Layout) {
    let d = target_that_defeats_the_proof(layout, "unproven-fence");
    let before = whole_target(&d);
    let source = d.image("source.db");
    let out = d.cutover(&["fence", "on"]).expect(2);
    let after = whole_target(&d);
    before.0.assert_same(&after.0, &out);
    assert_eq!(before.1, after.1, "{layout}: {out}");
    assert!(
        out.stderr
            .contains("an insert on 'orders' from another connection failed")
            && out.stderr.contains("taken off again"),
        "{layout}: {out}"
    );
    d.assert_db_unchanged("source.db", &source, &out);
    d.client(
        "target.db",
        "INSERT INTO orders (id, cents, status) VALUES (105, 1, 'closed')",
    );
    d.json(&["fence", "status"], 0);
}
each_layout!(an_unproven_fence_leaves_the_target_as_it_was: [sqlite, sqlite_to_pg, pg_to_pg]);

/// A fence that stands and is proven, but whose record cannot be copied
/// into the source (another process holds the source's write lock), ends
/// in exit 2 and is taken off again: the target exactly as before. Once
/// the source is free, `fence on` sets it.
fn a_fence_whose_copy_cannot_be_kept_leaves_the_target_as_it_was(layout: Layout) {
    let d = Dir::orders_after_writes_on(layout, "fence-copy-refused");
    let before = whole_target(&d);
    // The source is a SQLite file of the folder in both layouts.
    let holder = rusqlite::Connection::open(d.join("source.db")).expect("opening the source");
    holder
        .execute_batch("BEGIN IMMEDIATE")
        .expect("taking the source's write lock");
    let out = d.cutover(&["fence", "on"]).expect(2);
    holder
        .execute_batch("ROLLBACK")
        .expect("letting go of the lock");
    drop(holder);
    let after = whole_target(&d);
    before.0.assert_same(&after.0, &out);
    assert_eq!(before.1, after.1, "{layout}: {out}");
    assert!(
        out.stderr.contains("could not be kept in the source")
            && out.stderr.contains("taken off again"),
        "{layout}: {out}"
    );
    let on = d.json(&["fence", "on"], 0);
    assert_eq!(on["copy"], "kept in the source", "{layout}: {on}");
    d.run(&["replay"], 0);
}
each_layout!(a_fence_whose_copy_cannot_be_kept_leaves_the_target_as_it_was: [sqlite, sqlite_to_pg, sqlite_to_my]);
