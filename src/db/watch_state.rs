//! The file `cutover watch` keeps beside the spec (`<spec stem>.watch.db`,
//! docs/watch.md): a SQLite database of its own, never either side of the
//! migration. It holds the journal identity and spec digest its record
//! belongs to, the position (the last seq checked), the record of the keys
//! the journal has touched (per table and key, what the source had to hold
//! before the journal's first write to it, and the latest image), the open
//! findings, the target's table sizes, and the replay rates measured by
//! `replay --rehearse` and `replay`. Each pass writes it in one
//! transaction ([`WatchState::begin`], [`WatchState::commit`]), so a killed
//! pass leaves it as the last pass left it.

use std::path::Path;

use anyhow::{Context, Result};
use rusqlite::{OptionalExtension, params};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS touched (
    tbl TEXT NOT NULL, key TEXT NOT NULL,
    base TEXT, latest TEXT, first_seq INTEGER NOT NULL, touches INTEGER NOT NULL,
    born INTEGER,
    PRIMARY KEY (tbl, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings (
    seq INTEGER NOT NULL, kind TEXT NOT NULL, tbl TEXT NOT NULL, key TEXT NOT NULL,
    col TEXT, value TEXT, reason TEXT NOT NULL, fix_kind TEXT NOT NULL, fix TEXT NOT NULL,
    PRIMARY KEY (seq, kind, key));
CREATE TABLE IF NOT EXISTS sizes (tbl TEXT PRIMARY KEY, rows INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rates (
    at TEXT NOT NULL, kind TEXT NOT NULL, entries INTEGER NOT NULL, seconds REAL NOT NULL,
    rows INTEGER NOT NULL, reconcile_seconds REAL NOT NULL);
";

/// A key the journal touched: what the source had to hold under it before
/// the journal's first write to it (`base`; `None`: no row), and the row
/// the journal left there last (`latest`; `None`: none), each the JSON of
/// a canonical row; and since when `latest` stands under the key (`born`:
/// the seq of the write that brought it, 0 for a row there before the
/// journal, `None` when unknown or there is none).
#[derive(Clone, Debug, PartialEq)]
pub struct Touched {
    pub base: Option<String>,
    pub latest: Option<String>,
    pub first_seq: i64,
    pub touches: i64,
    pub born: Option<i64>,
}

/// A finding as the file keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredFinding {
    pub seq: i64,
    pub kind: String,
    pub table: String,
    /// The key's JSON.
    pub key: String,
    pub column: Option<String>,
    pub value: Option<String>,
    pub reason: String,
    pub fix_kind: String,
    pub fix: String,
}

/// A replay's measured pace: `entries` applied in `seconds`, and `rows`
/// reconciled (both sides) in `reconcile_seconds`; `kind` is `rehearsal`
/// or `replay`, `at` when it ran (RFC 3339).
#[derive(Clone, Debug, PartialEq)]
pub struct Rate {
    pub at: String,
    pub kind: String,
    pub entries: i64,
    pub seconds: f64,
    pub rows: i64,
    pub reconcile_seconds: f64,
}

/// The state file, open.
pub struct WatchState {
    conn: rusqlite::Connection,
    path: String,
}

impl WatchState {
    /// Opens the file, creating it (and its tables) when it is not there.
    pub fn open(path: &Path) -> Result<WatchState> {
        let shown = path.display().to_string();
        let conn = rusqlite::Connection::open(path)
            .with_context(|| format!("opening watch state {shown}"))?;
        conn.busy_timeout(super::sqlite::busy_timeout())?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; {SCHEMA}"
        ))
        .with_context(|| format!("creating the tables of watch state {shown}"))?;
        // A file an earlier version wrote has no `born`: its keys' rows are
        // of unknown age, which no finding is cleared by.
        let born: i64 = conn.query_row(
            "SELECT count(*) FROM pragma_table_info('touched') WHERE name = 'born'",
            [],
            |r| r.get(0),
        )?;
        if born == 0 {
            conn.execute_batch("ALTER TABLE touched ADD COLUMN born INTEGER")
                .with_context(|| format!("adding born to watch state {shown}"))?;
        }
        Ok(WatchState { conn, path: shown })
    }

    /// Where the file is, for messages.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Begins the pass's transaction, taking the file's write lock (a
    /// second pass at the same time waits for it).
    pub fn begin(&self) -> Result<()> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .with_context(|| format!("locking watch state {}; another pass holds it", self.path))
    }

    pub fn commit(&self) -> Result<()> {
        self.conn
            .execute_batch("COMMIT")
            .with_context(|| format!("committing watch state {}", self.path))
    }

    /// Rolls the pass back, if one is open.
    pub fn rollback(&self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// A named value of the file's record.
    pub fn meta(&self, name: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM meta WHERE name = ?1")?
            .query_row([name], |r| r.get(0))
            .optional()?)
    }

    pub fn set_meta(&self, name: &str, value: &str) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)")?
            .execute([name, value])?;
        Ok(())
    }

    /// Forgets the record, the findings and the sizes (a new journal, or a
    /// changed spec); the measured rates stay, since they belong to the
    /// pair of databases.
    pub fn reset(&self) -> Result<()> {
        self.conn
            .execute_batch("DELETE FROM touched; DELETE FROM findings; DELETE FROM sizes;")?;
        Ok(())
    }

    pub fn touched(&self, table: &str, key: &str) -> Result<Option<Touched>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT base, latest, first_seq, touches, born FROM touched WHERE tbl = ?1 AND key = ?2",
            )?
            .query_row([table, key], |r| {
                Ok(Touched {
                    base: r.get(0)?,
                    latest: r.get(1)?,
                    first_seq: r.get(2)?,
                    touches: r.get(3)?,
                    born: r.get(4)?,
                })
            })
            .optional()?)
    }

    pub fn put_touched(&self, table: &str, key: &str, t: &Touched) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO touched (tbl, key, base, latest, first_seq, touches, born)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                table,
                key,
                t.base,
                t.latest,
                t.first_seq,
                t.touches,
                t.born
            ])?;
        Ok(())
    }

    /// How many keys the record holds.
    pub fn touched_count(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM touched", [], |r| r.get(0))?)
    }

    /// The open findings, by seq.
    pub fn findings(&self) -> Result<Vec<StoredFinding>> {
        let mut st = self.conn.prepare_cached(
            "SELECT seq, kind, tbl, key, col, value, reason, fix_kind, fix FROM findings ORDER BY seq, kind, key",
        )?;
        let rows = st.query_map([], |r| {
            Ok(StoredFinding {
                seq: r.get(0)?,
                kind: r.get(1)?,
                table: r.get(2)?,
                key: r.get(3)?,
                column: r.get(4)?,
                value: r.get(5)?,
                reason: r.get(6)?,
                fix_kind: r.get(7)?,
                fix: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Replaces the open findings with `findings`.
    pub fn set_findings(&self, findings: &[StoredFinding]) -> Result<()> {
        self.conn.execute("DELETE FROM findings", [])?;
        let mut st = self.conn.prepare_cached(
            "INSERT OR REPLACE INTO findings VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for f in findings {
            st.execute(params![
                f.seq, f.kind, f.table, f.key, f.column, f.value, f.reason, f.fix_kind, f.fix
            ])?;
        }
        Ok(())
    }

    /// The target's rows per spec table, as the record keeps them.
    pub fn sizes(&self) -> Result<Vec<(String, i64)>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT tbl, rows FROM sizes ORDER BY tbl")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn set_size(&self, table: &str, rows: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO sizes VALUES (?1, ?2)")?
            .execute(params![table, rows])?;
        Ok(())
    }

    /// Records a measured replay rate, in a transaction of its own.
    pub fn record_rate(&self, rate: &Rate) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO rates VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    rate.at,
                    rate.kind,
                    rate.entries,
                    rate.seconds,
                    rate.rows,
                    rate.reconcile_seconds
                ],
            )
            .with_context(|| format!("recording the replay rate in {}", self.path))?;
        Ok(())
    }

    /// The last rate measured, if any.
    pub fn latest_rate(&self) -> Result<Option<Rate>> {
        Ok(self
            .conn
            .query_row(
                "SELECT at, kind, entries, seconds, rows, reconcile_seconds FROM rates ORDER BY rowid DESC LIMIT 1",
                [],
                |r| {
                    Ok(Rate {
                        at: r.get(0)?,
                        kind: r.get(1)?,
                        entries: r.get(2)?,
                        seconds: r.get(3)?,
                        rows: r.get(4)?,
                        reconcile_seconds: r.get(5)?,
                    })
                },
            )
            .optional()?)
    }
}
