//! How far load and sync got, in the target: the load checkpoint of each
//! table (`_cutover_load`), sync's cursor and its provenance, one row per
//! committed batch (`_cutover_cursor`), the source schema sync last saw
//! (`_cutover_source_schema`) and the columns `sync --evolve` added
//! (`_cutover_evolved`).

use anyhow::{Context, Result, bail};

use super::{Control, P, Set, Watermarks, flag, int, opt_text, text};
use crate::value::Value;

/// A table's load checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadCheckpoint {
    /// The last key committed, as JSON text; `None` before the first batch.
    pub last_key: Option<String>,
    pub rows: i64,
    pub done: bool,
}

/// A table's sync cursor: where its last committed batch ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Cursor {
    pub last_watermark: Value,
    /// The last key of that batch, as JSON text.
    pub last_key: String,
}

/// One committed sync batch (provenance).
#[derive(Clone, Debug, PartialEq)]
pub struct SyncBatch {
    pub batch_no: i64,
    pub rows: i64,
    pub changed: i64,
    pub first_watermark: Value,
    pub last_watermark: Value,
    pub committed_at: String,
}

/// A sync batch to record.
#[derive(Clone, Debug)]
pub struct NewBatch<'a> {
    /// The batch's content digest.
    pub batch: &'a str,
    pub rows: u64,
    pub changed: u64,
    pub first_watermark: &'a Value,
    pub last_watermark: &'a Value,
    pub last_key: &'a str,
}

/// A source column as sync last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenColumn {
    pub name: String,
    pub decl_type: String,
}

/// A column `sync --evolve` added to the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evolved {
    pub source_column: String,
    pub target_column: String,
}

/// A watermark as the kind and text of [`Watermarks::KindAndText`].
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

/// The watermark a kind and text stand for.
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

/// Load's and sync's progress, on one target connection.
#[derive(Clone, Copy)]
pub struct Progress<'a>(pub(crate) Control<'a>);

impl Progress<'_> {
    /// Makes the target's control tables (journal identity, fence, load).
    pub fn ensure_control_tables(&self) -> Result<()> {
        self.0.ensure(Set::Target)
    }

    /// Makes the target's control tables as [`Progress::ensure_control_tables`];
    /// `true` when none was there before.
    pub fn make_control_tables(&self) -> Result<bool> {
        let absent = self.0.absent(Set::Target)?;
        self.0.ensure(Set::Target)?;
        Ok(absent)
    }

    /// Drops the target's control tables if they hold no row (see
    /// [`super::Control::drop_if_empty`]).
    pub fn drop_empty_control_tables(&self) -> Result<()> {
        self.0.drop_if_empty(Set::Target)
    }

    /// Makes sync's control tables.
    pub fn ensure_sync_tables(&self) -> Result<()> {
        self.0.ensure(Set::Sync)
    }

    /// The load checkpoint of a table.
    pub fn load_checkpoint(&self, tbl: &str) -> Result<Option<LoadCheckpoint>> {
        if !self.0.has("_cutover_load")? {
            return Ok(None);
        }
        self.0
            .one(
                "SELECT last_key, \"rows\", done FROM {{schema}}._cutover_load WHERE tbl = :tbl",
                &[("tbl", P::Text(tbl))],
            )?
            .map(|r| {
                Ok(LoadCheckpoint {
                    last_key: opt_text(&r, 0)?,
                    rows: int(&r, 1)?,
                    done: flag(&r, 2)?,
                })
            })
            .transpose()
    }

    pub fn set_load_checkpoint(&self, tbl: &str, c: &LoadCheckpoint) -> Result<()> {
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_load (tbl, last_key, \"rows\", done)
                 VALUES (:tbl, :last_key, :rows, :done) {}",
                (self.0.dialect().upsert)(
                    &["tbl"],
                    &["last_key", "\"rows\"", "done"],
                    "updated_at = {now}"
                )
            ),
            &[
                ("tbl", P::Text(tbl)),
                ("last_key", P::OptText(c.last_key.as_deref())),
                ("rows", P::Int(c.rows)),
                ("done", P::Bool(c.done)),
            ],
        )?;
        Ok(())
    }

    /// The columns of `_cutover_cursor` that hold a watermark called
    /// `which` (`first` or `last`), and how to read them back.
    fn watermark_columns(&self, which: &str) -> String {
        match self.0.dialect().watermarks {
            Watermarks::Native => format!("{which}_watermark"),
            Watermarks::KindAndText => format!("{which}_watermark_kind, {which}_watermark"),
        }
    }

    /// The watermark read from `r` at column `i` (and `i + 1` when kept
    /// as a kind and a text); the next column after it.
    fn watermark_at(&self, r: &[Value], i: usize) -> Result<(Value, usize)> {
        match self.0.dialect().watermarks {
            Watermarks::Native => Ok((r.get(i).cloned().unwrap_or(Value::Null), i + 1)),
            Watermarks::KindAndText => {
                let v = watermark_value(&text(r, i)?, opt_text(r, i + 1)?.as_deref())
                    .context("reading a sync watermark")?;
                Ok((v, i + 2))
            }
        }
    }

    /// The sync cursor of a table: where its last committed batch ended.
    pub fn sync_cursor(&self, tbl: &str) -> Result<Option<Cursor>> {
        if !self.0.has("_cutover_cursor")? {
            return Ok(None);
        }
        let Some(r) = self.0.one(
            &format!(
                "SELECT {}, last_key FROM {{{{schema}}}}._cutover_cursor
                 WHERE tbl = :tbl ORDER BY batch_no DESC LIMIT 1",
                self.watermark_columns("last")
            ),
            &[("tbl", P::Text(tbl))],
        )?
        else {
            return Ok(None);
        };
        let (last_watermark, next) = self.watermark_at(&r, 0)?;
        Ok(Some(Cursor {
            last_watermark,
            last_key: text(&r, next)?,
        }))
    }

    /// Records a committed sync batch, which advances the cursor.
    pub fn record_sync_batch(&self, tbl: &str, b: &NewBatch<'_>) -> Result<()> {
        let (first_kind, first_text) = watermark_text(b.first_watermark);
        let (last_kind, last_text) = watermark_text(b.last_watermark);
        let mut params = vec![
            ("tbl", P::Text(tbl)),
            ("batch", P::Text(b.batch)),
            ("rows", P::Int(b.rows as i64)),
            ("changed", P::Int(b.changed as i64)),
            ("last_key", P::Text(b.last_key)),
        ];
        let marks = match self.0.dialect().watermarks {
            Watermarks::Native => {
                params.push(("first", P::Any(b.first_watermark)));
                params.push(("last", P::Any(b.last_watermark)));
                ":first, :last"
            }
            Watermarks::KindAndText => {
                params.push(("first_kind", P::Text(first_kind)));
                params.push(("first", P::OptText(first_text.as_deref())));
                params.push(("last_kind", P::Text(last_kind)));
                params.push(("last", P::OptText(last_text.as_deref())));
                ":first_kind, :first, :last_kind, :last"
            }
        };
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_cursor (tbl, batch_no, batch, \"rows\", changed,
                   {}, {}, last_key)
                 SELECT :tbl, m.n, :batch, :rows, :changed, {marks}, :last_key
                 FROM (SELECT coalesce(max(batch_no), 0) + 1 AS n
                       FROM {{{{schema}}}}._cutover_cursor WHERE tbl = :tbl) m",
                self.watermark_columns("first"),
                self.watermark_columns("last"),
            ),
            &params,
        )?;
        Ok(())
    }

    /// Whether a batch with this content digest was committed for a table.
    pub fn sync_batch_seen(&self, tbl: &str, batch: &str) -> Result<bool> {
        if !self.0.has("_cutover_cursor")? {
            return Ok(false);
        }
        Ok(self
            .0
            .one(
                "SELECT 1 FROM {{schema}}._cutover_cursor WHERE tbl = :tbl AND batch = :batch",
                &[("tbl", P::Text(tbl)), ("batch", P::Text(batch))],
            )?
            .is_some())
    }

    /// Every committed sync batch of a table, in order (provenance).
    pub fn sync_batches(&self, tbl: &str) -> Result<Vec<SyncBatch>> {
        if !self.0.has("_cutover_cursor")? {
            return Ok(Vec::new());
        }
        let rows = self.0.query(
            &format!(
                "SELECT batch_no, \"rows\", changed, {}, {}, committed_at
                 FROM {{{{schema}}}}._cutover_cursor WHERE tbl = :tbl ORDER BY batch_no",
                self.watermark_columns("first"),
                self.watermark_columns("last"),
            ),
            &[("tbl", P::Text(tbl))],
        )?;
        rows.iter()
            .map(|r| {
                let (first_watermark, next) = self.watermark_at(r, 3)?;
                let (last_watermark, next) = self.watermark_at(r, next)?;
                Ok(SyncBatch {
                    batch_no: int(r, 0)?,
                    rows: int(r, 1)?,
                    changed: int(r, 2)?,
                    first_watermark,
                    last_watermark,
                    committed_at: text(r, next)?,
                })
            })
            .collect()
    }

    /// The source columns recorded by the last sync, by name in byte order.
    pub fn recorded_source_schema(&self, tbl: &str) -> Result<Vec<SeenColumn>> {
        if !self.0.has("_cutover_source_schema")? {
            return Ok(Vec::new());
        }
        self.0
            .query(
                "SELECT \"column\", decl_type FROM {{schema}}._cutover_source_schema
                 WHERE tbl = :tbl ORDER BY \"column\"{bytes}",
                &[("tbl", P::Text(tbl))],
            )?
            .iter()
            .map(|r| {
                Ok(SeenColumn {
                    name: text(r, 0)?,
                    decl_type: text(r, 1)?,
                })
            })
            .collect()
    }

    /// Replaces the source columns recorded for a table.
    pub fn record_source_schema(&self, tbl: &str, cols: &[SeenColumn]) -> Result<()> {
        self.0.exec(
            "DELETE FROM {{schema}}._cutover_source_schema WHERE tbl = :tbl",
            &[("tbl", P::Text(tbl))],
        )?;
        for c in cols {
            self.0.exec(
                "INSERT INTO {{schema}}._cutover_source_schema (tbl, \"column\", decl_type)
                 VALUES (:tbl, :column, :decl_type)",
                &[
                    ("tbl", P::Text(tbl)),
                    ("column", P::Text(&c.name)),
                    ("decl_type", P::Text(&c.decl_type)),
                ],
            )?;
        }
        Ok(())
    }

    /// Columns `sync --evolve` added to a table, in the order they were.
    pub fn evolved_columns(&self, tbl: &str) -> Result<Vec<Evolved>> {
        if !self.0.has("_cutover_evolved")? {
            return Ok(Vec::new());
        }
        self.0
            .query(
                "SELECT source_column, target_column FROM {{schema}}._cutover_evolved
                 WHERE tbl = :tbl ORDER BY added_at, source_column{bytes}",
                &[("tbl", P::Text(tbl))],
            )?
            .iter()
            .map(|r| {
                Ok(Evolved {
                    source_column: text(r, 0)?,
                    target_column: text(r, 1)?,
                })
            })
            .collect()
    }

    /// Records a column `sync --evolve` added (of the same name on both
    /// sides).
    pub fn record_evolved(&self, tbl: &str, column: &str) -> Result<()> {
        self.0.exec(
            "INSERT INTO {{schema}}._cutover_evolved (tbl, source_column, target_column)
             VALUES (:tbl, :column, :column)",
            &[("tbl", P::Text(tbl)), ("column", P::Text(column))],
        )?;
        Ok(())
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
