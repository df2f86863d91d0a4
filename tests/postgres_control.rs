//! cutover's control tables on PostgreSQL, against a real server: the
//! applied set and a feed's receipts and revision evidence.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Result;
use cutover::db::postgres::Postgres;
use cutover::db::{Access, AppliedSet, Connection, Fixtures, Receipts};

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
