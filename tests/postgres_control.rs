//! cutover's control tables and fence on PostgreSQL, against a real server:
//! the applied set, receipts and evidence, the load checkpoint and sync
//! cursor (watermarks of every kind exact), and the fence — refused writes
//! from other sessions whatever their replication role, disabled triggers
//! seen, in-flight writers waited for and named, the guarded fence row.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

mod support;

use std::time::{Duration, Instant};
use support::postgres::{Client, TestDb};

use anyhow::Result;
use cutover::db::postgres::Postgres;
use cutover::db::{
    Access, AppliedSet, Catalogue, ColumnInfo, Connection, Fence, FenceRecord, Fixtures, Progress,
    Receipts,
};
use cutover::value::Value;

/// Runs `f` in one write transaction of `db`.
fn write<T>(db: &Postgres, f: impl FnOnce() -> Result<T>) -> Result<T> {
    db.write(f)
}

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
    let db = t.engine(Access::Write, "target");
    support::applied_set_contract(&db)?;

    let mut c = t.client();
    let times: Vec<String> = c
        .query("SELECT applied_at FROM public._cutover_applied", &[])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(times.len(), 5, "one row per feed entry, one per run");
    assert!(times.iter().all(|t| is_utc_text(t)), "{times:?}");

    // Kept columns: kept, replaced by a later delete, taken back once.
    write(&db, || {
        db.keep_columns("j1", "artist", "[1]", r#"{"note":"a"}"#, 3)?;
        db.keep_columns("j1", "artist", "[1]", r#"{"note":"b"}"#, 4)?;
        db.keep_columns("j2", "artist", "[1]", r#"{"note":"c"}"#, 4)
    })?;
    let taken = write(&db, || db.take_kept_columns("j1", "artist", "[1]"))?;
    assert_eq!(taken.as_deref(), Some(r#"{"note":"b"}"#));
    assert_eq!(db.take_kept_columns("j1", "artist", "[1]")?, None);
    assert_eq!(
        db.take_kept_columns("j2", "artist", "[1]")?.as_deref(),
        Some(r#"{"note":"c"}"#)
    );
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
    let first = t.engine(Access::Write, "source");
    write(&first, || first.ensure_applied_table())?;
    first.begin_write()?;
    assert_eq!(first.record_applied_all("j1", &[1, 2, 3], "a")?, 3);
    let second = t.engine(Access::Write, "source");
    let racing = std::thread::spawn(move || -> Result<(usize, Instant)> {
        second.begin_write()?;
        let n = second.record_applied_all("j1", &[2, 3, 4, 5], "b")?;
        let recorded = Instant::now();
        second.rollback();
        Ok((n, recorded))
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !racing.is_finished(),
        "the second run must wait for the first"
    );
    let committing = Instant::now();
    first.commit()?;
    let (n, recorded) = racing.join().expect("the racing session")?;
    assert_eq!(n, 0, "the second run meets the first, committed");
    // It could only record once the first had begun to commit.
    assert!(
        recorded >= committing,
        "the second run recorded before the first committed"
    );
    assert_eq!(first.applied_progress("j1")?, (3, 3));
    Ok(())
}

#[test]
fn an_applied_set_of_single_entries_gains_runs() -> Result<()> {
    let Some(t) = TestDb::new("an_applied_set_of_single_entries_gains_runs") else {
        return Ok(());
    };
    support::older_applied_set_upgrades(&t.engine(Access::Write, "target"))
}

#[test]
fn an_applied_set_without_journal_identities_is_refused() -> Result<()> {
    let Some(t) = TestDb::new("an_applied_set_without_journal_identities_is_refused") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, "target");
    db.execute_script("CREATE TABLE _cutover_applied (seq bigint PRIMARY KEY)")?;
    let err = db.ensure_applied_table().unwrap_err().to_string();
    assert!(err.contains("older cutover"), "{err}");
    assert_eq!(db.applied_progress("j1")?, (0, 0));
    Ok(())
}

#[test]
fn control_tables_live_in_the_specs_schema() -> Result<()> {
    let Some(t) = TestDb::new("control_tables_live_in_the_specs_schema") else {
        return Ok(());
    };
    t.engine(Access::Write, "target")
        .execute_script("CREATE SCHEMA \"Mig ration\"")?;
    let db = t.engine_in("Mig ration", Access::Write)?;
    write(&db, || {
        db.ensure_control_tables()?;
        db.ensure_sync_tables()?;
        db.ensure_apply_tables()?;
        db.ensure_applied_table()
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

    // Created inside the caller's transaction: rolled back with it.
    let other = t.engine(Access::Write, "target");
    other.begin_write()?;
    other.ensure_control_tables()?;
    other.rollback();
    assert!(!other.has_table("_cutover_fence")?);

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

#[test]
fn receipts_and_revision_evidence() -> Result<()> {
    let Some(t) = TestDb::new("receipts_and_revision_evidence") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, "target");
    assert_eq!(db.receipt_digest("billing", "d1")?, None);
    assert_eq!(db.feed_checkpoint("billing")?, 0);
    write(&db, || db.ensure_apply_tables())?;
    write(&db, || {
        db.insert_receipt("billing", "d1", "sha-1", 1, 10, 8, 1, 1)?;
        db.insert_receipt("billing", "d2", "sha-2", 11, 15, 5, 0, 0)?;
        db.insert_receipt("other", "d1", "sha-3", 1, 99, 99, 0, 0)
    })?;
    assert_eq!(
        db.receipt_digest("billing", "d1")?.as_deref(),
        Some("sha-1")
    );
    assert_eq!(db.receipt_digest("billing", "d3")?, None);
    assert_eq!(db.feed_checkpoint("billing")?, 15);
    assert_eq!(db.feed_checkpoint("none")?, 0);
    // A delivery has one receipt.
    assert!(
        write(&db, || db
            .insert_receipt("billing", "d1", "sha-x", 1, 10, 0, 0, 0))
        .is_err()
    );
    assert_eq!(
        db.receipt_digest("billing", "d1")?.as_deref(),
        Some("sha-1")
    );

    write(&db, || {
        db.record_evidence("inv", "[1]", 3, "stale", Some(r#"{"a":1}"#), "d1", 4)?;
        db.record_evidence("inv", "[1]", 3, "stale", Some(r#"{"a":2}"#), "d2", 5)?;
        db.record_evidence("inv", "[1]", 5, "superseded", Some(r#"{"a":3}"#), "d2", 6)?;
        db.record_evidence("inv", "[1]", 5, "tombstone", None, "d2", 7)?;
        db.record_evidence("inv", "[1]", 2, "tombstone", None, "d1", 2)
    })?;
    assert_eq!(
        db.evidence("inv", "[1]", 3)?,
        Some(("stale".into(), Some(r#"{"a":1}"#.into())))
    );
    assert_eq!(
        db.evidence("inv", "[1]", 5)?,
        Some(("tombstone".into(), None))
    );
    assert_eq!(db.evidence("inv", "[1]", 4)?, None);
    assert_eq!(db.tombstone("inv", "[1]")?, Some(5));
    assert_eq!(db.tombstone("inv", "[2]")?, None);
    let mut c = t.client();
    let at: String = c
        .query_one("SELECT min(committed_at) FROM _cutover_deliveries", &[])?
        .get(0);
    assert!(is_utc_text(&at), "{at}");
    Ok(())
}

#[test]
fn load_checkpoints_round_trip() -> Result<()> {
    let Some(t) = TestDb::new("load_checkpoints_round_trip") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, "target");
    assert_eq!(db.load_checkpoint("artist")?, None);
    write(&db, || db.ensure_control_tables())?;
    write(&db, || db.ensure_control_tables())?;
    assert_eq!(db.load_checkpoint("artist")?, None);
    write(&db, || {
        db.set_load_checkpoint("artist", Some("[500]"), 500, false)
    })?;
    assert_eq!(
        db.load_checkpoint("artist")?,
        Some((Some("[500]".into()), 500, false))
    );
    write(&db, || db.set_load_checkpoint("artist", None, 1000, true))?;
    assert_eq!(db.load_checkpoint("artist")?, Some((None, 1000, true)));
    let at: String = t
        .client()
        .query_one("SELECT updated_at FROM _cutover_load", &[])?
        .get(0);
    assert!(is_utc_text(&at), "{at}");
    Ok(())
}

#[test]
fn sync_cursors_keep_every_kind_of_watermark_exactly() -> Result<()> {
    let Some(t) = TestDb::new("sync_cursors_keep_every_kind_of_watermark_exactly") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, "target");
    assert_eq!(db.sync_cursor("orders")?, None);
    assert!(db.sync_batches("orders")?.is_empty());
    assert!(!db.sync_batch_seen("orders", "b1")?);
    write(&db, || db.ensure_sync_tables())?;
    assert_eq!(db.sync_cursor("orders")?, None);
    let marks = [
        Value::Null,
        Value::Integer(i64::MIN),
        Value::Integer(i64::MAX),
        Value::Real(0.1),
        Value::Real(-0.0),
        Value::Real(1e300),
        Value::Real(5e-324),
        Value::Real(f64::INFINITY),
        Value::Real(f64::NEG_INFINITY),
        Value::Real(f64::NAN),
        Value::Text(String::new()),
        Value::Text("2024-03-15 13:45:00".into()),
        Value::Text("1250".into()),
        Value::Text("é\\'\"".into()),
        Value::Text("a\0b".into()),
        Value::TextBytes(vec![0xff, 0x00, b'a']),
        Value::Blob(vec![]),
        Value::Blob(vec![0, 1, 255]),
    ];
    for (i, m) in marks.iter().enumerate() {
        let first = &marks[(i + 1) % marks.len()];
        let key = format!("[{i}]");
        write(&db, || {
            db.record_sync_batch("orders", &format!("b{i}"), 10, 2, first, m, &key)
        })?;
        let (back, k) = db.sync_cursor("orders")?.expect("a cursor");
        assert!(same(&back, m), "{m:?} came back as {back:?}");
        assert_eq!(k, key);
    }
    assert!(db.sync_batch_seen("orders", "b3")?);
    assert!(!db.sync_batch_seen("orders", "b99")?);
    assert!(!db.sync_batch_seen("other", "b3")?);
    let batches = db.sync_batches("orders")?;
    assert_eq!(batches.len(), marks.len());
    for (i, (no, rows, changed, first, last, at)) in batches.iter().enumerate() {
        assert_eq!((*no, *rows, *changed), (i as i64 + 1, 10, 2));
        assert!(same(first, &marks[(i + 1) % marks.len()]), "{first:?}");
        assert!(same(last, &marks[i]), "{last:?}");
        assert!(is_utc_text(at), "{at}");
    }
    // Another table's cursor is its own.
    write(&db, || {
        db.record_sync_batch("lines", "b0", 1, 1, &Value::Null, &Value::Integer(7), "[1]")
    })?;
    assert_eq!(
        db.sync_cursor("lines")?.map(|c| c.0),
        Some(Value::Integer(7))
    );
    assert_eq!(db.sync_batches("lines")?[0].0, 1);
    Ok(())
}

#[test]
fn source_schema_and_evolved_columns() -> Result<()> {
    let Some(t) = TestDb::new("source_schema_and_evolved_columns") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, "target");
    db.execute_script("CREATE TABLE customer (id bigint PRIMARY KEY)")?;
    assert!(db.recorded_source_schema("customer")?.is_empty());
    assert!(db.evolved_columns("customer")?.is_empty());
    write(&db, || db.ensure_sync_tables())?;
    let col = |n: &str, ty: &str| ColumnInfo {
        name: n.into(),
        decl_type: ty.into(),
        pk: 0,
    };
    write(&db, || {
        db.record_source_schema("customer", &[col("b", "TEXT"), col("a", "INTEGER")])
    })?;
    write(&db, || {
        db.record_source_schema("customer", &[col("id", "INTEGER"), col("Name", "TEXT")])
    })?;
    assert_eq!(
        db.recorded_source_schema("customer")?,
        [
            ("Name".to_string(), "TEXT".to_string()),
            ("id".to_string(), "INTEGER".to_string())
        ]
    );
    write(&db, || {
        db.evolve_column("customer", "customer", "tier", "INTEGER")?;
        db.evolve_column("customer", "customer", "Joined On", "DATETIME")?;
        db.evolve_column("customer", "customer", "ratio", "REAL")?;
        db.evolve_column("customer", "customer", "code", "varchar(12)")?;
        db.evolve_column("customer", "customer", "big", "UNSIGNED BIG INT")?;
        db.evolve_column("customer", "customer", "price", "numeric(10,2)")
    })?;
    let types: Vec<(String, String)> = db
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
    let evolved = db.evolved_columns("customer")?;
    assert_eq!(evolved.len(), 6);
    assert!(evolved.iter().all(|(s, t)| s == t));
    assert!(evolved.contains(&("Joined On".to_string(), "Joined On".to_string())));
    // A column SQLite declared without a type has no PostgreSQL counterpart.
    let err = write(&db, || db.evolve_column("customer", "customer", "any", ""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no declared type"), "{err}");
    assert_eq!(db.evolved_columns("customer")?.len(), 6);
    Ok(())
}

/// A fenced table `t` (with a child `c` referring to it) and a fence row.
fn fenced(t: &TestDb) -> Result<Postgres> {
    let db = t.engine(Access::Write, "target");
    db.execute_script(
        "CREATE TABLE t (id int PRIMARY KEY, v text, g int GENERATED ALWAYS AS (id * 2) STORED);
         CREATE TABLE c (id int PRIMARY KEY, t_id int REFERENCES t (id));
         INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b');
         INSERT INTO c VALUES (1, 1);",
    )?;
    write(&db, || {
        db.ensure_control_tables()?;
        db.install_fence_triggers("t", MESSAGE)?;
        db.install_fence_guard(
            "cutover fence: the fence row is guarded",
            "cutover fence: no schema change",
        )?;
        db.set_fence_row(&FenceRecord {
            boundary: 42,
            journal_rows: 7,
            fingerprint: "fp".into(),
            tables: r#"["t"]"#.into(),
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
    let row = db.fence_row()?.expect("the fence row");
    assert_eq!(
        (row.boundary, row.journal_rows, row.fingerprint.as_str()),
        (42, 7, "fp")
    );
    assert_eq!(
        (row.tables.as_str(), row.parts.as_str()),
        (r#"["t"]"#, "{}")
    );
    assert!(is_utc_text(&row.fenced_at), "{}", row.fenced_at);

    let mut other = t.client();
    assert_eq!(try_writes(&mut other), [MESSAGE; 4]);
    // A session in the replica role skips ordinary triggers, not these.
    other.batch_execute("SET session_replication_role = replica")?;
    assert_eq!(try_writes(&mut other), [MESSAGE; 4]);
    other.batch_execute("RESET session_replication_role")?;

    // The probes, from another connection, are refused too and leave nothing.
    let probe = t.engine(Access::Write, "target");
    let probes = probe.probe_writes("t")?;
    let labels: Vec<&str> = probes.iter().map(|p| p.0).collect();
    assert_eq!(labels, ["insert", "update", "delete", "truncate"]);
    for (what, r) in &probes {
        assert_eq!(
            r.as_ref().err().map(String::as_str),
            Some(MESSAGE),
            "{what}"
        );
    }
    for (what, r) in probe.probe_writes("_cutover_fence")? {
        let msg = r.expect_err(what);
        assert!(msg.contains("cutover fence"), "{what}: {msg}");
    }
    // An unfenced table: the probes go through (and are rolled back).
    let open: Vec<(&str, Result<usize, String>)> = probe.probe_writes("c")?;
    assert!(open[0].1.is_err(), "c's insert breaks its NOT NULL key");
    assert_eq!(open[1].1, Ok(1));
    assert_eq!(open[2].1, Ok(1));
    assert_eq!(open[3].1, Ok(1));
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
    assert_eq!(db.fence_row()?.map(|r| r.boundary), Some(42));

    // Lifted only by removing the triggers first.
    write(&db, || db.remove_fence(&["t", "no_such_table"], None))?;
    assert!(db.fence_row()?.is_none());
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
    write(&db, || db.install_fence_triggers("t", MESSAGE))?;
    assert_eq!(db.fence_triggers("t")?, 3);

    // Installing again replaces whatever went by the triggers' names (here
    // a planted trigger that lets writes through).
    admin.batch_execute(
        "CREATE FUNCTION pass() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         CREATE OR REPLACE TRIGGER _cutover_fence_insert BEFORE INSERT ON t
           FOR EACH ROW EXECUTE FUNCTION pass();",
    )?;
    assert_eq!(db.fence_triggers("t")?, 2);
    write(&db, || db.install_fence_triggers("t", MESSAGE))?;
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
    let db = t.engine(Access::Write, "target");
    db.execute_script("CREATE TABLE t (id int PRIMARY KEY); CREATE TABLE u (id int PRIMARY KEY)")?;
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
    write(&db, || db.install_fence_triggers("t", MESSAGE))?;
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
    let err = write(&db, || db.install_fence_triggers("u", MESSAGE))
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
    let err = db.install_fence_triggers("u", MESSAGE).unwrap_err();
    assert!(format!("{err:#}").contains("write transaction"), "{err:#}");
    Ok(())
}
