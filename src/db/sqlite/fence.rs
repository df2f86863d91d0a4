//! The write fence on SQLite: BEFORE triggers that refuse every write, the
//! guarded fence row, and probes from another connection.

use anyhow::{Context, Result};

use super::*;
use crate::db::transaction::Transaction;

impl Fence for Sqlite {
    /// Nothing to do: the write transaction (`BEGIN IMMEDIATE`) already
    /// holds the database's one write lock, taken after any writer in
    /// flight committed.
    fn drain_writers(&self, _tables: &[&str]) -> Result<()> {
        Ok(())
    }

    /// SQLite's `data_version`: it moves on any commit by another
    /// connection, in any process.
    fn change_token(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    /// Installs the fence triggers on one table. Whatever already goes by
    /// their names is dropped first: a trigger planted under a fence
    /// trigger's name must not pass for the fence.
    fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()> {
        self.fence_from(FENCE_TRIGGERS, table, message)
    }

    /// Guards the fence row (`_cutover_fence`): once written it cannot be
    /// changed, deleted or replaced. SQLite has no statement that fires on
    /// a schema change: the fingerprint covers the definitions of cutover's
    /// tables instead.
    fn install_fence_guard(&self, row_message: &str, _ddl_message: &str) -> Result<Option<String>> {
        self.fence_from(FENCE_GUARD, "_cutover_fence", row_message)?;
        Ok(None)
    }

    /// The fence's triggers call no function of their own on SQLite.
    fn remove_fence(&self, tables: &[&str], _keep_functions: Option<&[String]>) -> Result<()> {
        for t in tables.iter().copied().chain(["_cutover_fence"]) {
            self.remove_fence_triggers(t)?;
        }
        if self.has_table("_cutover_fence")? {
            self.conn.execute("DELETE FROM _cutover_fence", [])?;
        }
        Ok(())
    }

    /// Tries an insert, an update and a delete on `table` through this
    /// connection, each inside a transaction that is always rolled back:
    /// `(statement, Ok(rows written) | Err(refusal))`. An update or delete on
    /// an empty table writes nothing and proves nothing (`Ok(0)`).
    fn probe_writes(&self, table: &str) -> Result<Vec<Probe>> {
        let t = quote_ident(table);
        let first = self
            .table_columns(table)?
            .into_iter()
            .next()
            .map(|c| quote_ident(&c.name))
            .unwrap_or_else(|| "rowid".into());
        let probes = [
            ("insert", format!("INSERT INTO {t} DEFAULT VALUES")),
            (
                "update",
                format!(
                    "UPDATE {t} SET {first} = {first} WHERE {first} IS (SELECT {first} FROM {t} LIMIT 1)"
                ),
            ),
            (
                "delete",
                format!("DELETE FROM {t} WHERE {first} IS (SELECT {first} FROM {t} LIMIT 1)"),
            ),
        ];
        let mut out = Vec::new();
        for (what, sql) in probes {
            // A deferred `BEGIN`: the probe takes the write lock only when
            // its statement writes, as an application's would.
            let probe = Transaction::begin(self, false)?;
            let r = self.conn.execute(&sql, []);
            probe.rollback();
            out.push(Probe {
                write: what,
                outcome: r.map_err(|e| e.to_string()),
            });
        }
        Ok(out)
    }
}

impl Sqlite {
    /// How many of the three fence triggers of a table exist.
    pub(super) fn fence_triggers(&self, table: &str) -> Result<usize> {
        self.count_triggers(&Self::trigger_names("fence", table))
    }

    pub(super) fn remove_fence_triggers(&self, table: &str) -> Result<()> {
        for n in Self::trigger_names("fence", table) {
            self.conn
                .execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote_ident(&n)))?;
        }
        Ok(())
    }

    pub(super) fn trigger_names(kind: &str, table: &str) -> [String; 3] {
        ["insert", "update", "delete"].map(|op| format!("_cutover_{kind}_{op}_{table}"))
    }

    pub(super) fn count_triggers(&self, names: &[String]) -> Result<usize> {
        self.with_schema(|s| names.iter().filter(|n| s.has("trigger", n)).count())
    }

    /// The fence's three triggers on `table` from `template`.
    pub(super) fn fence_from(&self, template: &str, table: &str, message: &str) -> Result<()> {
        self.remove_fence_triggers(table)?;
        let [ins, upd, del] = Self::trigger_names("fence", table).map(|n| quote_ident(&n));
        let sql = template
            .replace("{{ins}}", &ins)
            .replace("{{upd}}", &upd)
            .replace("{{del}}", &del)
            .replace("{{table}}", &quote_ident(table))
            .replace("{{message}}", &quote_literal(message));
        self.grow_cache(&sql)?;
        self.conn
            .execute_batch(&sql)
            .with_context(|| format!("installing fence triggers on '{table}'"))
    }
}
