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

    /// The server's own settings: `synchronous_commit` (when a commit is
    /// on disk), `fsync` (whether the log is flushed at all) and
    /// `wal_level`.
    fn durability(&self) -> Result<Durability> {
        let row = self.client()?.query_one(
            "SELECT current_setting('synchronous_commit'), current_setting('fsync'),
                    current_setting('wal_level')",
            &[],
        )?;
        Ok(Durability {
            settings: vec![
                ("synchronous_commit", row.get(0)),
                ("fsync", row.get(1)),
                ("wal_level", row.get(2)),
            ],
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

    /// As a replica session (`SET LOCAL session_replication_role =
    /// replica`) where the role may set it (a superuser, or a role granted
    /// `SET` on the parameter): the triggers that enforce foreign keys, and
    /// the application's ordinary triggers, do not fire; cutover's journal
    /// and fence triggers (enabled ALWAYS) still do. Resumed (`origin`),
    /// the application's triggers fire again. Any other role gets its
    /// deferrable foreign keys deferred (never checked: the transaction is
    /// rolled back), and a refusal naming the constraint when one on these
    /// tables is not deferrable or has an action (CASCADE, SET NULL, SET
    /// DEFAULT, RESTRICT), which no deferral stops.
    fn suspend_foreign_keys(&self, tables: &[&str], suspend: bool) -> Result<()> {
        if self.may_replicate()? {
            return self
                .client()?
                .batch_execute(if suspend {
                    "SET LOCAL session_replication_role = replica"
                } else {
                    "SET LOCAL session_replication_role = origin"
                })
                .with_context(|| format!("suspending foreign keys on {}", self.shown));
        }
        if !suspend {
            return Ok(());
        }
        self.client()?
            .batch_execute("SET CONSTRAINTS ALL DEFERRED")
            .with_context(|| format!("deferring foreign keys on {}", self.shown))?;
        let binding = self.binding_foreign_keys(tables)?;
        if let Some(fk) = binding.first() {
            anyhow::bail!(
                "{}: foreign key {fk} would be enforced or would act on cutover's writes: its role {} may not set session_replication_role, and the key is not DEFERRABLE or has an action. Run as a superuser, or `GRANT SET ON PARAMETER session_replication_role TO {}` (PostgreSQL 15), or make the key DEFERRABLE with NO ACTION; nothing was written",
                self.shown,
                self.role()?,
                self.role()?
            );
        }
        Ok(())
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

    /// PostgreSQL checks its pages itself (and names the relation when one
    /// fails); cutover has no check of its own to add.
    fn damage(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// The session's encryption as the server records it (`pg_stat_ssl`),
    /// the mode and what was checked of the certificate, where the password
    /// came from; a warning when the spec's URL holds the password.
    fn security(&self) -> Result<Option<crate::db::Security>> {
        use super::tls::Check;
        let row = self.client()?.query_one(
            "SELECT ssl, coalesce(version, ''), coalesce(cipher, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        ).with_context(|| format!("reading pg_stat_ssl on {}", self.shown))?;
        let encrypted: bool = row.get(0);
        let checked = match self.tls.check() {
            Check::Nothing => "the certificate not verified",
            Check::Chain => "the certificate's chain verified",
            Check::ChainAndName => "the certificate's chain and host name verified",
        };
        let mut transport = if encrypted {
            let version: String = row.get(1);
            let cipher: String = row.get(2);
            format!(
                "{} encrypted ({version}, {cipher}), sslmode={}, {checked}",
                self.server,
                self.tls.shown()
            )
        } else {
            format!(
                "{} NOT encrypted, sslmode={}{}",
                self.server,
                self.tls.mode.name(),
                if self.server.starts_with('/') {
                    " (a Unix socket is local: TLS is never used on it)"
                } else {
                    ""
                }
            )
        };
        if let Some(from) = &self.password_from {
            transport.push_str(&format!("; password from {}", from.shown()));
        }
        let mut warnings = Vec::new();
        if self.password_from == Some(super::url::PasswordFrom::Url) {
            warnings.push(super::url::password_warning(&self.shown));
        }
        Ok(Some(crate::db::Security {
            transport,
            warnings,
        }))
    }
}

impl Postgres {
    /// Whether this session may set `session_replication_role`: a
    /// superuser, or a role granted `SET` on it.
    pub(super) fn may_replicate(&self) -> Result<bool> {
        Ok(self
            .client()?
            .query_one(
                "SELECT has_parameter_privilege('session_replication_role', 'SET')",
                &[],
            )?
            .get(0))
    }

    /// The role this session runs as.
    pub(super) fn role(&self) -> Result<String> {
        Ok(self
            .client()?
            .query_one("SELECT current_user::text", &[])?
            .get(0))
    }

    /// The foreign keys declared on or referring to these tables that a
    /// deferral does not stop: not DEFERRABLE, or with an action on delete
    /// or update (CASCADE, SET NULL, SET DEFAULT, RESTRICT), each as
    /// `name (child → parent)`.
    fn binding_foreign_keys(&self, tables: &[&str]) -> Result<Vec<String>> {
        let names: Vec<String> = tables.iter().map(|t| self.qualified(t)).collect();
        let rows = self.client()?.query(
            "SELECT DISTINCT format('%I (%s → %s)', c.conname, c.conrelid::regclass, c.confrelid::regclass)
             FROM pg_constraint c, unnest($1::text[]) AS t(name)
             WHERE c.contype = 'f' AND to_regclass(t.name) IN (c.conrelid, c.confrelid)
               AND (NOT c.condeferrable OR c.confdeltype <> 'a' OR c.confupdtype <> 'a')
             ORDER BY 1",
            &[&names],
        )?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Deletes every row of `table` with no foreign key enforced or acted
    /// on (see [`Connection::suspend_foreign_keys`]); a role that may not
    /// suspend them is refused, before deleting, when a row of another
    /// table refers to one of them.
    pub(super) fn delete_all(&self, table: &str) -> Result<usize> {
        let text = format!("DELETE FROM {}", self.qualified(table));
        if self.may_replicate()? {
            let mut c = self.client()?;
            let was: String = c
                .query_one("SELECT current_setting('session_replication_role')", &[])?
                .get(0);
            c.batch_execute("SET LOCAL session_replication_role = replica")?;
            let n = c
                .execute(text.as_str(), &[])
                .with_context(|| format!("emptying '{table}' in {}", self.shown))?;
            c.batch_execute(&format!(
                "SET LOCAL session_replication_role = {}",
                super::quote_literal(&was)?
            ))?;
            return Ok(n as usize);
        }
        let referring = self.client()?.query(
            "SELECT c.conname::text, c.conrelid::regclass::text FROM pg_constraint c
             WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) AND c.conrelid <> c.confrelid
             ORDER BY 1",
            &[&self.qualified(table)],
        )?;
        for r in &referring {
            let (name, child): (String, String) = (r.get(0), r.get(1));
            let held: bool = self
                .client()?
                .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {child})"), &[])?
                .get(0);
            if held {
                anyhow::bail!(
                    "emptying '{table}' in {}: rows of {child} refer to it (foreign key {name}), and cutover's role {} may not set session_replication_role to empty it without the key refusing or cascading. Run as a superuser, or `GRANT SET ON PARAMETER session_replication_role TO {}` (PostgreSQL 15), or empty {child} and '{table}' yourself (TRUNCATE … ) and run `cutover load`; nothing was deleted",
                    self.shown,
                    self.role()?,
                    self.role()?
                );
            }
        }
        Ok(self
            .client()?
            .execute(text.as_str(), &[])
            .with_context(|| format!("emptying '{table}' in {}", self.shown))? as usize)
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
