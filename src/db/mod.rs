//! Database access. Every statement the tool runs is written under this module
//! (and `sql/`); the rest of the crate speaks in tables, keys and rows.
//!
//! The rest of the crate holds a [`Db`]: one open database of any engine,
//! offering the interfaces of [`interfaces`] (docs/architecture.md draws
//! them). Two engines implement them, SQLite ([`sqlite`]) and PostgreSQL
//! ([`postgres`]); another is one type implementing [`Database`] and an
//! entry in [`engines`], which matches a location to its engine. [`mysql`]
//! is the floor of a third (MySQL and MariaDB), not selectable yet.

pub mod csv;
pub mod engines;
pub mod interfaces;
pub mod mysql;
pub mod postgres;
pub mod sqlite;
pub mod types;

use std::path::Path;

use anyhow::Result;
use sha2::Digest;

pub use interfaces::{
    AppliedSet, BatchInsert, Capture, Catalogue, ConditionalWrite, Connection, Database, Digests,
    Fence, Fixtures, JournalLog, Progress, Receipts, Rows, RunShape, SideEffects,
};
pub use types::{
    Access, CellForm, ColumnForm, ColumnInfo, Decision, Durability, FenceRecord, ForeignKey,
    ForeignKeyAction, ForeignKeyViolation, JournalEntry, JournalTable, KeyRange, MoneyGroup,
    Powers, ReplayVerdict, Security, SegmentDigest, SequenceMark, SideEffect, SideEffectKind,
    SyncBatch, TableForm, TableSql,
};

use crate::spec::{Location, Table};
use crate::value::{Block, Row, Value};

/// One open database, whatever its engine. It dereferences to
/// [`Database`], so every interface's methods are called on it directly;
/// the few helpers that take closures live here, over those interfaces.
pub struct Db(Box<dyn Database>, &'static engines::Engine);

impl std::ops::Deref for Db {
    type Target = dyn Database;

    fn deref(&self) -> &(dyn Database + 'static) {
        &*self.0
    }
}

impl Db {
    /// Opens an existing database. A missing one is an error, never a new
    /// empty database; a writer refuses settings under which a crash could
    /// leave half a batch behind.
    pub fn open(location: &Location, access: Access, role: &str) -> Result<Db> {
        let engine = engines::for_location(location, role)?;
        Ok(Db(engine.open(location, access, role)?, engine))
    }

    /// The engine this database is, with what it can do.
    pub fn engine(&self) -> &'static engines::Engine {
        self.1
    }

    /// Opens a SQLite file (drill fixtures).
    pub fn open_file(path: &Path, access: Access, role: &str) -> Result<Db> {
        Db::open(&Location::Sqlite(path.to_path_buf()), access, role)
    }

    /// Creates a new database from a script (drill and test fixtures).
    pub fn create(location: &Path, script: &str) -> Result<()> {
        sqlite::Sqlite::create(location, script)
    }

    /// Wraps an engine opened by the caller (a CSV snapshot's temporary
    /// database, a test) as a `Db`.
    pub fn new(engine: impl Database + 'static, kind: &'static engines::Engine) -> Db {
        Db(Box::new(engine), kind)
    }

    /// The engine itself, to hand to a reader thread.
    pub(crate) fn engine_mut(&mut self) -> &mut dyn Database {
        &mut *self.0
    }

    /// Runs `f` inside one write transaction: committed when it returns
    /// `Ok`, rolled back when it fails, so the database is either changed
    /// whole or exactly as before.
    pub fn write<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.begin_write()?;
        let r = f().and_then(|v| self.commit().map(|()| v));
        if r.is_err() {
            self.rollback();
        }
        r
    }

    /// The statements of a spec table as the source holds it.
    pub fn source_sql(&self, t: &Table) -> TableSql {
        self.table_sql(&t.source_table, &t.source_names(), t.key_len, None)
    }

    /// The statements of a spec table as the target holds it.
    pub fn target_sql(&self, t: &Table) -> TableSql {
        self.table_sql(&t.target_table, &t.target_names(), t.key_len, None)
    }

    /// Streams a table in key order in blocks of `block_rows` until `f`
    /// returns `false` (see [`Rows::scan_into`]).
    pub fn scan_blocks(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        mut f: impl FnMut(Block) -> Result<bool>,
    ) -> Result<()> {
        self.0.scan_into(sql, after, block_rows, &mut f)
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

    /// SHA-256 over every row a scan returns, in key order, each cell with
    /// its kind ([`Block::hash_into`]). Reconcile's target reader computes
    /// the same digest as it goes.
    pub fn digest_rows(&self, sql: &TableSql) -> Result<String> {
        if let Some(d) = self.0.rows_digest(sql)? {
            return Ok(d);
        }
        let ((), h) = crate::value::hashed_beside(
            |h, b: Block| b.hash_into(h),
            |hash| {
                self.scan_blocks(sql, None, 1024, |b| {
                    hash(b);
                    Ok(true)
                })
            },
        )?;
        Ok(hex::encode(h.finalize()))
    }
}

/// When `err` is a database refusing a row (a UNIQUE, NOT NULL, CHECK or
/// foreign key constraint), the database's message; the apply engine
/// reports it as a conflict on that row rather than as a failure of the tool.
/// An error that damage to a database file can cause as well as what it
/// says (keys returned out of order): before it is shown, the SQLite files
/// this process opened are checked ([`damage_behind`]).
#[derive(Debug)]
pub struct MaybeDamage(pub String);

impl std::fmt::Display for MaybeDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MaybeDamage {}

/// An error that already names a damaged file ([`Connection::damage`]).
#[derive(Debug)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

/// When a damaged database file is behind `err` (a corrupt page read as an
/// error, or as keys out of order): the file, what its engine's check found,
/// and the next step. `None` when no file is found damaged.
pub fn damage_behind(err: &anyhow::Error) -> Option<String> {
    if err.chain().any(|e| e.is::<Damaged>()) {
        return None;
    }
    sqlite::damage_behind(err)
}

pub fn constraint_violation(err: &anyhow::Error) -> Option<String> {
    if let Some(v) = err.chain().find_map(|e| e.downcast_ref::<ValueRefused>()) {
        return Some(v.0.clone());
    }
    sqlite::constraint_violation(err).or_else(|| postgres::constraint_violation(err))
}

/// A value the column it is written to cannot hold exactly (too long, past
/// the column's scale or range, of another kind): the engine refuses it
/// before the database sees it, and the apply engine reports a conflict on
/// the row, as for a constraint.
#[derive(Debug)]
pub struct ValueRefused(pub String);

impl std::fmt::Display for ValueRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ValueRefused {}
