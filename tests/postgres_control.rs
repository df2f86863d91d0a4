//! cutover's control tables and fence on PostgreSQL, against a real server,
//! where PostgreSQL differs (the control store's contract on every engine
//! is in `tests/conformance.rs`): the applied set locked against a racing
//! session, the tables in the spec's schema, times and watermarks as they
//! are stored, evolved columns' types, and the fence — refused writes
//! from other sessions whatever their replication role, disabled triggers
//! seen, in-flight writers waited for and named, the guarded fence row.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

mod support;

use support::Seam;

use std::time::{Duration, Instant};
use support::postgres::{Client, TestDb};

use anyhow::Result;
use cutover::db::control::progress::{LoadCheckpoint, NewBatch};
use cutover::db::control::receipts::Receipt;
use cutover::db::{Access, Db, Fence, FenceRecord, Fixtures};
use cutover::value::Value;

/// Whether a time is the control tables' text (`2024-03-15T13:45:00.123Z`).
fn is_utc_text(t: &str) -> bool {
    t.len() == 24 && &t[10..11] == "T" && &t[19..20] == "." && t.ends_with('Z')
}

/// Values equal as stored: reals by their bits (NaN, -0.0).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Real(x), Value::Real(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

const MESSAGE: &str = "cutover fence: table t is read-only";

#[test]
fn the_applied_set_records_each_entry_once() -> Result<()> {
    let Some(t) = TestDb::new("the_applied_set_records_each_entry_once") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    support::applied_set_contract(&db)?;

    let mut c = t.client();
    let times: Vec<String> = c
        .query("SELECT applied_at FROM public._cutover_applied", &[])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(times.len(), 5, "one row per feed entry, one per run");
    assert!(times.iter().all(|t| is_utc_text(t)), "{times:?}");
    Ok(())
}

/// Two replays recording overlapping runs with different last seqs (so the
/// primary key cannot tell): the second waits for the first to commit, then
/// sees its run and records nothing, and its batch fails.
#[test]
fn overlapping_runs_from_two_sessions_are_recorded_once() -> Result<()> {
    let Some(t) = TestDb::new("overlapping_runs_from_two_sessions_are_recorded_once") else {
        return Ok(());
    };
    let first = t.db(Access::Write, cutover::spec::Side::Source);
    first.write(|| first.applied_set().ensure())?;
    let tx = first.begin_write()?;
    assert_eq!(first.applied_set().record_run("j1", &[1, 2, 3], "a")?, 3);
    let second = t.db(Access::Write, cutover::spec::Side::Source);
    let racing = std::thread::spawn(move || -> Result<(usize, Instant)> {
        let tx = second.begin_write()?;
        let n = second.applied_set().record_run("j1", &[2, 3, 4, 5], "b")?;
        let recorded = Instant::now();
        tx.rollback();
        Ok((n, recorded))
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !racing.is_finished(),
        "the second run must wait for the first"
    );
    let committing = Instant::now();
    tx.commit()?;
    let (n, recorded) = racing.join().expect("the racing session")?;
    assert_eq!(n, 0, "the second run meets the first, committed");
    // It could only record once the first had begun to commit.
    assert!(
        recorded >= committing,
        "the second run recorded before the first committed"
    );
    let p = first.applied_set().progress("j1")?;
    assert_eq!((p.entries, p.last), (3, 3));
    Ok(())
}

#[test]
fn an_applied_set_of_single_entries_gains_runs() -> Result<()> {
    let Some(t) = TestDb::new("an_applied_set_of_single_entries_gains_runs") else {
        return Ok(());
    };
    support::older_applied_set_upgrades(&t.db(Access::Write, cutover::spec::Side::Target))
}

#[test]
fn an_applied_set_without_journal_identities_is_refused() -> Result<()> {
    let Some(t) = TestDb::new("an_applied_set_without_journal_identities_is_refused") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.fixtures()
        .execute_script("CREATE TABLE _cutover_applied (seq bigint PRIMARY KEY)")?;
    let err = db.applied_set().ensure().unwrap_err().to_string();
    assert!(err.contains("older cutover"), "{err}");
    assert_eq!(db.applied_set().progress("j1")?.entries, 0);
    Ok(())
}

#[test]
fn control_tables_live_in_the_specs_schema() -> Result<()> {
    let Some(t) = TestDb::new("control_tables_live_in_the_specs_schema") else {
        return Ok(());
    };
    t.engine(Access::Write, cutover::spec::Side::Target)
        .execute_script("CREATE SCHEMA \"Mig ration\"")?;
    let db = support::postgres::as_db(t.engine_in("Mig ration", Access::Write)?);
    db.write(|| {
        db.progress().ensure_control_tables()?;
        db.progress().ensure_sync_tables()?;
        db.receipts().ensure()?;
        db.applied_set().ensure()
    })?;
    let mut c = t.client();
    let tables: Vec<(String, String)> = c
        .query(
            "SELECT table_schema::text, table_name::text FROM information_schema.tables
             WHERE table_name LIKE '\\_cutover\\_%' ORDER BY 2",
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let names: Vec<&str> = tables.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "_cutover_applied",
            "_cutover_cursor",
            "_cutover_deliveries",
            "_cutover_evolved",
            "_cutover_fence",
            "_cutover_journal_id",
            "_cutover_journal_tables",
            "_cutover_kept",
            "_cutover_load",
            "_cutover_revisions",
            "_cutover_source_schema",
        ]
    );
    assert!(tables.iter().all(|(s, _)| s == "Mig ration"), "{tables:?}");
    // Seen there, however the schema's name is spelled.
    assert!(db.control().has("_cutover_fence")?);
    assert!(!db.control().has("_cutover_nothing")?);

    // Created inside the caller's transaction: rolled back with it.
    let other = t.db(Access::Write, cutover::spec::Side::Target);
    let tx = other.begin_write()?;
    other.progress().ensure_control_tables()?;
    tx.rollback();
    assert!(!other.control().has("_cutover_fence")?);

    // The journal's registry hands out image ids as SQLite's does.
    c.batch_execute(
        "INSERT INTO \"Mig ration\"._cutover_journal_tables (tbl, target_table, columns)
         VALUES ('a', 'a', '[\"id\"]'), ('b', 'b', '[\"id\"]')",
    )?;
    let imgs: Vec<i64> = c
        .query(
            "SELECT img FROM \"Mig ration\"._cutover_journal_tables ORDER BY img",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(imgs, [1, 2]);
    Ok(())
}

/// The times the control tables record are UTC text to the millisecond,
/// as SQLite's are (the statement's time, not the client's).
#[test]
fn control_times_are_utc_text() -> Result<()> {
    let Some(t) = TestDb::new("control_times_are_utc_text") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.write(|| {
        db.receipts().ensure()?;
        db.receipts().insert(&Receipt {
            feed: "billing",
            delivery: "d1",
            digest: "sha-1",
            first: 1,
            last: 10,
            written: 8,
            duplicate: 1,
            stale: 1,
        })?;
        db.progress().ensure_control_tables()?;
        db.progress().set_load_checkpoint(
            "artist",
            &LoadCheckpoint {
                last_key: None,
                rows: 1,
                done: true,
            },
        )
    })?;
    let mut c = t.client();
    for (what, q) in [
        (
            "receipt",
            "SELECT min(committed_at) FROM _cutover_deliveries",
        ),
        ("checkpoint", "SELECT updated_at FROM _cutover_load"),
    ] {
        let at: String = c.query_one(q, &[])?.get(0);
        assert!(is_utc_text(&at), "{what}: {at}");
    }
    assert!(is_utc_text(&db.control().now()?));
    Ok(())
}

/// Watermarks are kept as a kind and a text (sql/postgres/sync.sql), so
/// that a NaN and a text holding a NUL come back exactly.
#[test]
fn sync_watermarks_are_kept_as_kind_and_text() -> Result<()> {
    let Some(t) = TestDb::new("sync_watermarks_are_kept_as_kind_and_text") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.write(|| {
        db.progress().ensure_sync_tables()?;
        db.progress().record_sync_batch(
            "orders",
            &NewBatch {
                batch: "b1",
                rows: 1,
                changed: 1,
                first_watermark: &Value::Real(f64::NAN),
                last_watermark: &Value::Text("a\0b".into()),
                last_key: "[1]",
            },
        )
    })?;
    let r = t.client().query_one(
        "SELECT first_watermark_kind, first_watermark, last_watermark_kind, last_watermark
         FROM _cutover_cursor",
        &[],
    )?;
    let got: (String, String, String, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
    assert_eq!(
        got,
        (
            "real".into(),
            "NaN".into(),
            "text_hex".into(),
            "610062".into()
        )
    );
    let c = db.progress().sync_cursor("orders")?.expect("a cursor");
    assert_eq!(c.last_watermark, Value::Text("a\0b".into()));
    let b = &db.progress().sync_batches("orders")?[0];
    assert!(matches!(b.first_watermark, Value::Real(r) if r.is_nan()));
    assert!(same(&b.first_watermark, &Value::Real(f64::NAN)));
    Ok(())
}

/// A column `sync --evolve` adds takes the PostgreSQL type closest to the
/// source's declared one that holds every value of it.
#[test]
fn evolved_columns_take_the_closest_type() -> Result<()> {
    let Some(t) = TestDb::new("evolved_columns_take_the_closest_type") else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.fixtures()
        .execute_script("CREATE TABLE customer (id bigint PRIMARY KEY)")?;
    // The source columns as a SQLite source's catalogue describes them.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("source.db");
    Db::create(
        &file,
        "CREATE TABLE customer (id INTEGER PRIMARY KEY, tier INTEGER, \"Joined On\" DATETIME,
             ratio REAL, code varchar(12), big UNSIGNED BIG INT, price numeric(10,2), any)",
    )?;
    let source = Db::open_file(&file, Access::Read, cutover::spec::Side::Source)?;
    let cols = source.catalogue().table_columns("customer")?;
    db.write(|| {
        for c in &cols[1..7] {
            db.catalogue().add_column("customer", c)?;
        }
        Ok(())
    })?;
    let types: Vec<(String, String)> = db
        .catalogue()
        .table_columns("customer")?
        .into_iter()
        .map(|c| (c.name, c.decl_type))
        .collect();
    assert_eq!(
        types,
        [
            ("id", "bigint"),
            ("tier", "bigint"),
            ("Joined On", "text"),
            ("ratio", "double precision"),
            ("code", "character varying(12)"),
            ("big", "bigint"),
            ("price", "numeric(10,2)"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // A column SQLite declared without a type has no PostgreSQL counterpart.
    let err = db
        .write(|| db.catalogue().add_column("customer", &cols[7]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no declared type"), "{err}");
    assert_eq!(db.catalogue().table_columns("customer")?.len(), 7);
    Ok(())
}

/// A fenced table `t` (with a child `c` referring to it) and a fence row.
fn fenced(t: &TestDb) -> Result<Db> {
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.fixtures().execute_script(
        "CREATE TABLE t (id int PRIMARY KEY, v text, g int GENERATED ALWAYS AS (id * 2) STORED);
         CREATE TABLE c (id int PRIMARY KEY, t_id int REFERENCES t (id));
         INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b');
         INSERT INTO c VALUES (1, 1);",
    )?;
    db.write(|| {
        db.progress().ensure_control_tables()?;
        db.fence().install_fence_triggers("t", MESSAGE)?;
        db.fence().install_fence_guard(
            "cutover fence: the fence row is guarded",
            "cutover fence: no schema change",
        )?;
        db.fence_records().set_row(&FenceRecord {
            boundary: 42,
            journal_rows: 7,
            fingerprint: "fp".into(),
            tables: vec!["t".to_string()],
            parts: "{}".into(),
            fenced_at: "2024-03-15T13:45:00.123Z".into(),
        })
    })?;
    Ok(db)
}

/// The refusal of each write a session tries on `t`, or what it did.
fn try_writes(c: &mut Client) -> Vec<String> {
    [
        "INSERT INTO t (id, v) VALUES (3, 'c')",
        "UPDATE t SET v = 'x' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "TRUNCATE t CASCADE",
    ]
    .iter()
    .map(|s| match c.execute(*s, &[]) {
        Ok(n) => format!("{s}: went through ({n})"),
        Err(e) => e
            .as_db_error()
            .map_or(e.to_string(), |d| d.message().to_string()),
    })
    .collect()
}

#[test]
fn the_fence_refuses_every_write_from_every_session() -> Result<()> {
    let Some(t) = TestDb::new("the_fence_refuses_every_write_from_every_session") else {
        return Ok(());
    };
    let db = fenced(&t)?;
    assert_eq!(db.fence_triggers("t")?, 3);
    assert_eq!(db.fence_triggers("_cutover_fence")?, 3);
    assert_eq!(db.fence_triggers("c")?, 0);
    let row = db.fence_records().row()?.expect("the fence row");
    assert_eq!(
        (row.boundary, row.journal_rows, row.fingerprint.as_str()),
        (42, 7, "fp")
    );
    assert_eq!(
        (row.tables.as_slice(), row.parts.as_str()),
        (&["t".to_string()][..], "{}")
    );
    let stored: String = t
        .client()
        .query_one("SELECT tables FROM _cutover_fence", &[])?
        .get(0);
    assert_eq!(stored, r#"["t"]"#, "the tables kept as a JSON list");
    assert!(is_utc_text(&row.fenced_at), "{}", row.fenced_at);

    let mut other = t.client();
    assert_eq!(try_writes(&mut other), [MESSAGE; 4]);
    // A session in the replica role skips ordinary triggers, not these.
    other.batch_execute("SET session_replication_role = replica")?;
    assert_eq!(try_writes(&mut other), [MESSAGE; 4]);
    other.batch_execute("RESET session_replication_role")?;

    // The probes, from another connection, are refused too and leave nothing.
    let probe = t.engine(Access::Write, cutover::spec::Side::Target);
    let probes = probe.probe_writes("t")?;
    let labels: Vec<&str> = probes.iter().map(|p| p.write).collect();
    assert_eq!(labels, ["insert", "update", "delete", "truncate"]);
    for p in &probes {
        assert_eq!(
            p.outcome.as_ref().err().map(String::as_str),
            Some(MESSAGE),
            "{}",
            p.write
        );
    }
    for p in probe.probe_writes("_cutover_fence")? {
        let msg = p.outcome.expect_err(p.write);
        assert!(msg.contains("cutover fence"), "{}: {msg}", p.write);
    }
    // An unfenced table: the probes go through (and are rolled back).
    let open = probe.probe_writes("c")?;
    assert!(
        open[0].outcome.is_err(),
        "c's insert breaks its NOT NULL key"
    );
    assert_eq!(open[1].outcome, Ok(1));
    assert_eq!(open[2].outcome, Ok(1));
    assert_eq!(open[3].outcome, Ok(1));
    let n: i64 = other.query_one("SELECT count(*) FROM c", &[])?.get(0);
    assert_eq!(n, 1);
    let n: i64 = other.query_one("SELECT count(*) FROM t", &[])?.get(0);
    assert_eq!(n, 2);

    // The fence row cannot be changed, deleted, truncated or doubled.
    for s in [
        "UPDATE _cutover_fence SET boundary = 0",
        "DELETE FROM _cutover_fence",
        "TRUNCATE _cutover_fence",
        "INSERT INTO _cutover_fence (id, boundary, journal_rows, fingerprint, tables, parts) VALUES (2, 0, 0, '', '', '')",
    ] {
        let e = other.execute(s, &[]).expect_err(s);
        assert_eq!(
            e.as_db_error().map(|d| d.message()),
            Some("cutover fence: the fence row is guarded"),
            "{s}"
        );
    }
    assert_eq!(db.fence_records().row()?.map(|r| r.boundary), Some(42));

    // Lifted only by removing the triggers first.
    db.write(|| db.fence().remove_fence(&["t", "no_such_table"], None))?;
    assert!(db.fence_records().row()?.is_none());
    assert_eq!(db.fence_triggers("t")?, 0);
    other.batch_execute(
        "INSERT INTO t (id, v) VALUES (3, 'c'); UPDATE t SET v = 'y' WHERE id = 3",
    )?;
    Ok(())
}

#[test]
fn a_disabled_or_altered_fence_trigger_does_not_count() -> Result<()> {
    let Some(t) = TestDb::new("a_disabled_or_altered_fence_trigger_does_not_count") else {
        return Ok(());
    };
    let db = fenced(&t)?;
    let mut admin = t.client();
    admin.batch_execute("ALTER TABLE t DISABLE TRIGGER _cutover_fence_truncate")?;
    assert_eq!(db.fence_triggers("t")?, 2);
    // Enabled again, but only in the origin role: not the fence.
    admin.batch_execute("ALTER TABLE t ENABLE TRIGGER _cutover_fence_truncate")?;
    assert_eq!(db.fence_triggers("t")?, 2);
    admin.batch_execute("ALTER TABLE t DISABLE TRIGGER ALL")?;
    assert_eq!(db.fence_triggers("t")?, 0);
    let writes = try_writes(&mut admin);
    assert!(
        writes.iter().all(|w| w.contains("went through")),
        "{writes:?}"
    );
    admin.batch_execute("INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b')")?;
    admin.batch_execute(
        "ALTER TABLE t ENABLE TRIGGER ALL,
           ENABLE ALWAYS TRIGGER _cutover_fence_insert, ENABLE ALWAYS TRIGGER _cutover_fence_update,
           ENABLE ALWAYS TRIGGER _cutover_fence_delete, ENABLE ALWAYS TRIGGER _cutover_fence_truncate",
    )?;
    assert_eq!(db.fence_triggers("t")?, 3);
    // The fence's schema guard refuses it, even to a superuser ...
    let refused = admin
        .batch_execute("ALTER TABLE _cutover_fence DISABLE TRIGGER _cutover_fence_update")
        .expect_err("the schema guard refuses a change to cutover's tables");
    assert!(
        format!("{refused:?}").contains("no schema change"),
        "{refused:?}"
    );
    // ... until it is itself switched off.
    admin.batch_execute(
        "DO $$ DECLARE r record; BEGIN
           FOR r IN SELECT evtname FROM pg_event_trigger WHERE evtname LIKE '%cutover%' LOOP
             EXECUTE format('ALTER EVENT TRIGGER %I DISABLE', r.evtname);
           END LOOP;
         END $$;
         ALTER TABLE _cutover_fence DISABLE TRIGGER _cutover_fence_update",
    )?;
    assert_eq!(db.fence_triggers("_cutover_fence")?, 2);

    // The function rewritten to let writes through: no trigger counts.
    admin.batch_execute(
        "CREATE OR REPLACE FUNCTION _cutover_fence_refuse() RETURNS trigger
         LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
    )?;
    assert_eq!(db.fence_triggers("t")?, 0);
    db.write(|| db.fence().install_fence_triggers("t", MESSAGE))?;
    assert_eq!(db.fence_triggers("t")?, 3);

    // Installing again replaces whatever went by the triggers' names (here
    // a planted trigger that lets writes through).
    admin.batch_execute(
        "CREATE FUNCTION pass() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         CREATE OR REPLACE TRIGGER _cutover_fence_insert BEFORE INSERT ON t
           FOR EACH ROW EXECUTE FUNCTION pass();",
    )?;
    assert_eq!(db.fence_triggers("t")?, 2);
    db.write(|| db.fence().install_fence_triggers("t", MESSAGE))?;
    assert_eq!(db.fence_triggers("t")?, 3);
    assert_eq!(try_writes(&mut t.client()), [MESSAGE; 4]);
    Ok(())
}

#[test]
fn installing_the_fence_waits_for_writers_in_flight_and_names_them() -> Result<()> {
    let Some(t) = TestDb::new("installing_the_fence_waits_for_writers_in_flight_and_names_them")
    else {
        return Ok(());
    };
    let db = t.db(Access::Write, cutover::spec::Side::Target);
    db.fixtures().execute_script(
        "CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE u (id int PRIMARY KEY)",
    )?;
    // The only test that sets it; the others never wait for a lock.
    unsafe { std::env::set_var("CUTOVER_LOCK_TIMEOUT_MS", "5000") };

    // A writer with an open transaction: the install waits for its commit,
    // which then lands before the fence.
    let mut writer = t.client();
    writer.batch_execute("BEGIN; INSERT INTO t VALUES (1)")?;
    let committer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        writer.batch_execute("COMMIT").expect("the writer commits");
    });
    let started = Instant::now();
    db.write(|| db.fence().install_fence_triggers("t", MESSAGE))?;
    let waited = started.elapsed();
    committer.join().expect("the writer's thread");
    assert!(waited >= Duration::from_millis(600), "{waited:?}");
    let n: i64 = t.client().query_one("SELECT count(*) FROM t", &[])?.get(0);
    assert_eq!(n, 1);
    assert_eq!(db.fence_triggers("t")?, 3);

    // A writer that does not finish: the install gives up and names it.
    let mut stuck = t.client();
    stuck.batch_execute(
        "SET application_name = 'billing-worker'; BEGIN; INSERT INTO u VALUES (1)",
    )?;
    let pid: i32 = stuck.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    unsafe { std::env::set_var("CUTOVER_LOCK_TIMEOUT_MS", "200") };
    let started = Instant::now();
    let err = db
        .write(|| db.fence().install_fence_triggers("u", MESSAGE))
        .unwrap_err()
        .to_string();
    let waited = started.elapsed();
    unsafe { std::env::remove_var("CUTOVER_LOCK_TIMEOUT_MS") };
    assert!(waited >= Duration::from_millis(600), "{waited:?}");
    assert!(err.contains(&format!("pid {pid} ")), "{err}");
    assert!(err.contains("billing-worker"), "{err}");
    assert!(err.contains("idle in transaction"), "{err}");
    assert!(err.contains("RowExclusiveLock"), "{err}");
    // Nothing was installed, and the writer was never cut off.
    assert_eq!(db.fence_triggers("u")?, 0);
    stuck.batch_execute("INSERT INTO u VALUES (2); COMMIT")?;
    let n: i64 = t.client().query_one("SELECT count(*) FROM u", &[])?.get(0);
    assert_eq!(n, 2);

    // Outside a transaction there is nothing to hold the lock.
    let err = db.fence().install_fence_triggers("u", MESSAGE).unwrap_err();
    assert!(format!("{err:#}").contains("write transaction"), "{err:#}");
    Ok(())
}
