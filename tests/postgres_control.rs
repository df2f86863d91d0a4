//! cutover's control tables on PostgreSQL, against a real server: the
//! applied set, receipts and evidence, the load checkpoint and sync cursor
//! (watermarks of every kind exact), all in the spec's schema.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Result;
use cutover::db::postgres::Postgres;
use cutover::db::{
    Access, AppliedSet, Catalogue, ColumnInfo, Connection, Fixtures, Progress, Receipts,
};
use cutover::value::Value;

/// A database of its own for one test, dropped when the test ends.
struct TestDb {
    admin: String,
    name: String,
    /// The URL of the new database (no schema parameter).
    url: String,
}

fn candidates() -> Vec<String> {
    match std::env::var("CUTOVER_TEST_PG") {
        Ok(u) => vec![u],
        Err(_) => vec![
            "postgres://root@127.0.0.1:5432/postgres".into(),
            "postgres://postgres@127.0.0.1:5432/postgres".into(),
        ],
    }
}

impl TestDb {
    /// A fresh database, or `None` (with a line saying why) when no server
    /// answers outside CI.
    fn new(test: &str) -> Option<TestDb> {
        static N: AtomicU32 = AtomicU32::new(0);
        let mut errors = Vec::new();
        for admin in candidates() {
            match postgres::Client::connect(&admin, postgres::NoTls) {
                Ok(mut c) => {
                    let nanos = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.subsec_nanos())
                        .unwrap_or(0);
                    let name = format!(
                        "cutover_t_{}_{}_{}",
                        std::process::id(),
                        N.fetch_add(1, Ordering::Relaxed),
                        nanos
                    );
                    c.batch_execute(&format!("CREATE DATABASE {name}"))
                        .expect("creating a test database");
                    let (base, _) = admin.rsplit_once('/').expect("admin URL has a database");
                    let url = format!("{base}/{name}");
                    return Some(TestDb {
                        admin: admin.clone(),
                        name,
                        url,
                    });
                }
                Err(e) => errors.push(format!("{admin}: {e}")),
            }
        }
        if std::env::var_os("CI").is_some() {
            panic!(
                "CI is set and no PostgreSQL server answered: {}",
                errors.join("; ")
            );
        }
        println!(
            "skipping {test}: no PostgreSQL server ({})",
            errors.join("; ")
        );
        None
    }

    fn open(&self) -> Postgres {
        Postgres::open(&self.url, Access::Write, "target").expect("opening the test database")
    }

    fn open_schema(&self, schema: &str) -> Result<Postgres> {
        Postgres::open(
            &format!("{}?schema={schema}", self.url),
            Access::Write,
            "target",
        )
    }

    /// A plain session, as an application would open one.
    fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("connecting")
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

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

#[test]
fn the_applied_set_records_each_entry_once() -> Result<()> {
    let Some(t) = TestDb::new("the_applied_set_records_each_entry_once") else {
        return Ok(());
    };
    let db = t.open();
    assert_eq!(db.applied_progress("j1")?, (0, 0));
    assert_eq!(db.applied_last("j1")?, 0);
    write(&db, || db.ensure_applied_table())?;
    write(&db, || db.ensure_applied_table())?;
    let at = db.now()?;
    write(&db, || {
        assert!(db.record_applied("j1", 1, "d1", &at)?);
        assert!(!db.record_applied("j1", 1, "d1", &at)?);
        assert_eq!(db.record_applied_all("j1", &[1, 2, 3, 5], "d2")?, 3);
        assert_eq!(db.record_applied_all("j1", &[2, 3], "d2")?, 0);
        assert_eq!(db.record_applied_all("j2", &[], "d2")?, 0);
        assert_eq!(db.record_applied_all("j2", &[7], "d3")?, 1);
        Ok(())
    })?;
    assert!(db.is_applied("j1", 5)?);
    assert!(!db.is_applied("j1", 4)?);
    assert!(!db.is_applied("j2", 5)?);
    assert_eq!(db.applied_progress("j1")?, (4, 5));
    assert_eq!(db.applied_last("j1")?, 5);
    assert_eq!(db.applied_progress("j2")?, (1, 7));
    assert_eq!(db.applied_progress("j3")?, (0, 0));

    // Rolled back with the transaction, like the rows it describes.
    db.begin_write()?;
    db.record_applied_all("j1", &[9], "d4")?;
    db.rollback();
    assert_eq!(db.applied_last("j1")?, 5);

    let mut c = t.client();
    let times: Vec<String> = c
        .query("SELECT applied_at FROM public._cutover_applied", &[])?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(times.len(), 5);
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

#[test]
fn an_applied_set_without_journal_identities_is_refused() -> Result<()> {
    let Some(t) = TestDb::new("an_applied_set_without_journal_identities_is_refused") else {
        return Ok(());
    };
    let db = t.open();
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
    t.open().execute_script("CREATE SCHEMA \"Mig ration\"")?;
    let db = t.open_schema("Mig ration")?;
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
    let other = t.open();
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
    let db = t.open();
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
    let db = t.open();
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
    let db = t.open();
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
    let db = t.open();
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
