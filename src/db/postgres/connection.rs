//! The connection: transactions and savepoints, the change token, how the
//! server commits, and the clock the control tables use.
//!
//! A write transaction is `REPEATABLE READ`: what it reads is one snapshot
//! until it commits, and a row another transaction changed since is an
//! error when written, never overwritten. Unlike SQLite's `BEGIN IMMEDIATE`
//! it takes no lock up front; fencing other writers is the fence's job.

use anyhow::{Context, Result};

use super::Postgres;
use crate::db::{Connection, Durability};

impl Connection for Postgres {
    fn location(&self) -> &str {
        &self.shown
    }

    /// A standby (in recovery) cannot be written.
    fn is_read_only(&self) -> Result<bool> {
        Ok(self
            .client()?
            .query_one("SELECT pg_is_in_recovery()", &[])?
            .get(0))
    }

    /// `journal_mode` is the write-ahead log (`wal`, or `wal, fsync off`
    /// when the server does not flush it); `synchronous` is
    /// `synchronous_commit`.
    fn durability(&self) -> Result<Durability> {
        let row = self.client()?.query_one(
            "SELECT current_setting('fsync'), current_setting('synchronous_commit')",
            &[],
        )?;
        let fsync: String = row.get(0);
        Ok(Durability {
            journal_mode: if fsync == "on" {
                "wal".to_string()
            } else {
                "wal, fsync off".to_string()
            },
            synchronous: row.get(1),
        })
    }

    fn begin_write(&self) -> Result<()> {
        let hold = self.hold.borrow();
        let setup = hold.as_ref().map_or("", |(s, _)| s.as_str());
        let mut c = self.client()?;
        let r = c
            .batch_execute(&format!("BEGIN ISOLATION LEVEL REPEATABLE READ; {setup}"))
            .with_context(|| format!("starting a write transaction on {}", self.shown));
        if r.is_err() {
            let _ = c.batch_execute("ROLLBACK");
        }
        r
    }

    fn begin_read(&self) -> Result<()> {
        self.client()?
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .with_context(|| format!("starting a read transaction on {}", self.shown))
    }

    fn commit(&self) -> Result<()> {
        // Replay's hold on the source's triggers is undone inside the
        // transaction, so what commits leaves them as they were.
        let hold = self.hold.borrow();
        let restore = hold.as_ref().map_or("", |(_, r)| r.as_str());
        self.client()?
            .batch_execute(&format!("{restore} COMMIT"))
            .with_context(|| format!("committing to {}", self.shown))
    }

    fn rollback(&self) {
        // Outside a transaction ROLLBACK is only a warning.
        if let Ok(mut c) = self.client() {
            let _ = c.batch_execute("ROLLBACK");
        }
    }

    fn savepoint(&self) -> Result<()> {
        Ok(self.client()?.batch_execute("SAVEPOINT cutover_batch")?)
    }

    fn release(&self) -> Result<()> {
        Ok(self.client()?.batch_execute("RELEASE cutover_batch")?)
    }

    fn rollback_savepoint(&self) {
        if let Ok(mut c) = self.client() {
            let _ = c.batch_execute("ROLLBACK TO cutover_batch; RELEASE cutover_batch");
        }
    }

    /// The statement's time in UTC, to the millisecond, as SQLite's
    /// control tables write it (`2024-03-15T13:45:00.123Z`).
    fn now(&self) -> Result<String> {
        Ok(self
            .client()?
            .query_one(
                "SELECT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
                &[],
            )?
            .get(0))
    }
}

/// When `err` is PostgreSQL refusing a row — an integrity constraint (class
/// 23: unique, not null, check, foreign key, exclusion), a value the column
/// cannot hold (class 22) or a trigger raising an error — the server's
/// message; the apply engine reports it as a
/// conflict on that row rather than as a failure of the tool.
pub fn constraint_violation(err: &anyhow::Error) -> Option<String> {
    err.chain().find_map(|e| {
        let db = e.downcast_ref::<tokio_postgres::Error>()?.as_db_error()?;
        let code = db.code().code();
        // Class 22 is a value the column cannot hold (too long for a
        // varchar, past a numeric's precision): a conflict on the row too.
        (code.starts_with("23") || code.starts_with("22") || code == "P0001")
            .then(|| db.message().to_string())
    })
}
