//! [`Connection`] on MySQL and MariaDB: transactions and savepoints, what
//! the server says of how it commits, foreign keys suspended for a write
//! transaction, and the wait for another run's session.
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

    /// Refused until MySQL can be a target: only a run that writes a
    /// database waits for another's session.
    fn await_other_runs(&self, _tables: &[&str], _waiting: &mut dyn FnMut(&str)) -> Result<()> {
        bail!(
            "{}: {}",
            self.shown(),
            super::not_yet("writing a MySQL database with load or replay")
        )
    }
}

impl MySql {
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
