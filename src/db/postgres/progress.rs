//! How far load and sync got: the target's control tables (`_cutover_load`
//! with the journal's identity and the fence's row), the sync cursor and its
//! provenance, the source schema sync saw and the columns it added.
//!
//! A sync watermark is any [`Value`], kept as a kind and a text that give
//! it back exactly (sql/postgres/sync.sql): JSON would lose a NaN and
//! PostgreSQL text cannot hold a NUL.

use anyhow::{Context, Result, bail};

use super::control::NOW;
use super::{Postgres, quote_ident};
use crate::db::{ColumnInfo, Progress, SyncBatch};
use crate::value::Value;

const CONTROL_DDL: &str = include_str!("../../../sql/postgres/control.sql");
const SYNC_DDL: &str = include_str!("../../../sql/postgres/sync.sql");

/// A watermark as `(kind, text)` (see sql/postgres/sync.sql).
pub fn watermark_text(v: &Value) -> (&'static str, Option<String>) {
    match v {
        Value::Null => ("null", None),
        Value::Integer(i) => ("integer", Some(i.to_string())),
        // Debug prints the shortest text that parses back to the same
        // double, and `inf`, `-inf`, `NaN`, `-0.0` as themselves.
        Value::Real(r) => ("real", Some(format!("{r:?}"))),
        Value::Text(t) if !t.contains('\0') => ("text", Some(t.clone())),
        Value::Text(t) => ("text_hex", Some(hex::encode(t.as_bytes()))),
        Value::TextBytes(b) => ("text_hex", Some(hex::encode(b))),
        Value::Blob(b) => ("blob", Some(hex::encode(b))),
        Value::Large(l) if l.text => ("text_hex", Some(hex::encode(&l.bytes))),
        Value::Large(l) => ("blob", Some(hex::encode(&l.bytes))),
        // Never a watermark: a kind `watermark_value` refuses.
        Value::Digested(d) => ("digested", Some(d.to_string())),
    }
}

/// The watermark a `(kind, text)` pair stands for.
pub fn watermark_value(kind: &str, text: Option<&str>) -> Result<Value> {
    let text = || text.with_context(|| format!("a watermark of kind '{kind}' without its text"));
    Ok(match kind {
        "null" => Value::Null,
        "integer" => Value::Integer(text()?.parse()?),
        "real" => Value::Real(text()?.parse()?),
        "text" => Value::Text(text()?.to_string()),
        "text_hex" => match String::from_utf8(hex::decode(text()?)?) {
            Ok(s) => Value::Text(s),
            Err(e) => Value::TextBytes(e.into_bytes()),
        },
        "blob" => Value::Blob(hex::decode(text()?)?),
        other => bail!("a watermark of unknown kind '{other}'"),
    })
}

fn watermark_of(r: &tokio_postgres::Row, kind: usize) -> Result<Value> {
    let k: String = r.get(kind);
    let t: Option<String> = r.get(kind + 1);
    watermark_value(&k, t.as_deref()).context("reading a sync watermark")
}

impl Progress for Postgres {
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

    /// Creates the target's control tables in the spec's schema: the
    /// journal's identity and its tables' registry, the fence row, the load
    /// checkpoint.
    fn ensure_control_tables(&self) -> Result<()> {
        self.ensure_tables(
            CONTROL_DDL,
            &[
                "_cutover_journal_id",
                "_cutover_journal_tables",
                "_cutover_fence",
                "_cutover_load",
            ],
            "cutover's control tables",
        )
    }

    fn ensure_sync_tables(&self) -> Result<()> {
        self.ensure_tables(
            SYNC_DDL,
            &[
                "_cutover_cursor",
                "_cutover_source_schema",
                "_cutover_evolved",
            ],
            "sync's control tables",
        )
    }

    /// The load checkpoint of a table: `(last key as JSON, rows, done)`.
    fn load_checkpoint(&self, tbl: &str) -> Result<Option<(Option<String>, i64, bool)>> {
        if !self.has_table("_cutover_load")? {
            return Ok(None);
        }
        Ok(self
            .ctl_opt(
                "SELECT last_key, rows, done FROM {{schema}}._cutover_load WHERE tbl = $1",
                &[&tbl],
            )?
            .map(|r| (r.get(0), r.get(1), r.get(2))))
    }

    fn set_load_checkpoint(
        &self,
        tbl: &str,
        last_key: Option<&str>,
        rows: i64,
        done: bool,
    ) -> Result<()> {
        let text = format!(
            "INSERT INTO {{{{schema}}}}._cutover_load (tbl, last_key, rows, done) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tbl) DO UPDATE SET last_key = excluded.last_key, rows = excluded.rows,
             done = excluded.done, updated_at = {NOW}"
        );
        self.ctl_execute(&text, &[&tbl, &last_key, &rows, &done])?;
        Ok(())
    }

    /// The sync cursor of a table: `(last watermark, last key JSON)` of the
    /// last committed batch.
    fn sync_cursor(&self, tbl: &str) -> Result<Option<(Value, String)>> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(None);
        }
        let Some(r) = self.ctl_opt(
            "SELECT last_watermark_kind, last_watermark, last_key FROM {{schema}}._cutover_cursor
             WHERE tbl = $1 ORDER BY batch_no DESC LIMIT 1",
            &[&tbl],
        )?
        else {
            return Ok(None);
        };
        Ok(Some((watermark_of(&r, 0)?, r.get(2))))
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
        let (rows, changed) = (rows as i64, changed as i64);
        let (fk, ft) = watermark_text(first_watermark);
        let (lk, lt) = watermark_text(last_watermark);
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_cursor (tbl, batch_no, batch, rows, changed,
               first_watermark_kind, first_watermark, last_watermark_kind, last_watermark, last_key)
             VALUES ($1, (SELECT coalesce(max(batch_no), 0) + 1 FROM {{schema}}._cutover_cursor WHERE tbl = $1),
                     $2, $3, $4, $5, $6, $7, $8, $9)",
            &[&tbl, &batch, &rows, &changed, &fk, &ft, &lk, &lt, &last_key],
        )?;
        Ok(())
    }

    /// Whether a batch with this content digest was committed for a table.
    fn sync_batch_seen(&self, tbl: &str, batch: &str) -> Result<bool> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(false);
        }
        Ok(self
            .ctl_opt(
                "SELECT 1 FROM {{schema}}._cutover_cursor WHERE tbl = $1 AND batch = $2",
                &[&tbl, &batch],
            )?
            .is_some())
    }

    /// Every committed sync batch of a table (provenance):
    /// `(batch_no, rows, changed, first watermark, last watermark, committed_at)`.
    fn sync_batches(&self, tbl: &str) -> Result<Vec<SyncBatch>> {
        if !self.has_table("_cutover_cursor")? {
            return Ok(Vec::new());
        }
        self.ctl_query(
            "SELECT batch_no, rows, changed, first_watermark_kind, first_watermark,
                    last_watermark_kind, last_watermark, committed_at
             FROM {{schema}}._cutover_cursor WHERE tbl = $1 ORDER BY batch_no",
            &[&tbl],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.get(0),
                r.get(1),
                r.get(2),
                watermark_of(r, 3)?,
                watermark_of(r, 5)?,
                r.get(7),
            ))
        })
        .collect()
    }

    /// The source column types recorded by the last sync: `(column, type)`,
    /// in byte order of the column names.
    fn recorded_source_schema(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_source_schema")? {
            return Ok(Vec::new());
        }
        Ok(self
            .ctl_query(
                "SELECT \"column\", decl_type FROM {{schema}}._cutover_source_schema
                 WHERE tbl = $1 ORDER BY \"column\" COLLATE \"C\"",
                &[&tbl],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    fn record_source_schema(&self, tbl: &str, cols: &[ColumnInfo]) -> Result<()> {
        self.ctl_execute(
            "DELETE FROM {{schema}}._cutover_source_schema WHERE tbl = $1",
            &[&tbl],
        )?;
        for c in cols {
            self.ctl_execute(
                "INSERT INTO {{schema}}._cutover_source_schema (tbl, \"column\", decl_type) VALUES ($1, $2, $3)",
                &[&tbl, &c.name, &c.decl_type],
            )?;
        }
        Ok(())
    }

    /// Columns `sync --evolve` added: `(source column, target column)`.
    fn evolved_columns(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_evolved")? {
            return Ok(Vec::new());
        }
        Ok(self
            .ctl_query(
                "SELECT source_column, target_column FROM {{schema}}._cutover_evolved
                 WHERE tbl = $1 ORDER BY added_at, source_column COLLATE \"C\"",
                &[&tbl],
            )?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// Adds a column to a target table, of the PostgreSQL type closest to
    /// the source's declared one that holds every value of it
    /// ([`Postgres::evolved_type`]), and records it as evolved.
    fn evolve_column(&self, tbl: &str, table: &str, column: &str, decl_type: &str) -> Result<()> {
        let ty = self.evolved_type(column, decl_type)?;
        self.client()?
            .batch_execute(&format!(
                "ALTER TABLE {} ADD COLUMN {} {ty}",
                self.qualified(table),
                quote_ident(column)
            ))
            .with_context(|| format!("adding column '{column}' to '{table}' in {}", self.shown))?;
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_evolved (tbl, source_column, target_column) VALUES ($1, $2, $2)",
            &[&tbl, &column],
        )?;
        Ok(())
    }
}

impl Postgres {
    /// The PostgreSQL type of a column `sync --evolve` adds for a source
    /// column declared `decl_type` (by PostgreSQL or by SQLite). A type
    /// PostgreSQL knows is kept as it spells it, widened where SQLite's
    /// name means more (`INTEGER` holds 64 bits, `REAL` a double); a name
    /// it does not know goes by SQLite's affinity rules. A column without a
    /// declared type (SQLite's, which holds any value) has no PostgreSQL
    /// counterpart and is refused.
    pub fn evolved_type(&self, column: &str, decl_type: &str) -> Result<String> {
        let decl = decl_type.trim();
        let plain = decl
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " (),_".contains(c));
        if decl.is_empty() || !plain {
            bail!(
                "source column '{column}' has {}; a PostgreSQL column needs a type: add the column to the target yourself and map it in the spec",
                if decl.is_empty() {
                    "no declared type".to_string()
                } else {
                    format!("a type PostgreSQL cannot take as it is ('{decl}')")
                }
            );
        }
        // to_regtype fails (rather than answering NULL) on a name it cannot
        // parse, such as SQLite's `UNSIGNED BIG INT`: only one word (with a
        // modifier) or one of SQL's own names of several words is asked.
        let base = decl
            .split('(')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let parsable = !base.contains(' ')
            || [
                "double precision",
                "character varying",
                "bit varying",
                "timestamp with time zone",
                "timestamp without time zone",
                "time with time zone",
                "time without time zone",
            ]
            .contains(&base.as_str());
        let known: Option<String> = if parsable {
            self.client()?
                .query_one("SELECT format_type(to_regtype($1), NULL)", &[&decl])
                .with_context(|| format!("reading type '{decl}' in {}", self.shown))?
                .get(0)
        } else {
            None
        };
        let upper = decl.to_ascii_uppercase();
        Ok(match known.as_deref() {
            Some(t) if t.starts_with("smallint") || t.starts_with("integer") => "bigint".into(),
            Some(t) if t.starts_with("real") => "double precision".into(),
            Some(_) => decl.to_string(),
            None if upper.contains("INT") => "bigint".into(),
            None if ["CHAR", "CLOB", "TEXT"].iter().any(|a| upper.contains(a)) => "text".into(),
            None if upper.contains("BLOB") => "bytea".into(),
            None if ["REAL", "FLOA", "DOUB"].iter().any(|a| upper.contains(a)) => {
                "double precision".into()
            }
            // SQLite's NUMERIC affinity under a name PostgreSQL does not
            // know (DATETIME, BOOLEAN-like names): its values are usually
            // text, and text keeps whatever text they are.
            None => "text".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watermarks_of_every_kind_come_back_exactly() -> Result<()> {
        let marks = [
            Value::Null,
            Value::Integer(i64::MIN),
            Value::Real(0.1),
            Value::Real(-0.0),
            Value::Real(f64::MIN_POSITIVE / 4.0),
            Value::Real(f64::NEG_INFINITY),
            Value::Real(f64::NAN),
            Value::Text("1250".into()),
            Value::Text("a\0b".into()),
            Value::TextBytes(vec![0xff, 0]),
            Value::Blob(vec![0, 255]),
        ];
        for m in marks {
            let (kind, text) = watermark_text(&m);
            let back = watermark_value(kind, text.as_deref())?;
            match (&m, &back) {
                (Value::Real(a), Value::Real(b)) => assert_eq!(a.to_bits(), b.to_bits()),
                _ => assert_eq!(back, m),
            }
        }
        assert_eq!(watermark_text(&Value::Text("a\0".into())).0, "text_hex");
        assert!(watermark_value("integer", None).is_err());
        assert!(watermark_value("date", Some("x")).is_err());
        Ok(())
    }
}
