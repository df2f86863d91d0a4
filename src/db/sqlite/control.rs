//! The control store on SQLite: its [`DIALECT`] (numbered `?n`
//! placeholders, `strftime` for the time, BINARY order already bytes,
//! watermarks kept as they are in untyped columns, the DDL of
//! `sql/sqlite/`; the write transaction's `BEGIN IMMEDIATE` already holds
//! the one write lock), and [`ControlSql`]: the store's statements
//! prepared once per connection, their values bound and read exactly as
//! stored.

use anyhow::{Context, Result};

use super::*;
use crate::db::control::{Dialect, Set, Statement, Watermarks};

pub static DIALECT: Dialect = Dialect {
    param: |n, _| format!("?{n}"),
    numbered: true,
    now: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    bytes: "",
    bigint: "INTEGER",
    watermarks: Watermarks::Native,
    lock_applied: None,
    // Looked up in the schema SQLite holds in memory, not by a scan of
    // `sqlite_schema`: a table (or view) has columns, an index has its own.
    upsert: crate::db::control::on_conflict,
    present: |n| {
        let names: Vec<String> = (1..=n).map(|i| format!("SELECT ?{i} AS n")).collect();
        format!(
            "SELECT count(*) FROM ({}) WHERE EXISTS (SELECT 1 FROM pragma_table_info(n))
                OR EXISTS (SELECT 1 FROM pragma_index_info(n))",
            names.join(" UNION ALL ")
        )
    },
    ddl: |set| match set {
        Set::Target => include_str!("../../../sql/sqlite/control.sql"),
        Set::Applied => include_str!("../../../sql/sqlite/applied.sql"),
        Set::Verdicts => include_str!("../../../sql/sqlite/verdicts.sql"),
        Set::Receipts => include_str!("../../../sql/sqlite/apply.sql"),
        Set::Sync => include_str!("../../../sql/sqlite/sync.sql"),
    },
};

/// The statement's text without the schema SQLite has no use for.
fn bare(st: &Statement) -> String {
    st.text().replace("{{schema}}.", "")
}

impl ControlSql for Sqlite {
    fn control_execute(&self, st: &Statement) -> Result<u64> {
        let text = bare(st);
        let what = || format!("writing cutover's control tables in {}", self.location);
        if st.is_script() {
            self.conn.execute_batch(&text).with_context(what)?;
            return Ok(0);
        }
        let params: Vec<Bind<'_>> = st.params().iter().map(Bind).collect();
        let n = self
            .conn
            .prepare_cached(&text)
            .and_then(|mut s| s.execute(rusqlite::params_from_iter(params)))
            .with_context(what)?;
        Ok(n as u64)
    }

    fn control_query(&self, st: &Statement) -> Result<Vec<Row>> {
        let text = bare(st);
        let params: Vec<Bind<'_>> = st.params().iter().map(Bind).collect();
        let mut s = self
            .conn
            .prepare_cached(&text)
            .with_context(|| format!("reading cutover's control tables in {}", self.location))?;
        let width = s.column_count();
        let rows = s.query_map(rusqlite::params_from_iter(params), |r| read_row(r, width))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
