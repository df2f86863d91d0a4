//! SQLite: connections with the durability rules of DESIGN.md, catalogue
//! queries, key-ordered scans, keyed row access, and the control tables,
//! journal and fence triggers.
//!
//! Identifiers from a spec go through [`quote_ident`]; values are always bound.
//! Trigger bodies cannot take parameters, so the only literal ever spliced
//! into SQL is the spec's table name inside a trigger, through [`quote_literal`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, ToSql, config::DbConfig, params};
use sha2::{Digest, Sha256};

use crate::value::{Block, CellRef, Row, Value};

mod journal;
pub use journal::{JOURNAL_TRIGGERS_PER_TABLE, JournalEntry, JournalTable};

const CONTROL_DDL: &str = include_str!("../../../sql/sqlite/control.sql");
const APPLIED_DDL: &str = include_str!("../../../sql/sqlite/applied.sql");
const APPLY_DDL: &str = include_str!("../../../sql/sqlite/apply.sql");
const FENCE_TRIGGERS: &str = include_str!("../../../sql/sqlite/fence_triggers.sql");
const SYNC_DDL: &str = include_str!("../../../sql/sqlite/sync.sql");
const FENCE_GUARD: &str = include_str!("../../../sql/sqlite/fence_guard.sql");

/// How long a statement waits for another process's lock before failing.
/// Overridable with `CUTOVER_BUSY_TIMEOUT_MS` for drills and tests.
fn busy_timeout() -> Duration {
    let ms = std::env::var("CUTOVER_BUSY_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    Duration::from_millis(ms)
}

/// Whether a connection will write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A column as the catalogue describes it.
#[derive(Clone, Debug)]
pub struct ColumnInfo {
    pub name: String,
    pub decl_type: String,
    /// Position in the primary key (1-based), 0 when not part of it.
    pub pk: i64,
}

/// A foreign key: `(parent table, [(column, parent column)])`.
pub type ForeignKey = (String, Vec<(String, Option<String>)>);

/// A committed sync batch: `(batch_no, rows, changed, first watermark,
/// last watermark, committed_at)`.
pub type SyncBatch = (i64, i64, i64, Value, Value, String);

/// The row of `_cutover_fence`.
#[derive(Clone, Debug)]
pub struct FenceRecord {
    pub boundary: i64,
    pub journal_rows: i64,
    pub fingerprint: String,
    /// JSON list of the fenced tables.
    pub tables: String,
    /// JSON of the fingerprint's parts.
    pub parts: String,
    pub fenced_at: String,
}

/// The statements for one table and one column order, built once per run.
#[derive(Clone, Debug)]
pub struct TableSql {
    pub table: String,
    pub key_len: usize,
    width: usize,
    scan: String,
    scan_after: String,
    select_by_key: String,
    insert: String,
    update: String,
    update_values: Option<String>,
    /// The columns the table has, when some of `columns` are not its own
    /// (target-only constants): only these are written.
    real: Option<Vec<usize>>,
    delete: String,
    count: String,
}

/// Quotes an identifier: `a "b"` becomes `"a ""b"""`.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a string literal for the places SQL allows no parameter (trigger bodies).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl TableSql {
    /// The statements of a table whose scans go in the order of column
    /// `first` (sync's watermark), then the key.
    pub fn ordered_by(table: &str, columns: &[&str], key_len: usize, first: usize) -> TableSql {
        let mut sql = TableSql::new(table, columns, key_len);
        let cols: Vec<String> = columns.iter().map(|c| column_expr(c)).collect();
        let order = std::iter::once(cols[first].clone())
            .chain(cols[..key_len].iter().map(|c| binary(c)))
            .collect::<Vec<_>>()
            .join(", ");
        sql.scan = format!(
            "SELECT {} FROM {} ORDER BY {order}",
            cols.join(", "),
            quote_ident(table)
        );
        sql
    }

    /// The statements of `table` reading `columns` in this order, the first
    /// `key_len` the key. An empty name is a column the table does not
    /// have (a target-only constant, seen from the source): it reads as
    /// NULL and is never written.
    pub fn new(table: &str, columns: &[&str], key_len: usize) -> TableSql {
        let t = quote_ident(table);
        let real: Vec<usize> = (0..columns.len())
            .filter(|&i| !columns[i].is_empty())
            .collect();
        let cols: Vec<String> = columns.iter().map(|c| column_expr(c)).collect();
        let keys = &cols[..key_len];
        let written: Vec<String> = real.iter().map(|&i| cols[i].clone()).collect();
        let rest: Vec<String> = real
            .iter()
            .filter(|&&i| i >= key_len)
            .map(|&i| cols[i].clone())
            .collect();
        let list = cols.join(", ");
        // Key order is always BINARY (the order the merge relies on), whatever
        // collation a key column declares: a NOCASE key is sorted, a BINARY
        // one still walks its index.
        let order = keys
            .iter()
            .map(|k| binary(k))
            .collect::<Vec<_>>()
            .join(", ");
        let n = cols.len();
        let w = written.len();
        TableSql {
            table: table.to_string(),
            key_len,
            width: n,
            real: (real.len() < n).then_some(real),
            scan: format!("SELECT {list} FROM {t} ORDER BY {order}"),
            scan_after: format!(
                "SELECT {list} FROM {t} WHERE ({order}) > ({}) ORDER BY {order}",
                params(key_len, 1)
            ),
            select_by_key: format!("SELECT {list} FROM {t} WHERE {}", assign(keys, 1, " AND ")),
            insert: format!(
                "INSERT INTO {t} ({}) VALUES ({})",
                written.join(", "),
                params(w, 1)
            ),
            update: format!(
                "UPDATE {t} SET {} WHERE {}",
                assign(&written, 1, ", "),
                assign(keys, w + 1, " AND ")
            ),
            // The common update leaves the key alone: set only the other
            // columns, so SQLite need not touch the key's index.
            update_values: (!rest.is_empty()).then(|| {
                format!(
                    "UPDATE {t} SET {} WHERE {}",
                    assign(&rest, 1, ", "),
                    assign(keys, rest.len() + 1, " AND ")
                )
            }),
            delete: format!("DELETE FROM {t} WHERE {}", assign(keys, 1, " AND ")),
            count: format!("SELECT count(*) FROM {t}"),
        }
    }
}

impl TableSql {
    /// The values of `row` from column `from` on that the table has (all of
    /// them, unless some are target-only constants).
    fn written<'r>(&'r self, row: &'r [Value], from: usize) -> impl Iterator<Item = &'r Value> {
        row.iter()
            .enumerate()
            .skip(from)
            .filter(|(i, _)| self.real.as_ref().is_none_or(|r| r.contains(i)))
            .map(|(_, v)| v)
    }
}

/// A column as a statement reads it: quoted, or NULL for a column the table
/// does not have (an empty name, see [`TableSql::new`]).
fn column_expr(name: &str) -> String {
    if name.is_empty() {
        "NULL".to_string()
    } else {
        quote_ident(name)
    }
}

/// A quoted column in BINARY order.
fn binary(quoted: &str) -> String {
    format!("{quoted} COLLATE BINARY")
}

/// `?first, ?first+1, …`: `n` numbered parameters.
fn params(n: usize, first: usize) -> String {
    (first..first + n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `"a" = ?first <sep> "b" = ?first+1 …`.
fn assign(cols: &[String], first: usize, sep: &str) -> String {
    cols.iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ?{}", first + i))
        .collect::<Vec<_>>()
        .join(sep)
}

/// Binds a [`Value`] exactly as it is, storage class included.
struct Bind<'a>(&'a Value);

impl ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(value_ref(self.0.as_cell())))
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

/// Inserts rows straight from blocks, binding each cell as it is.
pub struct Inserter<'a> {
    st: rusqlite::CachedStatement<'a>,
    /// The block columns bound, in order.
    cols: Vec<usize>,
}

impl Inserter<'_> {
    /// Inserts one row; `Ok(false)` when a row with the same primary key or
    /// unique key is already there (the caller decides what that means).
    pub fn insert(&mut self, block: &Block, row: usize) -> Result<bool> {
        for (p, &c) in self.cols.iter().enumerate() {
            self.st
                .raw_bind_parameter(p + 1, BindCell(block.get(row, c)))?;
        }
        match self.st.raw_execute() {
            Ok(_) => Ok(true),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
                    || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// Binds a borrowed cell exactly as it is.
struct BindCell<'a>(CellRef<'a>);

impl ToSql for BindCell<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(value_ref(self.0)))
    }
}

/// A cell as rusqlite binds it (the inverse of [`cell`]).
fn value_ref(c: CellRef<'_>) -> ValueRef<'_> {
    match c {
        CellRef::Null => ValueRef::Null,
        CellRef::Integer(i) => ValueRef::Integer(i),
        CellRef::Real(r) => ValueRef::Real(r),
        CellRef::Text(t) => ValueRef::Text(t),
        CellRef::Blob(b) => ValueRef::Blob(b),
    }
}

/// When `err` is the database refusing a row (a UNIQUE, NOT NULL, CHECK or
/// foreign key constraint), SQLite's message; the apply engine reports it as
/// a conflict on that row rather than as a failure of the tool.
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
pub struct Db {
    conn: Connection,
    path: PathBuf,
    /// The folder of a temporary database (a CSV snapshot read in), removed
    /// when the database is dropped.
    _temp: Option<tempfile::TempDir>,
}

impl Db {
    /// Opens an existing database file. A missing file is an error, never a
    /// new empty database. A connection opened to write refuses a rollback
    /// journal that a crash could leave half-applied (`OFF`, `MEMORY`) and runs
    /// with `synchronous=FULL`.
    pub fn open(path: &Path, access: Access, role: &str) -> Result<Db> {
        if !path.exists() {
            bail!(
                "{role} database {} does not exist; check the url in the spec (paths are relative to the spec file)",
                path.display()
            );
        }
        if path.is_dir() {
            bail!(
                "{role} database {} is a directory, not a SQLite file",
                path.display()
            );
        }
        // Even a reader opens read-write (and then sets query_only): after a
        // crash mid-commit the next connection must roll the hot journal
        // back, which a read-only connection cannot do. SQLite falls back to
        // read-only by itself when the file is write-protected.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)
            .with_context(|| format!("opening {role} database {}", path.display()))?;
        let db = Db {
            conn,
            path: path.to_path_buf(),
            _temp: None,
        };
        db.configure(access, role)?;
        Ok(db)
    }

    fn configure(&self, access: Access, role: &str) -> Result<()> {
        let c = &self.conn;
        c.busy_timeout(busy_timeout())?;
        // A misspelled column in double quotes must be an error, not a string.
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DML, false)?;
        c.set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DDL, false)?;
        // cutover's own writes never fire a foreign-key action (a cascade, a
        // SET NULL) the databases' applications did not ask for: replay
        // changes exactly the rows the journal names, and checks foreign-key
        // integrity itself.
        c.pragma_update(None, "foreign_keys", false)?;
        c.pragma_update(None, "recursive_triggers", false)?;
        // Reading the catalogue proves the file is a database; a full
        // integrity check would cost a scan of every table.
        let probe: rusqlite::Result<i64> =
            c.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0));
        if let Err(e) = probe {
            let locked = matches!(&e, rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::DatabaseBusy || f.code == rusqlite::ErrorCode::DatabaseLocked);
            let why = if locked {
                format!(
                    "{role} database {} is locked by another process (waited {} ms); retry when it is done, or raise CUTOVER_BUSY_TIMEOUT_MS",
                    self.path.display(),
                    busy_timeout().as_millis()
                )
            } else {
                format!(
                    "{role} database {} could not be read; is it a SQLite database?",
                    self.path.display()
                )
            };
            return Err(anyhow::Error::new(e).context(why));
        }
        if access == Access::Read {
            c.pragma_update(None, "query_only", true)?;
        }
        if access == Access::Write {
            let mode = self.journal_mode()?;
            if mode.eq_ignore_ascii_case("off") || mode.eq_ignore_ascii_case("memory") {
                bail!(
                    "{role} database {} uses journal_mode={mode}: a crash there would leave half a batch behind; set PRAGMA journal_mode=WAL (or DELETE) first",
                    self.path.display()
                );
            }
            c.pragma_update(None, "synchronous", "FULL")?;
        }
        Ok(())
    }

    /// Whether this process can write the file: SQLite opens a file it
    /// may not write read-only, whatever was asked.
    pub fn is_read_only(&self) -> Result<bool> {
        Ok(self.conn.is_readonly(rusqlite::MAIN_DB)?)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn journal_mode(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))?)
    }

    pub fn synchronous(&self) -> Result<&'static str> {
        let n: i64 = self
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        Ok(match n {
            0 => "OFF",
            1 => "NORMAL",
            2 => "FULL",
            _ => "EXTRA",
        })
    }

    /// Columns of a table in declaration order; empty when there is no such table.
    pub fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>> {
        let mut st = self
            .conn
            .prepare("SELECT name, type, pk FROM pragma_table_info(?1)")?;
        let rows = st.query_map([table], |r| {
            Ok(ColumnInfo {
                name: r.get(0)?,
                decl_type: r.get(1)?,
                pk: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The generated columns of a table: `(name, "virtual" | "stored")`.
    pub fn generated_columns(&self, table: &str) -> Result<Vec<(String, &'static str)>> {
        let mut st = self
            .conn
            .prepare("SELECT name, hidden FROM pragma_table_xinfo(?1) WHERE hidden IN (2, 3)")?;
        let rows = st.query_map([table], |r| {
            Ok((
                r.get::<_, String>(0)?,
                if r.get::<_, i64>(1)? == 2 {
                    "virtual"
                } else {
                    "stored"
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The user tables, for messages that list what is there.
    pub fn user_tables(&self) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name",
        )?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn has_table(&self, name: &str) -> Result<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [name],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    pub fn row_count(&self, sql: &TableSql) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached(&sql.count)?
            .query_row([], |r| r.get(0))?)
    }

    /// Streams a table in key order (optionally only keys after `after`),
    /// handing rows out in blocks of `block_rows` until `f` returns `false`.
    /// Values are copied once, into the block: no allocation per row.
    pub fn scan_blocks(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        mut f: impl FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        let (text, binds): (&str, Vec<Bind<'_>>) = match after {
            None => (&sql.scan, Vec::new()),
            Some(k) => (&sql.scan_after, k.iter().map(Bind).collect()),
        };
        let mut st = self
            .conn
            .prepare(text)
            .with_context(|| format!("reading table '{}' in {}", sql.table, self.path.display()))?;
        let mut rows = st.query(rusqlite::params_from_iter(binds.iter()))?;
        let mut block = Block::new(sql.width, block_rows);
        let mut n = 0;
        while let Some(r) = rows.next()? {
            for i in 0..sql.width {
                block.push(cell(r.get_ref(i)?));
            }
            n += 1;
            if n == block_rows {
                n = 0;
                let full = std::mem::replace(&mut block, Block::new(sql.width, block_rows));
                if !f(full)? {
                    return Ok(());
                }
            }
        }
        if !block.is_empty() {
            f(block)?;
        }
        Ok(())
    }

    /// Streams a table in key order as owned rows (paths that are not hot).
    pub fn scan(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        mut f: impl FnMut(Row) -> Result<bool>,
    ) -> Result<()> {
        self.scan_blocks(sql, after, 256, |b| {
            for i in 0..b.rows() {
                if !f(b.values(i, b.width()))? {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// The row stored under `key`, if any.
    pub fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>> {
        let mut st = self.conn.prepare_cached(&sql.select_by_key)?;
        let mut rows = st.query(rusqlite::params_from_iter(key.iter().map(Bind)))?;
        let first = match rows.next()? {
            Some(r) => read_row(r, sql.width)?,
            None => return Ok(None),
        };
        if rows.next()?.is_some() {
            bail!(
                "table '{}' in {} holds more than one row with key {}; the spec's key must be unique",
                sql.table,
                self.path.display(),
                crate::value::display_key(key)
            );
        }
        Ok(Some(first))
    }

    /// Inserts a row; returns how many rows the statement inserted (0 when
    /// a trigger swallowed it).
    pub fn insert_row(&self, sql: &TableSql, row: &[Value]) -> Result<usize> {
        Ok(self
            .conn
            .prepare_cached(&sql.insert)?
            .execute(rusqlite::params_from_iter(sql.written(row, 0).map(Bind)))?)
    }

    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index): then an insert that collides can be
    /// trusted to fail rather than to add a second row.
    pub fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool> {
        let want: std::collections::BTreeSet<&str> = key.iter().copied().collect();
        let pk: std::collections::BTreeSet<String> = self
            .table_columns(table)?
            .into_iter()
            .filter(|c| c.pk > 0)
            .map(|c| c.name)
            .collect();
        if pk.len() == want.len() && pk.iter().all(|c| want.contains(c.as_str())) {
            return Ok(true);
        }
        let mut st = self.conn.prepare(
            "SELECT il.name, ii.name FROM pragma_index_list(?1) AS il, pragma_index_info(il.name) AS ii
             WHERE il.\"unique\" AND il.partial = 0 ORDER BY il.name",
        )?;
        let rows: Vec<(String, Option<String>)> = st
            .query_map([table], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut by_index: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
            Default::default();
        for (index, col) in rows {
            // An expression column (NULL name) makes the index useless here.
            by_index
                .entry(index)
                .or_default()
                .insert(col.unwrap_or_default());
        }
        Ok(by_index
            .values()
            .any(|cols| cols.len() == want.len() && cols.iter().all(|c| want.contains(c.as_str()))))
    }

    /// A prepared insert for a run of rows from [`Block`]s.
    pub fn inserter(&self, sql: &TableSql) -> Result<Inserter<'_>> {
        Ok(Inserter {
            st: self.conn.prepare_cached(&sql.insert)?,
            cols: sql.real.clone().unwrap_or_else(|| (0..sql.width).collect()),
        })
    }

    /// Rewrites the row stored under `old_key` (which may differ from the
    /// row's own key when the key changed).
    pub fn update_row(&self, sql: &TableSql, old_key: &[Value], row: &[Value]) -> Result<usize> {
        let k = sql.key_len;
        // The common update leaves the key alone and sets the other columns
        // only; a table of nothing but its key takes the full statement.
        if row[..k] == *old_key
            && let Some(update) = &sql.update_values
        {
            let binds = sql.written(row, k).chain(old_key).map(Bind);
            return Ok(self
                .conn
                .prepare_cached(update)?
                .execute(rusqlite::params_from_iter(binds))?);
        }
        let binds = sql.written(row, 0).chain(old_key).map(Bind);
        Ok(self
            .conn
            .prepare_cached(&sql.update)?
            .execute(rusqlite::params_from_iter(binds))?)
    }

    pub fn delete_row(&self, sql: &TableSql, key: &[Value]) -> Result<usize> {
        Ok(self
            .conn
            .prepare_cached(&sql.delete)?
            .execute(rusqlite::params_from_iter(key.iter().map(Bind)))?)
    }

    /// The largest integer in a column (index-assisted when there is one).
    pub fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>> {
        let c = quote_ident(column);
        let sql = format!(
            "SELECT max({c}) FROM {} WHERE typeof({c}) = 'integer'",
            quote_ident(table)
        );
        Ok(self.conn.query_row(&sql, [], |r| r.get(0))?)
    }

    /// Deletes every row of a table (load `--replace`).
    pub fn clear_table(&self, table: &str) -> Result<usize> {
        Ok(self
            .conn
            .execute(&format!("DELETE FROM {}", quote_ident(table)), [])?)
    }

    // --- transactions -----------------------------------------------------

    /// Runs `f` inside one write transaction (`BEGIN IMMEDIATE`): committed
    /// when it returns `Ok`, rolled back when it fails, so the database is
    /// either changed whole or exactly as before.
    pub fn write<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.begin_immediate()?;
        let r = f().and_then(|v| self.commit().map(|()| v));
        if r.is_err() {
            self.rollback();
        }
        r
    }

    /// Opens a nested transaction inside the open one (a dry run's batch).
    pub fn savepoint(&self) -> Result<()> {
        Ok(self.conn.execute_batch("SAVEPOINT cutover_batch")?)
    }

    /// Keeps the nested transaction's work in the open one.
    pub fn release(&self) -> Result<()> {
        Ok(self.conn.execute_batch("RELEASE cutover_batch")?)
    }

    /// Undoes the nested transaction's work and closes it.
    pub fn rollback_savepoint(&self) {
        let _ = self
            .conn
            .execute_batch("ROLLBACK TO cutover_batch; RELEASE cutover_batch");
    }

    /// Takes the write lock now (waiting for a writer in flight), so that
    /// what is read inside the transaction cannot change before it commits.
    pub fn begin_immediate(&self) -> Result<()> {
        self.conn.execute_batch("BEGIN IMMEDIATE").with_context(|| {
            format!(
                "taking the write lock on {}; another process may hold it, retry when it is done",
                self.path.display()
            )
        })
    }

    pub fn commit(&self) -> Result<()> {
        self.conn
            .execute_batch("COMMIT")
            .with_context(|| format!("committing to {}", self.path.display()))
    }

    /// Rolls back if a transaction is open; safe to call at any time.
    pub fn rollback(&self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    /// The change token: it changes whenever another connection, in any
    /// process, commits to this database (SQLite's `data_version`).
    pub fn change_token(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA data_version", [], |r| r.get(0))?)
    }

    // --- control tables -----------------------------------------------------

    pub fn ensure_control_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(CONTROL_DDL)?)
    }

    /// Creates the source's applied set (per journal identity) and kept
    /// columns. A source replayed by an older cutover, whose applied set had
    /// no journal identity, is refused rather than misread.
    pub fn ensure_applied_table(&self) -> Result<()> {
        if self.has_table("_cutover_applied")? && !self.has_column("_cutover_applied", "journal")? {
            bail!(
                "{}: _cutover_applied was written by an older cutover and records no journal identity; finish that rollback with the version that started it",
                self.path.display()
            );
        }
        Ok(self.conn.execute_batch(APPLIED_DDL)?)
    }

    fn has_column(&self, table: &str, column: &str) -> Result<bool> {
        Ok(self.table_columns(table)?.iter().any(|c| c.name == column))
    }

    /// Whether the journal was installed: the view `_cutover_journal` over
    /// its tables exists. A table of that name is an older cutover's.
    pub fn has_journal(&self) -> Result<bool> {
        let kind: Option<String> = self
            .conn
            .query_row(
                "SELECT type FROM sqlite_schema WHERE name = '_cutover_journal'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        match kind.as_deref() {
            None => Ok(false),
            Some("view") => Ok(true),
            Some(_) => bail!(
                "{}: _cutover_journal was written by an older cutover (JSON images); finish that rollback with the version that started it, or remove the journal and install it again",
                self.path.display()
            ),
        }
    }

    /// Whether the applied set can name this journal: false when there is
    /// no applied set yet.
    fn has_applied(&self) -> Result<bool> {
        Ok(
            self.has_table("_cutover_applied")?
                && self.has_column("_cutover_applied", "journal")?,
        )
    }

    /// `(rows, last seq applied)` of journal `journal` in `_cutover_applied`;
    /// zeros when absent.
    pub fn applied_progress(&self, journal: &str) -> Result<(i64, i64)> {
        if !self.has_applied()? {
            return Ok((0, 0));
        }
        Ok(self.conn.query_row(
            "SELECT count(*), coalesce(max(seq), 0) FROM _cutover_applied WHERE journal = ?1",
            [journal],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// The last `seq` of `journal` applied; 0 before the first. A look-up in
    /// the primary key, cheap enough to run before every batch.
    pub fn applied_last(&self, journal: &str) -> Result<i64> {
        if !self.has_applied()? {
            return Ok(0);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT coalesce(max(seq), 0) FROM _cutover_applied WHERE journal = ?1",
            )?
            .query_row([journal], |r| r.get(0))?)
    }

    /// Records a journal entry as applied; `false` if it already was.
    /// `at` is the batch's commit time ([`Db::now`]): formatting a time per
    /// row costs more than the insert itself.
    pub fn record_applied(
        &self,
        journal: &str,
        seq: i64,
        delivery: &str,
        at: &str,
    ) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![journal, seq, delivery, at])?;
        Ok(n == 1)
    }

    /// Records a batch's journal entries as applied in one statement;
    /// returns how many were new.
    pub fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let list = serde_json::to_string(seqs)?;
        Ok(self
            .conn
            .prepare_cached(
                "INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at)
                 SELECT ?1, value, ?3, at FROM json_each(?2), (SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS at)",
            )?
            .execute(params![journal, list, delivery])?)
    }

    /// The current UTC time as the control tables write it.
    /// Whether journal entry `seq` was applied. Called per change inside a
    /// batch, after [`Db::ensure_applied_table`]: no catalogue look-up.
    pub fn now(&self) -> Result<String> {
        Ok(self
            .conn
            .query_row("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')", [], |r| {
                r.get(0)
            })?)
    }

    /// Whether journal entry `seq` was applied. Called per change inside a
    /// batch, after [`Db::ensure_applied_table`]: no catalogue look-up.
    pub fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM _cutover_applied WHERE journal = ?1 AND seq = ?2")?
            .query_row(params![journal, seq], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Keeps the columns of a source row that the spec does not carry, as
    /// replay deletes it (`row` is a JSON object of those columns).
    pub fn keep_columns(
        &self,
        journal: &str,
        tbl: &str,
        key: &str,
        row: &str,
        seq: i64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO _cutover_kept (journal, tbl, key, row, seq) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![journal, tbl, key, row, seq])?;
        Ok(())
    }

    /// Takes back the kept columns of a key that replay inserts again.
    pub fn take_kept_columns(&self, journal: &str, tbl: &str, key: &str) -> Result<Option<String>> {
        let row: Option<String> = self
            .conn
            .prepare_cached(
                "SELECT row FROM _cutover_kept WHERE journal = ?1 AND tbl = ?2 AND key = ?3",
            )?
            .query_row(params![journal, tbl, key], |r| r.get(0))
            .optional()?;
        if row.is_some() {
            self.conn
                .prepare_cached(
                    "DELETE FROM _cutover_kept WHERE journal = ?1 AND tbl = ?2 AND key = ?3",
                )?
                .execute(params![journal, tbl, key])?;
        }
        Ok(row)
    }

    /// Source columns of the row under `key` (`names` in order), as stored.
    pub fn get_columns(
        &self,
        table: &str,
        key_names: &[&str],
        key: &[Value],
        names: &[&str],
    ) -> Result<Option<Row>> {
        let sql = format!(
            "SELECT {} FROM {} WHERE {}",
            names
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", "),
            quote_ident(table),
            assign(
                &key_names.iter().map(|c| quote_ident(c)).collect::<Vec<_>>(),
                1,
                " AND "
            )
        );
        let mut st = self.conn.prepare_cached(&sql)?;
        let mut rows = st.query(rusqlite::params_from_iter(key.iter().map(Bind)))?;
        Ok(match rows.next()? {
            Some(r) => Some(read_row(r, names.len())?),
            None => None,
        })
    }

    /// Sets source columns of the row under `key`.
    pub fn set_columns(
        &self,
        table: &str,
        key_names: &[&str],
        key: &[Value],
        names: &[&str],
        values: &[Value],
    ) -> Result<usize> {
        let sql = format!(
            "UPDATE {} SET {} WHERE {}",
            quote_ident(table),
            assign(
                &names.iter().map(|c| quote_ident(c)).collect::<Vec<_>>(),
                1,
                ", "
            ),
            assign(
                &key_names.iter().map(|c| quote_ident(c)).collect::<Vec<_>>(),
                names.len() + 1,
                " AND "
            )
        );
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .execute(rusqlite::params_from_iter(
                values.iter().chain(key).map(Bind),
            ))?)
    }

    /// The AUTOINCREMENT high-water mark of a table (`sqlite_sequence`): the
    /// largest id it ever handed out, rows deleted since included.
    pub fn sequence(&self, table: &str) -> Result<Option<i64>> {
        if !self.has_table("sqlite_sequence")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [table],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Raises a table's AUTOINCREMENT high-water mark to at least `to`, so
    /// it never hands out an id the other database already used. Nothing
    /// for a table without AUTOINCREMENT.
    pub fn raise_sequence(&self, table: &str, to: i64) -> Result<()> {
        let autoincrement: bool = self.conn.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1 AND upper(sql) LIKE '%AUTOINCREMENT%'",
            [table],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !autoincrement || !self.has_table("sqlite_sequence")? {
            return Ok(());
        }
        self.conn.execute(
            "UPDATE sqlite_sequence SET seq = ?2 WHERE name = ?1 AND seq < ?2",
            params![table, to],
        )?;
        self.conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?1)",
            params![table, to],
        )?;
        Ok(())
    }

    /// Rows of `table` that break a foreign key: `(child table, rowid,
    /// parent table)`, as `PRAGMA foreign_key_check` finds them.
    pub fn foreign_key_violations(
        &self,
        table: &str,
    ) -> Result<Vec<(String, Option<i64>, String)>> {
        let mut st = self
            .conn
            .prepare("SELECT \"table\", rowid, parent FROM pragma_foreign_key_check(?1)")?;
        let rows = st.query_map([table], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The foreign keys a table declares: `(parent table, [(column, parent
    /// column)])`, in declaration order.
    pub fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>> {
        let mut st = self.conn.prepare(
            "SELECT id, \"table\", \"from\", \"to\" FROM pragma_foreign_key_list(?1) ORDER BY id, seq",
        )?;
        let rows: Vec<(i64, String, String, Option<String>)> = st
            .query_map([table], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut out: Vec<(i64, ForeignKey)> = Vec::new();
        for (id, parent, from, to) in rows {
            match out.last_mut() {
                Some(last) if last.0 == id => last.1.1.push((from, to)),
                _ => out.push((id, (parent, vec![(from, to)]))),
            }
        }
        Ok(out.into_iter().map(|(_, fk)| fk).collect())
    }

    /// The triggers on a table that are not cutover's: `(name)`.
    pub fn app_triggers(&self, table: &str) -> Result<Vec<String>> {
        let mut st = self.conn.prepare(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?1
             AND name NOT LIKE '\\_cutover\\_%' ESCAPE '\\' ORDER BY name",
        )?;
        let rows = st.query_map([table], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether a table declares foreign keys.
    pub fn has_foreign_keys(&self, table: &str) -> Result<bool> {
        Ok(self.conn.query_row(
            "SELECT count(*) FROM pragma_foreign_key_list(?1)",
            [table],
            |r| r.get::<_, i64>(0),
        )? > 0)
    }

    /// The key columns' values of a row given by rowid (for reports).
    pub fn key_of_rowid(&self, table: &str, key_names: &[&str], rowid: i64) -> Result<Option<Row>> {
        let sql = format!(
            "SELECT {} FROM {} WHERE rowid = ?1",
            key_names
                .iter()
                .map(|c| quote_ident(c))
                .collect::<Vec<_>>()
                .join(", "),
            quote_ident(table)
        );
        let mut st = self.conn.prepare(&sql)?;
        let mut rows = st.query([rowid])?;
        Ok(match rows.next()? {
            Some(r) => Some(read_row(r, key_names.len())?),
            None => None,
        })
    }

    pub fn ensure_apply_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(APPLY_DDL)?)
    }

    /// The digest of a committed delivery, if there is one.
    pub fn receipt_digest(&self, feed: &str, delivery: &str) -> Result<Option<String>> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT digest FROM _cutover_deliveries WHERE feed = ?1 AND delivery = ?2",
            )?
            .query_row([feed, delivery], |r| r.get(0))
            .optional()?)
    }

    /// A feed's checkpoint: the last position committed, 0 before the first.
    pub fn feed_checkpoint(&self, feed: &str) -> Result<i64> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(0);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT coalesce(max(last_position), 0) FROM _cutover_deliveries WHERE feed = ?1",
            )?
            .query_row([feed], |r| r.get(0))?)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one receipt row, column by column"
    )]
    pub fn insert_receipt(
        &self,
        feed: &str,
        delivery: &str,
        digest: &str,
        first: i64,
        last: i64,
        written: u64,
        duplicate: u64,
        stale: u64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO _cutover_deliveries (feed, delivery, digest, first_position, last_position, written, duplicate, stale)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![feed, delivery, digest, first, last, written as i64, duplicate as i64, stale as i64])?;
        Ok(())
    }

    /// The evidence row of one revision of a record: `(kind, row JSON)`.
    pub fn evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
    ) -> Result<Option<(String, Option<String>)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT kind, row FROM _cutover_revisions WHERE tbl = ?1 AND key = ?2 AND revision = ?3
                 ORDER BY kind = 'tombstone' DESC LIMIT 1",
            )?
            .query_row(params![tbl, key, revision], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// The newest tombstone revision of a record, if it was deleted.
    pub fn tombstone(&self, tbl: &str, key: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT max(revision) FROM _cutover_revisions WHERE tbl = ?1 AND key = ?2 AND kind = 'tombstone'",
            )?
            .query_row(params![tbl, key], |r| r.get(0))?)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "one evidence row, column by column"
    )]
    pub fn record_evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
        kind: &str,
        row: Option<&str>,
        delivery: &str,
        position: i64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO _cutover_revisions (tbl, key, revision, kind, row, delivery, position)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![tbl, key, revision, kind, row, delivery, position])?;
        Ok(())
    }

    /// The load checkpoint of a table: `(last key as JSON, rows, done)`.
    pub fn load_checkpoint(&self, tbl: &str) -> Result<Option<(Option<String>, i64, bool)>> {
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

    pub fn set_load_checkpoint(
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

    fn trigger_names(kind: &str, table: &str) -> [String; 3] {
        ["insert", "update", "delete"].map(|op| format!("_cutover_{kind}_{op}_{table}"))
    }

    fn count_triggers(&self, names: &[String]) -> Result<usize> {
        let mut n: i64 = 0;
        for name in names {
            n += self.conn.query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND name = ?1",
                [name],
                |r| r.get::<_, i64>(0),
            )?;
        }
        Ok(n as usize)
    }

    // --- fence --------------------------------------------------------------

    /// Installs the fence triggers on one table. Whatever already goes by
    /// their names is dropped first: a trigger planted under a fence
    /// trigger's name must not pass for the fence.
    pub fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()> {
        self.fence_from(FENCE_TRIGGERS, table, message)
    }

    /// Guards the fence row (`_cutover_fence`): once written it cannot be
    /// changed, deleted or replaced.
    pub fn install_fence_guard(&self, message: &str) -> Result<()> {
        self.fence_from(FENCE_GUARD, "_cutover_fence", message)
    }

    /// The fence's three triggers on `table` from `template`.
    fn fence_from(&self, template: &str, table: &str, message: &str) -> Result<()> {
        self.remove_fence_triggers(table)?;
        let [ins, upd, del] = Self::trigger_names("fence", table).map(|n| quote_ident(&n));
        let sql = template
            .replace("{{ins}}", &ins)
            .replace("{{upd}}", &upd)
            .replace("{{del}}", &del)
            .replace("{{table}}", &quote_ident(table))
            .replace("{{message}}", &quote_literal(message));
        self.conn
            .execute_batch(&sql)
            .with_context(|| format!("installing fence triggers on '{table}'"))
    }

    pub fn remove_fence_triggers(&self, table: &str) -> Result<()> {
        for n in Self::trigger_names("fence", table) {
            self.conn
                .execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote_ident(&n)))?;
        }
        Ok(())
    }

    /// How many of the three fence triggers of a table exist.
    pub fn fence_triggers(&self, table: &str) -> Result<usize> {
        self.count_triggers(&Self::trigger_names("fence", table))
    }

    /// The fence row, if the target is fenced.
    pub fn fence_row(&self) -> Result<Option<FenceRecord>> {
        if !self.has_table("_cutover_fence")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT boundary, journal_rows, fingerprint, tables, parts, fenced_at FROM _cutover_fence WHERE id = 1",
                [],
                |r| {
                    Ok(FenceRecord {
                        boundary: r.get(0)?,
                        journal_rows: r.get(1)?,
                        fingerprint: r.get(2)?,
                        tables: r.get(3)?,
                        parts: r.get(4)?,
                        fenced_at: r.get(5)?,
                    })
                },
            )
            .optional()?)
    }

    pub fn set_fence_row(
        &self,
        boundary: i64,
        journal_rows: i64,
        fingerprint: &str,
        tables: &str,
        parts: &str,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO _cutover_fence (id, boundary, journal_rows, fingerprint, tables, parts) VALUES (1, ?1, ?2, ?3, ?4, ?5)",
            params![boundary, journal_rows, fingerprint, tables, parts],
        )?;
        Ok(())
    }

    pub fn delete_fence_row(&self) -> Result<()> {
        self.conn.execute("DELETE FROM _cutover_fence", [])?;
        Ok(())
    }

    /// The schema of the given tables and of the control tables: every table,
    /// index and trigger definition, as `(name, sql)` in name order.
    pub fn schema_of(&self, tables: &[&str]) -> Result<Vec<(String, String)>> {
        let mut st = self.conn.prepare(
            "SELECT type || ' ' || name, coalesce(sql, '') FROM sqlite_schema
             WHERE lower(tbl_name) IN (SELECT lower(value) FROM json_each(?1)) OR tbl_name LIKE '\\_cutover\\_%' ESCAPE '\\'
             ORDER BY type, name",
        )?;
        let list = serde_json::to_string(tables)?;
        let rows = st.query_map([list], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// SHA-256 over every row a scan returns, in key order, each cell with
    /// its storage class ([`Block::hash_into`]). Reconcile's target reader
    /// computes the same digest as it goes.
    pub fn digest_rows(&self, sql: &TableSql) -> Result<String> {
        let mut h = Sha256::new();
        self.scan_blocks(sql, None, 1024, |b| {
            b.hash_into(&mut h);
            Ok(true)
        })?;
        Ok(hex::encode(h.finalize()))
    }

    /// Tries one insert into `table` through this connection, inside a
    /// transaction that is always rolled back. `Ok(None)` means the write went
    /// through (the fence does not hold); `Ok(Some(msg))` is the refusal.
    /// Tries an insert, an update and a delete on `table` through this
    /// connection, each inside a transaction that is always rolled back:
    /// `(statement, Ok(rows written) | Err(refusal))`. An update or delete on
    /// an empty table writes nothing and proves nothing (`Ok(0)`).
    pub fn probe_writes(&self, table: &str) -> Result<Vec<(&'static str, Result<usize, String>)>> {
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
            self.conn.execute_batch("BEGIN")?;
            let r = self.conn.execute(&sql, []);
            self.rollback();
            out.push((what, r.map_err(|e| e.to_string())));
        }
        Ok(out)
    }

    /// Every table of the database (user and control tables, and SQLite's
    /// `sqlite_sequence`), each as its sorted rows in `quote()` form, leaving
    /// out timestamp columns (`at`, `*_at`). Drills compare these before and after
    /// a crash.
    pub fn snapshot(&self) -> Result<Vec<(String, Vec<String>)>> {
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

    /// Runs fixture SQL (drill set-up and the application's writes).
    pub fn execute_script(&self, sql: &str) -> Result<()> {
        self.conn
            .execute_batch(sql)
            .with_context(|| format!("running SQL on {}", self.path.display()))
    }

    /// Creates a new database file from a script (drill fixtures).
    /// A new database in a temporary folder, removed with the returned
    /// handle; `shown` is the path messages name (the CSV file it holds).
    pub fn temporary(script: &str, shown: &Path) -> Result<Db> {
        let dir = tempfile::tempdir().context("creating a temporary folder")?;
        let path = dir.path().join("snapshot.db");
        Db::create(&path, script)?;
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "OFF")?;
        conn.pragma_update(None, "synchronous", "OFF")?;
        let db = Db {
            conn,
            path: shown.to_path_buf(),
            _temp: Some(dir),
        };
        db.conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DML, false)?;
        Ok(db)
    }

    /// Inserts rows into a table of a temporary database (a snapshot being
    /// read in), all in one transaction.
    pub fn fill(
        &self,
        table: &str,
        width: usize,
        rows: impl Iterator<Item = Result<Row>>,
    ) -> Result<u64> {
        let cols = (1..=width)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.conn.execute_batch("BEGIN")?;
        let mut n = 0;
        {
            let mut st = self.conn.prepare(&format!(
                "INSERT INTO {} VALUES ({cols})",
                quote_ident(table)
            ))?;
            for row in rows {
                let row = row?;
                st.execute(rusqlite::params_from_iter(row.iter().map(Bind)))?;
                n += 1;
            }
        }
        self.conn.execute_batch("COMMIT")?;
        Ok(n)
    }

    // --- sync -----------------------------------------------------------------

    pub fn ensure_sync_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(SYNC_DDL)?)
    }

    /// The sync cursor of a table: `(last watermark, last key JSON)` of the
    /// last committed batch.
    pub fn sync_cursor(&self, tbl: &str) -> Result<Option<(Value, String)>> {
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
    pub fn record_sync_batch(
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
    pub fn sync_batch_seen(&self, tbl: &str, batch: &str) -> Result<bool> {
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
    pub fn sync_batches(&self, tbl: &str) -> Result<Vec<SyncBatch>> {
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
    pub fn recorded_source_schema(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_source_schema")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare(
            "SELECT column, decl_type FROM _cutover_source_schema WHERE tbl = ?1 ORDER BY column",
        )?;
        let rows = st.query_map([tbl], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn record_source_schema(&self, tbl: &str, cols: &[ColumnInfo]) -> Result<()> {
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
    pub fn evolved_columns(&self, tbl: &str) -> Result<Vec<(String, String)>> {
        if !self.has_table("_cutover_evolved")? {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare("SELECT source_column, target_column FROM _cutover_evolved WHERE tbl = ?1 ORDER BY added_at, source_column")?;
        let rows = st.query_map([tbl], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Adds a column to a target table and records it as evolved.
    pub fn evolve_column(
        &self,
        tbl: &str,
        table: &str,
        column: &str,
        decl_type: &str,
    ) -> Result<()> {
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

    pub fn create(path: &Path, script: &str) -> Result<()> {
        let conn =
            Connection::open(path).with_context(|| format!("creating {}", path.display()))?;
        conn.execute_batch(script)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_names() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
    }

    #[test]
    fn keyed_access_binds_storage_classes_exactly() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("t.db");
        Db::create(&p, "CREATE TABLE \"we ird\" (\"k\" PRIMARY KEY, \"v\")")?;
        let db = Db::open(&p, Access::Write, "target")?;
        let sql = TableSql::new("we ird", &["k", "v"], 1);
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
        let err = Db::open(&p, Access::Write, "source").err().unwrap();
        assert!(err.to_string().contains("does not exist"));
        assert!(!p.exists());
    }
}
