//! [`Connection`] on MySQL and MariaDB: transactions and savepoints, what
//! the server says of how it commits, foreign keys suspended for a write
//! transaction, and one run at a time on a database (a named lock).
//!
//! A write transaction is `REPEATABLE READ` (InnoDB's default, set for the
//! session by [`super::client`]); a read transaction starts `WITH
//! CONSISTENT SNAPSHOT, READ ONLY`, so every statement of it sees one
//! snapshot from its start. MySQL commits every schema change at once
//! (`transactional_ddl: false` in the registry): the installs that run
//! DDL run outside the data's transactions and are written to be
//! completed by a rerun.

use anyhow::{Result, bail};
use mysql::prelude::Queryable;

use super::MySql;
use crate::db::transaction::Step;
use crate::db::{Access, Connection, Durability, Facts, Security};

impl MySql {
    /// What messages call the database: its URL without the password.
    pub fn location(&self) -> &str {
        self.shown()
    }
}

impl Connection for MySql {
    /// A server that is `read_only` (a replica) cannot be written by a
    /// user without `SUPER`; how it commits is
    /// `innodb_flush_log_at_trx_commit` (1: each commit is on disk) and
    /// `sync_binlog`, with the binary log's format.
    fn facts(&self) -> Result<Facts> {
        let row: Option<(i64, String, String, String)> = self
            .conn()?
            .query_first(
                "SELECT @@GLOBAL.read_only, CAST(@@GLOBAL.innodb_flush_log_at_trx_commit AS CHAR),
                        CAST(@@GLOBAL.sync_binlog AS CHAR), CAST(@@GLOBAL.binlog_format AS CHAR)",
            )
            .map_err(|e| self.failed("reading the server's settings", &e))?;
        let (read_only, flush, sync_binlog, binlog_format) =
            row.unwrap_or((0, String::new(), String::new(), String::new()));
        Ok(Facts {
            read_only: read_only != 0,
            durability: Durability {
                settings: vec![
                    ("innodb_flush_log_at_trx_commit", flush),
                    ("sync_binlog", sync_binlog),
                    ("binlog_format", binlog_format),
                ],
            },
            security: Some(Security {
                transport: self.transport()?,
                warnings: self.warnings().to_vec(),
            }),
            identity: self.identity()?,
        })
    }

    fn transaction(&self, step: Step) -> Result<()> {
        match step {
            Step::BeginWrite if self.access() == Access::Read => bail!(
                "{}: a write transaction on a database opened for reading",
                self.shown()
            ),
            Step::BeginWrite | Step::BeginRead => self.begin(),
            Step::Commit => self.commit(),
            Step::Rollback => {
                self.rollback();
                Ok(())
            }
            Step::Savepoint => self
                .execute("SAVEPOINT cutover_batch", Vec::new())
                .map(drop),
            Step::Release => self
                .execute("RELEASE SAVEPOINT cutover_batch", Vec::new())
                .map(drop),
            Step::RollbackSavepoint => {
                let _ = self.execute("ROLLBACK TO SAVEPOINT cutover_batch", Vec::new());
                let _ = self.execute("RELEASE SAVEPOINT cutover_batch", Vec::new());
                Ok(())
            }
            // MySQL defers no foreign key: its keys are not `deferrable`.
            Step::DeferForeignKeys => Ok(()),
        }
    }

    /// `foreign_key_checks = 0` for the session: InnoDB then neither
    /// checks a foreign key nor runs its action (no cascade, no `SET
    /// NULL`), for any table. Any user may set it for its own session.
    fn suspend_foreign_keys(&self, _tables: &[&str], suspend: bool) -> Result<()> {
        self.execute(
            if suspend {
                "SET SESSION foreign_key_checks = 0"
            } else {
                "SET SESSION foreign_key_checks = 1"
            },
            Vec::new(),
        )
        .map(drop)
    }

    /// InnoDB checks its pages itself and stops the server on a corrupt
    /// one; cutover has no check of its own to add.
    fn damage(&self) -> Result<Option<String>> {
        Ok(None)
    }

    /// One run at a time on a database: the named lock [`MySql::run_lock`]
    /// (`GET_LOCK`), taken for this session until it ends. A killed run's
    /// session keeps it until the server notices its client is gone and
    /// rolls its transaction back (or, killed while committing, commits
    /// it), so the checkpoint read once it is taken says which. Waits up
    /// to `CUTOVER_BUSY_TIMEOUT_MS` (10 s), naming the session it waits
    /// for; the tables need no lock of their own.
    fn await_other_runs(&self, _tables: &[&str], waiting: &mut dyn FnMut(&str)) -> Result<()> {
        let ms = std::env::var("CUTOVER_BUSY_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(10_000);
        let name = self.run_lock();
        let take = |seconds: f64| -> Result<bool> {
            let got: Option<Option<i64>> = self
                .conn()?
                .exec_first("SELECT GET_LOCK(?, ?)", (name.as_str(), seconds))
                .map_err(|e| self.failed("taking cutover's lock on the database", &e))?;
            Ok(got.flatten() == Some(1))
        };
        if take(0.0)? {
            return Ok(());
        }
        let holder: Option<Option<i64>> = self
            .conn()?
            .exec_first("SELECT IS_USED_LOCK(?)", (name.as_str(),))
            .map_err(|e| self.failed("reading who holds cutover's lock", &e))?;
        let holder = holder
            .flatten()
            .map_or("a session that just ended".to_string(), |id| {
                format!("connection {id}")
            });
        waiting(&format!(
            "waiting for another cutover session ({holder}, holding lock '{name}') to end before reading the checkpoint (a stopped run's, until the server notices its client is gone; at most {ms} ms)"
        ));
        if take(ms as f64 / 1000.0)? {
            return Ok(());
        }
        bail!(
            "{}: another cutover session ({holder}) still holds lock '{name}' after {ms} ms (CUTOVER_BUSY_TIMEOUT_MS): one run at a time writes this database. If it belongs to a run that was stopped, end it with KILL and its id (SHOW PROCESSLIST); if a run is live, let it finish; then run this again. Nothing was written",
            self.shown()
        )
    }
}

impl MySql {
    /// The name of the lock one run of cutover holds on this database
    /// (`cutover:` and the database's name, or its digest when that is
    /// longer than a lock's name may be: 64 characters).
    pub fn run_lock(&self) -> String {
        let name = format!("cutover:{}", self.database());
        if name.chars().count() <= 64 {
            return name;
        }
        use sha2::Digest as _;
        let digest = hex::encode(sha2::Sha256::digest(self.database().as_bytes()));
        format!("cutover:{}", &digest[..56])
    }

    /// The server's version, its id and the database, for a report's
    /// fingerprint ([`Facts::identity`]).
    fn identity(&self) -> Result<Vec<(String, String)>> {
        let row: Option<(String, String, String)> = self
            .conn()?
            .query_first("SELECT VERSION(), CAST(@@server_id AS CHAR), DATABASE()")
            .map_err(|e| self.failed("reading the server's version", &e))?;
        let (version, server_id, database) = row.unwrap_or_default();
        let engine = if version.contains("MariaDB") {
            "MariaDB"
        } else {
            "MySQL"
        };
        Ok(vec![
            ("engine".into(), format!("{engine} {version}")),
            ("server_id".into(), server_id),
            ("database".into(), database),
        ])
    }
}
