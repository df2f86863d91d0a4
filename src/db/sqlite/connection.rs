//! Opening a SQLite file with the durability rules of docs/spec.md (a
//! writer refuses `journal_mode` OFF or MEMORY and writes with
//! `synchronous=FULL`), and the
//! connection's transactions and change token.

use std::path::Path;

use anyhow::{Context, Result, bail};
use rusqlite::{OpenFlags, config::DbConfig};

use super::*;
use crate::db::transaction::Step;
use crate::spec::Side;

impl Sqlite {
    /// What messages call the database: the file's path.
    pub fn location(&self) -> &str {
        &self.location
    }
}

impl Connection for Sqlite {
    /// A file SQLite opened read-only (it does so, whatever was asked,
    /// when this process may not write it), its journal mode and
    /// `synchronous`; a file has no connection to protect.
    fn facts(&self) -> Result<Facts> {
        Ok(Facts {
            read_only: self.conn.is_readonly(rusqlite::MAIN_DB)?,
            durability: Durability {
                settings: vec![
                    ("journal_mode", self.journal_mode()?),
                    ("synchronous", self.synchronous()?.to_string()),
                ],
            },
            security: None,
            identity: vec![
                (
                    "engine".into(),
                    format!(
                        "SQLite {}",
                        self.conn
                            .query_row("SELECT sqlite_version()", [], |r| r.get::<_, String>(0))?
                    ),
                ),
                ("file".into(), self.location.clone()),
            ],
        })
    }

    /// `BeginWrite` takes the write lock now (`BEGIN IMMEDIATE`, waiting
    /// for a writer in flight), so that what is read inside the
    /// transaction cannot change before it commits; `BeginRead` is a
    /// deferred transaction, whose first read takes the snapshot its later
    /// reads keep. A rollback of either forgets the schema this connection
    /// read inside it.
    fn transaction(&self, step: Step) -> Result<()> {
        match step {
            Step::BeginWrite => self.conn.execute_batch("BEGIN IMMEDIATE").with_context(|| {
                format!(
                    "taking the write lock on {}; another process may hold it, retry when it is done",
                    self.location
                )
            }),
            Step::BeginRead => Ok(self.conn.execute_batch("BEGIN")?),
            Step::Commit => {
                #[cfg(debug_assertions)]
                self.check_patched_schema();
                self.conn
                    .execute_batch("COMMIT")
                    .with_context(|| format!("committing to {}", self.location))
            }
            Step::Rollback => {
                self.forget_schema();
                if !self.conn.is_autocommit() {
                    let _ = self.conn.execute_batch("ROLLBACK");
                }
                Ok(())
            }
            Step::Savepoint => Ok(self.conn.execute_batch("SAVEPOINT cutover_batch")?),
            // cutover's connections enforce no foreign key.
            Step::DeferForeignKeys => Ok(()),
            Step::Release => Ok(self.conn.execute_batch("RELEASE cutover_batch")?),
            Step::RollbackSavepoint => {
                self.forget_schema();
                let _ = self
                    .conn
                    .execute_batch("ROLLBACK TO cutover_batch; RELEASE cutover_batch");
                Ok(())
            }
        }
    }

    /// Nothing to do: cutover's connections run with `foreign_keys=OFF`.
    fn suspend_foreign_keys(&self, _tables: &[&str], _suspend: bool) -> Result<()> {
        Ok(())
    }

    /// `PRAGMA quick_check`: the b-trees' structure and order, every page.
    fn damage(&self) -> Result<Option<String>> {
        let found = (|| -> rusqlite::Result<Vec<String>> {
            let mut st = self.conn.prepare("PRAGMA quick_check(5)")?;
            let rows = st.query_map([], |r| r.get::<_, String>(0))?;
            rows.collect()
        })();
        let what = match found {
            Ok(lines) if lines.len() == 1 && lines[0] == "ok" => return Ok(None),
            Ok(lines) => lines.join("; ").replace('\n', " "),
            // A page so damaged that the check itself stops.
            Err(e) => e.to_string(),
        };
        Ok(Some(damaged(&self.location, &what)))
    }

    /// Nothing to wait for: a process's write lock on the file ends with
    /// the process, and the busy timeout waits for a live one.
    fn await_other_runs(&self, _tables: &[&str], _waiting: &mut dyn FnMut(&str)) -> Result<()> {
        Ok(())
    }
}

/// Every SQLite file this process opened, with its role, so that an error
/// damage can cause is checked against them before it is shown
/// ([`damage_behind`]).
static OPENED: std::sync::Mutex<Vec<(String, std::path::PathBuf)>> =
    std::sync::Mutex::new(Vec::new());

/// Whether an error is one that a damaged file gives: SQLite's own
/// (`SQLITE_CORRUPT`, `SQLITE_NOTADB`), or keys that came back out of order
/// ([`crate::db::MaybeDamage`]).
fn damage_can_cause(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.is::<crate::db::MaybeDamage>()
            || matches!(
                e.downcast_ref::<rusqlite::Error>(),
                Some(rusqlite::Error::SqliteFailure(f, _))
                    if matches!(f.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            )
            || {
                let text = e.to_string();
                text.contains("database disk image is malformed")
                    || text.contains("file is not a database")
            }
    })
}

/// When `err` is one a damaged file gives and a SQLite file this process
/// opened fails `PRAGMA quick_check`: which file, what the check found, and
/// what to do.
pub fn damage_behind(err: &anyhow::Error) -> Option<String> {
    if !damage_can_cause(err) {
        return None;
    }
    let opened = OPENED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut seen = Vec::new();
    let mut found = Vec::new();
    for (role, path) in opened {
        if seen.contains(&path) {
            continue;
        }
        seen.push(path.clone());
        let Ok(conn) = rusqlite::Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        ) else {
            continue;
        };
        let db = Sqlite::wrap(conn, path.display().to_string(), None);
        if let Ok(Some(d)) = db.damage() {
            found.push(format!("{role}: {d}"));
        }
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// What to say of a damaged file: where, what the check found, what next.
pub(super) fn damaged(location: &str, what: &str) -> String {
    format!(
        "the SQLite file {location} is damaged (corrupt pages: {what}); this is damage to the file, not a difference in its data nor a write behind the fence. Stop, run `PRAGMA integrity_check` on it (sqlite3 '{location}' 'PRAGMA integrity_check') and restore the file from a backup or a copy taken before the damage"
    )
}

impl Sqlite {
    /// Opens an existing database file. A missing file is an error, never a
    /// new empty database. A connection opened to write refuses a rollback
    /// journal that a crash could leave half-applied (`OFF`, `MEMORY`) and runs
    /// with `synchronous=FULL`.
    pub(crate) fn open(path: &Path, access: Access, side: Side) -> Result<Sqlite> {
        if !path.exists() {
            bail!(
                "{side} database {} does not exist; check the url in the spec (paths are relative to the spec file)",
                path.display()
            );
        }
        if path.is_dir() {
            bail!(
                "{side} database {} is a directory, not a SQLite file",
                path.display()
            );
        }
        // Even a reader opens read-write (and then sets query_only): after a
        // crash mid-commit the next connection must roll the hot journal
        // back, which a read-only connection cannot do. SQLite falls back to
        // read-only by itself when the file is write-protected.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = rusqlite::Connection::open_with_flags(path, flags)
            .with_context(|| format!("opening {side} database {}", path.display()))?;
        let db = Sqlite::wrap(conn, path.display().to_string(), None);
        OPENED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((side.to_string(), path.to_path_buf()));
        db.configure(access, side)?;
        Ok(db)
    }

    pub(super) fn configure(&self, access: Access, side: Side) -> Result<()> {
        let c = &self.conn;
        c.busy_timeout(busy_timeout())?;
        // A misspelled column in double quotes must be an error, not a string.
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DML, false)?;
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DDL, false)?;
        // cutover's own writes never fire a foreign-key action (a cascade, a
        // SET NULL) the databases' applications did not ask for: replay
        // changes exactly the rows the journal names, and checks foreign-key
        // integrity itself.
        c.pragma_update(None, "foreign_keys", false)?;
        c.pragma_update(None, "recursive_triggers", false)?;
        // Reading the catalogue proves the file is a database; a full
        // integrity check would cost a scan of every table.
        let probe: rusqlite::Result<i64> =
            c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0));
        if let Err(e) = probe {
            let locked = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::DatabaseBusy || f.code == rusqlite::ErrorCode::DatabaseLocked);
            let why = if locked {
                format!(
                    "{side} database {} is locked by another process (waited {} ms); retry when it is done, or raise CUTOVER_BUSY_TIMEOUT_MS",
                    self.location,
                    busy_timeout().as_millis()
                )
            } else {
                format!(
                    "{side} database {} could not be read; is it a SQLite database?",
                    self.location
                )
            };
            return Err(anyhow::Error::new(e).context(why));
        }
        if access == Access::Read {
            c.pragma_update(None, "query_only", true)?;
        }
        if access == Access::Write {
            let mode = self.journal_mode()?;
            if mode.eq_ignore_ascii_case("off") || mode.eq_ignore_ascii_case("memory") {
                bail!(
                    "{side} database {} uses journal_mode={mode}: a crash there would leave half a batch behind; set PRAGMA journal_mode=WAL (or DELETE) first",
                    self.location
                );
            }
            c.pragma_update(None, "synchronous", "FULL")?;
        }
        Ok(())
    }

    pub(super) fn journal_mode(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))?)
    }

    pub(super) fn synchronous(&self) -> Result<&'static str> {
        let n: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        Ok(match n {
            0 => "OFF",
            1 => "NORMAL",
            2 => "FULL",
            _ => "EXTRA",
        })
    }

    /// Creates a new database file from a script (drill fixtures).
    pub(crate) fn create(path: &Path, script: &str) -> Result<()> {
        let conn = rusqlite::Connection::open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        conn.execute_batch(script)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(())
    }

    /// A new database in a temporary folder, removed with the returned
    /// handle; `shown` is the path messages name (the CSV file it holds).
    pub(crate) fn temporary(script: &str, shown: &Path) -> Result<Sqlite> {
        let dir = tempfile::tempdir().context("creating a temporary folder")?;
        let path = dir.path().join("snapshot.db");
        Sqlite::create(&path, script)?;
        let conn = rusqlite::Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "OFF")?;
        conn.pragma_update(None, "synchronous", "OFF")?;
        let db = Sqlite::wrap(conn, shown.display().to_string(), Some(dir));
        db.conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DML, false)?;
        Ok(db)
    }
}
