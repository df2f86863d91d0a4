//! Drill fixtures: running SQL text, and a whole-database snapshot to
//! compare before and after a crash.

use anyhow::{Context, Result};

use super::*;

impl Fixtures for Sqlite {
    /// Runs fixture SQL (drill set-up and the application's writes).
    fn execute_script(&self, sql: &str) -> Result<()> {
        self.conn
            .execute_batch(sql)
            .with_context(|| format!("running SQL on {}", self.location))
    }

    /// Every table of the database (user and control tables, and SQLite's
    /// `sqlite_sequence`), each as its sorted rows in `quote()` form, leaving
    /// out timestamp columns (`at`, `*_at`). Drills compare these before and after
    /// a crash.
    fn snapshot(&self) -> Result<Vec<(String, Vec<String>)>> {
        let mut out = Vec::new();
        let tables: Vec<String> = {
            let mut st = self
                .conn
                .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?;
            let rows = st.query_map([], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for t in tables {
            let cols: Vec<String> = self
                .table_columns(&t)?
                .into_iter()
                .map(|c| c.name)
                .filter(|n| n != "at" && !n.ends_with("_at"))
                .collect();
            if cols.is_empty() {
                continue;
            }
            let expr = cols
                .iter()
                .map(|c| format!("quote({})", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(" || ',' || ");
            let mut st = self
                .conn
                .prepare(&format!("SELECT {expr} FROM {}", quote_ident(&t)))?;
            let mut rows: Vec<String> = st
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            rows.sort();
            out.push((t, rows));
        }
        Ok(out)
    }
}
