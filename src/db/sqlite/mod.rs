//! SQLite, the engine of files: one type, [`Sqlite`], implementing every
//! interface of `src/db/interfaces.rs`, one file per interface. This file
//! holds what they share: the connection, quoting, and values bound and read
//! exactly as stored.
//!
//! Identifiers from a spec go through [`quote_ident`]; values are always bound.
//! Trigger bodies cannot take parameters, so the only literal ever spliced
//! into SQL is the spec's table name inside a trigger, through [`quote_literal`].

use std::time::Duration;

use rusqlite::ToSql;
use rusqlite::types::{ToSqlOutput, ValueRef};

pub(crate) use crate::db::RowsExt;
pub(crate) use crate::db::interfaces::*;
pub(crate) use crate::db::types::*;
pub(crate) use crate::value::{Block, CellRef, Row, Value};
pub(crate) use capture::JOURNAL_TRIGGERS_PER_TABLE;

mod capture;
mod catalogue;
mod connection;
pub mod control;
mod fence;
mod fixtures;
mod journal_log;
mod large;
mod rows;
mod schema;
mod side_effects;

const FENCE_TRIGGERS: &str = include_str!("../../../sql/sqlite/fence_triggers.sql");
const FENCE_GUARD: &str = include_str!("../../../sql/sqlite/fence_guard.sql");

/// How long a statement waits for another process's lock before failing.
/// Overridable with `CUTOVER_BUSY_TIMEOUT_MS` for drills and tests.
pub(crate) fn busy_timeout() -> Duration {
    let ms = std::env::var("CUTOVER_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Duration::from_millis(ms)
}

/// Quotes an identifier: `a "b"` becomes `"a ""b"""`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal for the places SQL allows no parameter (trigger bodies).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Binds a [`Value`] exactly as it is, storage class included.
struct Bind<'a>(&'a Value);

impl ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        value_ref(self.0.as_cell()).map(ToSqlOutput::Borrowed)
    }
}

fn cell(v: ValueRef<'_>) -> CellRef<'_> {
    match v {
        ValueRef::Null => CellRef::Null,
        ValueRef::Integer(i) => CellRef::Integer(i),
        ValueRef::Real(r) => CellRef::Real(r),
        ValueRef::Text(t) => CellRef::Text(t),
        ValueRef::Blob(b) => CellRef::Blob(b),
    }
}

fn read_row(row: &rusqlite::Row<'_>, width: usize) -> rusqlite::Result<Row> {
    // SQLite does not check that stored text is UTF-8; such text is kept as
    // its bytes (`Value::TextBytes`), never altered.
    (0..width)
        .map(|i| row.get_ref(i).map(|v| cell(v).to_value()))
        .collect()
}

/// Binds a borrowed cell exactly as it is.
struct BindCell<'a>(CellRef<'a>);

impl ToSql for BindCell<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        value_ref(self.0).map(ToSqlOutput::Borrowed)
    }
}

/// A cell as rusqlite binds it (the inverse of [`cell`]). A value known
/// only by its digest is refused: it is never written.
fn value_ref(c: CellRef<'_>) -> rusqlite::Result<ValueRef<'_>> {
    Ok(match c {
        CellRef::Null => ValueRef::Null,
        CellRef::Integer(i) => ValueRef::Integer(i),
        CellRef::Real(r) => ValueRef::Real(r),
        CellRef::Text(t) => ValueRef::Text(t),
        CellRef::Blob(b) => ValueRef::Blob(b),
        CellRef::Digested(d) => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                format!("{d} is known by its digest only and cannot be written").into(),
            ));
        }
    })
}

/// When `err` is the database refusing a row (a UNIQUE, NOT NULL, CHECK or
/// foreign key constraint), SQLite's message; the apply engine reports it as
/// a conflict on that row rather than as a failure of the tool.
pub use connection::damage_behind;

pub fn constraint_violation(err: &anyhow::Error) -> Option<String> {
    err.chain()
        .find_map(|e| match e.downcast_ref::<rusqlite::Error>() {
            Some(rusqlite::Error::SqliteFailure(f, msg))
                if f.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Some(msg.clone().unwrap_or_else(|| "constraint failed".into()))
            }
            _ => None,
        })
}

/// One open SQLite database.
pub struct Sqlite {
    conn: rusqlite::Connection,
    /// The path messages name.
    location: String,
    /// The folder of a temporary database (a CSV snapshot read in), removed
    /// when the database is dropped.
    _temp: Option<tempfile::TempDir>,
    /// The catalogue as last read ([`schema::Schema`]).
    schema: std::cell::RefCell<Option<schema::Schema>>,
    /// About how many bytes `sqlite_schema` takes: its last full read plus
    /// the DDL this connection ran since ([`Sqlite::grow_cache`]).
    schema_bytes: std::cell::Cell<usize>,
}

impl Sqlite {
    fn wrap(
        conn: rusqlite::Connection,
        location: String,
        temp: Option<tempfile::TempDir>,
    ) -> Sqlite {
        Sqlite {
            conn,
            location,
            _temp: temp,
            schema: Default::default(),
            schema_bytes: Default::default(),
        }
    }
}

impl Database for Sqlite {}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Result;

    use crate::spec::Side;

    #[test]
    fn quoting_survives_hostile_names() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn keyed_access_binds_storage_classes_exactly() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("t.db");
        Sqlite::create(&p, "CREATE TABLE \"we ird\" (\"k\" PRIMARY KEY, \"v\")")?;
        let db = Sqlite::open(&p, Access::Write, Side::Target)?;
        let sql = db.table_sql("we ird", &["k", "v"], 1, None);
        db.insert_row(&sql, &[Value::Text("1".into()), Value::Text("1250".into())])?;
        assert_eq!(
            db.get_row(&sql, &[Value::Text("1".into())])?,
            Some(vec![Value::Text("1".into()), Value::Text("1250".into())])
        );
        assert_eq!(db.get_row(&sql, &[Value::Integer(1)])?, None);
        Ok(())
    }

    #[test]
    fn missing_file_is_refused_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("nope.db");
        let err = Sqlite::open(&p, Access::Write, Side::Source).err().unwrap();
        assert!(err.to_string().contains("does not exist"));
        assert!(!p.exists());
    }
}
