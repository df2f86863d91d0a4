//! What drills and tests need of a database they built: run fixture SQL,
//! and compare the whole schema before and after.

use anyhow::{Context, Result};

use super::{Postgres, quote_ident};
use crate::db::{Catalogue, Fixtures};

impl Fixtures for Postgres {
    /// Runs SQL text as it is: several statements, no parameters. A `SET`
    /// in it outlives it; fixtures that need one use `SET LOCAL`.
    fn execute_script(&self, sql: &str) -> Result<()> {
        self.client()?
            .batch_execute(sql)
            .with_context(|| format!("running SQL on {}", self.shown))
    }

    /// Every table of the schema (cutover's own included), each as its
    /// sorted rows, each row its values as SQL literals (`quote_nullable`)
    /// joined by commas, leaving out timestamp columns (`at`, `*_at`).
    fn snapshot(&self) -> Result<Vec<(String, Vec<String>)>> {
        let tables: Vec<String> = self
            .client()?
            .query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                 ORDER BY c.relname COLLATE \"C\"",
                &[&self.schema],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut out = Vec::new();
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
                .map(|c| format!("quote_nullable({})", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(", ");
            let text = format!("SELECT concat_ws(',', {expr}) FROM {}", self.qualified(&t));
            let mut rows: Vec<String> = self
                .client()?
                .query(text.as_str(), &[])?
                .iter()
                .map(|r| r.get(0))
                .collect();
            rows.sort();
            out.push((t, rows));
        }
        Ok(out)
    }
}
