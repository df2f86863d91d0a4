//! How far load and sync got: `_cutover_load`, the sync cursor and its
//! provenance, the source schema sync saw and the columns it added.

use anyhow::Result;
use rusqlite::{OptionalExtension, params};

use super::*;

impl Progress for Sqlite {
    /// Nothing to wait for: a process's write lock on the file ends with
    /// the process, and the busy timeout waits for a live one.
    fn await_other_runs(&self, _tables: &[&str], _waiting: &mut dyn FnMut(&str)) -> Result<()> {
        Ok(())
    }

    fn ensure_control_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(CONTROL_DDL)?)
    }

    fn ensure_sync_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(SYNC_DDL)?)
    }

    /// The load checkpoint of a table: `(last key as JSON, rows, done)`.
    fn load_checkpoint(&self, tbl: &str) -> Result<Option<(Option<String>, i64, bool)>> {
        if !self.has_table("_cutover_load")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT last_key, rows, done FROM _cutover_load WHERE tbl = ?1",
                [tbl],
                |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? != 0)),
            )
            .optional()?)
    }

    fn set_load_checkpoint(
        &self,
        tbl: &str,
        last_key: Option<&str>,
        rows: i64,
        done: bool,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO _cutover_load (tbl, last_key, rows, done) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (tbl) DO UPDATE SET last_key = excluded.last_key, rows = excluded.rows,
                 done = excluded.done, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
            )?
            .execute(params![tbl, last_key, rows, done])?;
        Ok(())
    }

    /// The sync cursor of a table: `(last watermark, last key JSON)` of the
    /// last committed batch.
    fn sync_cursor(&self, tbl: &str) -> Result<Option<(Value, String)>> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(None);
        }
        let r = self
            .conn
            .query_row(
                "SELECT last_watermark, last_key FROM _cutover_cursor WHERE tbl = ?1 ORDER BY batch_no DESC LIMIT 1",
                [tbl],
                |r| Ok((cell(r.get_ref(0)?).to_value(), r.get::<_, String>(1)?)),
            )
            .optional()?;
        Ok(r)
    }

    /// Records a committed sync batch, which advances the cursor.
    #[allow(
        clippy::too_many_arguments,
        reason = "one cursor row, column by column"
    )]
    fn record_sync_batch(
        &self,
        tbl: &str,
        batch: &str,
        rows: u64,
        changed: u64,
        first_watermark: &Value,
        last_watermark: &Value,
        last_key: &str,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO _cutover_cursor (tbl, batch_no, batch, rows, changed, first_watermark, last_watermark, last_key)
             VALUES (?1, (SELECT coalesce(max(batch_no), 0) + 1 FROM _cutover_cursor WHERE tbl = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
            params![tbl, batch, rows as i64, changed as i64, Bind(first_watermark), Bind(last_watermark), last_key],
        )?;
        Ok(())
    }

    /// Whether a batch with this content digest was committed for a table.
    fn sync_batch_seen(&self, tbl: &str, batch: &str) -> Result<bool> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(false);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM _cutover_cursor WHERE tbl = ?1 AND batch = ?2",
                [tbl, batch],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Every committed sync batch of a table (provenance):
    /// `(batch_no, rows, changed, first watermark, last watermark, committed_at)`.
    fn sync_batches(&self, tbl: &str) -> Result<Vec<SyncBatch>> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare(
            "SELECT batch_no, rows, changed, first_watermark, last_watermark, committed_at FROM _cutover_cursor WHERE tbl = ?1 ORDER BY batch_no",
        )?;
        let rows = st.query_map([tbl], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                cell(r.get_ref(3)?).to_value(),
                cell(r.get_ref(4)?).to_value(),
                r.get(5)?,
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The source column types recorded by the last sync: `(column, type)`.
    fn recorded_source_schema(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_source_schema")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare(
            "SELECT column, decl_type FROM _cutover_source_schema WHERE tbl = ?1 ORDER BY column",
        )?;
        let rows = st.query_map([tbl], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn record_source_schema(&self, tbl: &str, cols: &[ColumnInfo]) -> Result<()> {
        self.conn
            .execute("DELETE FROM _cutover_source_schema WHERE tbl = ?1", [tbl])?;
        for c in cols {
            self.conn.execute(
                "INSERT INTO _cutover_source_schema (tbl, column, decl_type) VALUES (?1, ?2, ?3)",
                params![tbl, c.name, c.decl_type],
            )?;
        }
        Ok(())
    }

    /// Columns `sync --evolve` added: `(source column, target column)`.
    fn evolved_columns(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_evolved")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare("SELECT source_column, target_column FROM _cutover_evolved WHERE tbl = ?1 ORDER BY added_at, source_column")?;
        let rows = st.query_map([tbl], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Adds a column to a target table and records it as evolved.
    fn evolve_column(&self, tbl: &str, table: &str, column: &str, decl_type: &str) -> Result<()> {
        let ty = if decl_type
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == ' ' || c == '(' || c == ')' || c == ',')
        {
            decl_type
        } else {
            ""
        };
        self.conn.execute_batch(&format!(
            "ALTER TABLE {} ADD COLUMN {} {ty}",
            quote_ident(table),
            quote_ident(column)
        ))?;
        self.conn.execute(
            "INSERT INTO _cutover_evolved (tbl, source_column, target_column) VALUES (?1, ?2, ?2)",
            params![tbl, column],
        )?;
        Ok(())
    }
}
