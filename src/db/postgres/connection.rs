//! The connection: transactions and savepoints, the change token, how the
//! server commits, and the clock the control tables use.
//!
//! A write transaction is `REPEATABLE READ`: what it reads is one snapshot
//! until it commits, and a row another transaction changed since is an
//! error when written, never overwritten. Unlike SQLite's `BEGIN IMMEDIATE`
//! it takes no lock up front; fencing other writers is the fence's job.

use anyhow::{Context, Result, bail};

use super::Postgres;
use crate::db::transaction::Step;
use crate::db::{Connection, Durability, Facts};

impl Postgres {
    /// What messages call the database: its URL without the password.
    pub fn location(&self) -> &str {
        &self.shown
    }
}

impl Connection for Postgres {
    /// A standby (in recovery) cannot be written; how the server commits
    /// is its own settings: `synchronous_commit` (when a commit is on
    /// disk), `fsync` (whether the log is flushed at all) and `wal_level`.
    fn facts(&self) -> Result<Facts> {
        let row = self.client()?.query_one(
            "SELECT pg_is_in_recovery(), current_setting('synchronous_commit'),
                    current_setting('fsync'), current_setting('wal_level')",
            &[],
        )?;
        Ok(Facts {
            read_only: row.get(0),
            durability: Durability {
                settings: vec![
                    ("synchronous_commit", row.get(1)),
                    ("fsync", row.get(2)),
                    ("wal_level", row.get(3)),
                ],
            },
            security: self.security()?,
            identity: self.identity()?,
        })
    }

    /// A write transaction is `REPEATABLE READ` and runs replay's hold on
    /// the source's side effects first, when one is set; a read
    /// transaction is `REPEATABLE READ READ ONLY`. A commit undoes that
    /// hold inside the transaction first, so what commits leaves the
    /// source's triggers as they were.
    fn transaction(&self, step: Step) -> Result<()> {
        match step {
            Step::BeginWrite => {
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
            Step::BeginRead => self
                .client()?
                .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                .with_context(|| format!("starting a read transaction on {}", self.shown)),
            Step::Commit => {
                let hold = self.hold.borrow();
                let restore = hold.as_ref().map_or("", |(_, r)| r.as_str());
                self.client()?
                    .batch_execute(&format!("{restore} COMMIT"))
                    .with_context(|| format!("committing to {}", self.shown))
            }
            // Outside a transaction ROLLBACK is only a warning.
            Step::Rollback => {
                if let Ok(mut c) = self.client() {
                    let _ = c.batch_execute("ROLLBACK");
                }
                Ok(())
            }
            Step::Savepoint => Ok(self.client()?.batch_execute("SAVEPOINT cutover_batch")?),
            Step::DeferForeignKeys => Ok(self
                .client()?
                .batch_execute("SET CONSTRAINTS ALL DEFERRED")
                .with_context(|| format!("deferring foreign keys on {}", self.shown))?),
            Step::Release => Ok(self.client()?.batch_execute("RELEASE cutover_batch")?),
            Step::RollbackSavepoint => {
                if let Ok(mut c) = self.client() {
                    let _ = c.batch_execute("ROLLBACK TO cutover_batch; RELEASE cutover_batch");
                }
                Ok(())
            }
        }
    }

    /// As a replica session (`SET LOCAL session_replication_role =
    /// replica`) where the role may set it (a superuser, or a role granted
    /// `SET` on the parameter): the triggers that enforce foreign keys, and
    /// the application's ordinary triggers, do not fire; cutover's journal
    /// and fence triggers (enabled ALWAYS) still do. Resumed (`origin`),
    /// the application's triggers fire again. Any other role gets its
    /// deferrable foreign keys deferred (never checked: the transaction is
    /// rolled back); a key that is not deferrable still refuses a write,
    /// which the rehearsal undoes in its savepoint and tries another; and
    /// a refusal naming the constraint when one on these tables has an
    /// action (CASCADE, SET NULL, SET DEFAULT), which would act.
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
                "{}: foreign key {fk} would act on cutover's writes: its role {} may not set session_replication_role, and the key has an action (CASCADE, SET NULL or SET DEFAULT). Run as a superuser, or `GRANT SET ON PARAMETER session_replication_role TO {}` (PostgreSQL 15), or give the key NO ACTION; nothing was written",
                self.shown,
                self.role()?,
                self.role()?
            );
        }
        Ok(())
    }

    /// PostgreSQL checks its pages itself (and names the relation when one
    /// fails); cutover has no check of its own to add.
    fn damage(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// Polls `pg_locks` for other sessions with this session's
    /// `application_name` (cutover's, unless the URL names another) that
    /// hold a write lock on these tables or on `_cutover_load`, until none
    /// is left or `CUTOVER_BUSY_TIMEOUT_MS` (10 s) has passed. A client
    /// killed mid-run leaves its backend to end only when the server notices
    /// the closed connection; what that transaction did is then rolled back,
    /// or committed if the kill came while it committed, and the checkpoint
    /// read after the wait says which.
    fn await_other_runs(&self, tables: &[&str], waiting: &mut dyn FnMut(&str)) -> Result<()> {
        let mut names: Vec<String> = tables.iter().map(|t| self.qualified(t)).collect();
        names.push(self.qualified("_cutover_load"));
        let ms = std::env::var("CUTOVER_BUSY_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(10_000);
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut told = false;
        loop {
            let mut c = self.client()?;
            c.batch_execute("SELECT pg_stat_clear_snapshot()")?;
            let rows = c.query(
                "SELECT format('pid %s (application_name %L, state %L, transaction started %s) holding %s',
                               a.pid, a.application_name, coalesce(a.state, ''),
                               coalesce(to_char(a.xact_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), '-'),
                               string_agg(DISTINCT l.mode || ' on ' || l.relation::regclass::text, ', '))
                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                 WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
                   AND l.relation IN (SELECT to_regclass(n) FROM unnest($1::text[]) AS n)
                   AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
                   AND a.application_name = current_setting('application_name')
                 GROUP BY a.pid, a.application_name, a.state, a.xact_start
                 ORDER BY a.pid",
                &[&names],
            )?;
            drop(c);
            let held: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
            if held.is_empty() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                bail!(
                    "{}: other cutover sessions still write these tables after {ms} ms (CUTOVER_BUSY_TIMEOUT_MS): {}. If they belong to a run that was stopped, end them with SELECT pg_terminate_backend(pid); if a run is live, let it finish; then run this again. Nothing was written",
                    self.shown,
                    held.join("; ")
                );
            }
            if !told {
                waiting(&format!(
                    "waiting for another cutover session to end before reading the checkpoint (a stopped run's, until the server notices its client is gone; at most {ms} ms): {}",
                    held.join("; ")
                ));
                told = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Postgres {
    /// The server's version, its system identifier and the database, for
    /// a report's fingerprint ([`Facts::identity`]).
    fn identity(&self) -> Result<Vec<(String, String)>> {
        let mut client = self.client()?;
        let row = client
            .query_one(
                "SELECT current_setting('server_version'), current_database()::text",
                &[],
            )
            .with_context(|| format!("reading the server's version on {}", self.shown))?;
        let (version, database): (String, String) = (row.get(0), row.get(1));
        // pg_control_system() is the superuser's (and pg_monitor's) by
        // default: a plain role gets the reason instead.
        let system = match client.query_one(
            "SELECT system_identifier::text FROM pg_control_system()",
            &[],
        ) {
            Ok(r) => r.get::<_, String>(0),
            Err(e) => format!(
                "not readable by this role ({})",
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_string())
            ),
        };
        Ok(vec![
            ("engine".into(), format!("PostgreSQL {version}")),
            ("system_identifier".into(), system),
            ("database".into(), database),
        ])
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
            transport.push_str(&format!("; password from {}", from.shown("password file")));
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

    /// The foreign keys declared on or referring to these tables that
    /// would act on the rehearsal's writes: an action on delete or update
    /// (CASCADE, SET NULL, SET DEFAULT), each as `name (child → parent)`.
    /// A key that only refuses (NO ACTION or RESTRICT, DEFERRABLE or not)
    /// binds nothing: the rehearsal writes in savepoints and takes
    /// another row or value where such a key refuses one.
    fn binding_foreign_keys(&self, tables: &[&str]) -> Result<Vec<String>> {
        let names: Vec<String> = tables.iter().map(|t| self.qualified(t)).collect();
        let rows = self.client()?.query(
            "SELECT DISTINCT format('%I (%s → %s)', c.conname, c.conrelid::regclass, c.confrelid::regclass)
             FROM pg_constraint c, unnest($1::text[]) AS t(name)
             WHERE c.contype = 'f' AND to_regclass(t.name) IN (c.conrelid, c.confrelid)
               AND (c.confdeltype NOT IN ('a', 'r') OR c.confupdtype NOT IN ('a', 'r'))
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
