//! Database access. Every statement the tool runs is written under this module
//! (and `sql/`); the rest of the crate speaks in tables, keys and rows.
//!
//! The rest of the crate holds a [`Db`]: one open database of any engine,
//! offering the interfaces of [`interfaces`] (docs/architecture.md draws
//! them). Two engines implement them, SQLite ([`sqlite`]) and PostgreSQL
//! ([`postgres`]); another is one type implementing [`Database`] and an
//! entry in [`engines`], which matches a location to its engine. [`mysql`]
//! is a third (MySQL and MariaDB): a source of every command, the source a
//! rollback writes back into, and a target `load` writes.

pub mod bounds;
pub mod control;
pub mod credentials;
pub mod csv;
pub mod engines;
pub(crate) mod image_journal;
pub mod interfaces;
mod journal_merge;
pub(crate) mod journal_proof;
pub mod mysql;
pub mod postgres;
mod read_only;
mod segments;
pub mod snapshot;
pub mod sqlite;
pub mod transaction;
pub mod types;
pub mod watch_state;

use std::path::Path;

use anyhow::Result;
use sha2::Digest;

pub use control::applied::AppliedSet;
pub use control::fence::FenceRecords;
pub use control::identity::JournalIdentity;
pub use control::progress::Progress;
pub use control::receipts::Receipts;
pub use interfaces::{
    BatchInsert, Capture, Catalogue, ConditionalWrite, Connection, ControlSql, Count, Database,
    Digests, Fence, Fixtures, JournalLog, RowWrite, Rows, RunShape, SideEffects, Source, Writes,
};
pub use types::{
    Access, CellForm, ColumnForm, ColumnInfo, Decision, Durability, Extent, Facts, FenceRecord,
    ForeignKey, ForeignKeyAction, ForeignKeyViolation, Generated, Holding, JournalCount,
    JournalEntry, JournalId, JournalTable, Journaled, KeyRange, Limit, MoneyGroup, Op, OwnTriggers,
    Powers, Probe, ReplayVerdict, Run, SchemaPart, Security, SegmentDigest, SeqRange, SequenceMark,
    SideEffect, SideEffectKind, TableForm, TableSql, Unfit, Unproven,
};

use crate::spec::{Location, Side, Table};
use crate::value::{Block, Row, Value};
pub use transaction::{Savepoint, Transaction};

/// One open database, whatever its engine: each interface is reached
/// through its own accessor ([`Db::rows`], [`Db::fence`], …), so that a
/// function can be handed the one capability it uses; the control store's
/// views ([`Db::applied_set`], …), the transactions' guards and the helpers
/// that take closures live here, over those interfaces.
pub struct Db(Handle, &'static engines::Engine, String);

/// The engine a [`Db`] holds: both sides, or the read side alone with a
/// stand-in that refuses every write ([`read_only`]).
enum Handle {
    Both(Box<dyn Database>),
    Read(Box<dyn Source>, read_only::ReadOnly),
}

impl Handle {
    fn source(&self) -> &dyn Source {
        match self {
            Handle::Both(d) => &**d,
            Handle::Read(s, _) => &**s,
        }
    }

    fn source_mut(&mut self) -> &mut dyn Source {
        match self {
            Handle::Both(d) => &mut **d,
            Handle::Read(s, _) => &mut **s,
        }
    }

    fn writes(&self) -> &dyn Writes {
        match self {
            Handle::Both(d) => &**d,
            Handle::Read(_, w) => w,
        }
    }
}

impl Db {
    /// Opens an existing database. A missing one is an error, never a new
    /// empty database; a writer refuses settings under which a crash could
    /// leave half a batch behind.
    pub fn open(location: &Location, access: Access, side: Side) -> Result<Db> {
        engines::for_location(location, side)?.open(location, access, side)
    }

    /// The engine this database is, with what it can do.
    pub fn engine(&self) -> &'static engines::Engine {
        self.1
    }

    /// The connection: where the database is, its facts, transactions.
    pub fn connection(&self) -> &dyn Connection {
        self.0.source()
    }

    /// What the database says about its tables.
    pub fn catalogue(&self) -> &dyn Catalogue {
        self.0.source()
    }

    /// Key-ordered scans and keyed writes.
    pub fn rows(&self) -> &dyn Rows {
        self.0.source()
    }

    /// The journal's installing side: its triggers and image tables.
    pub fn capture(&self) -> &dyn Capture {
        self.0.writes()
    }

    /// The journal's entries.
    pub fn journal(&self) -> &dyn JournalLog {
        self.0.writes()
    }

    /// The write fence's triggers, guard and probes.
    pub fn fence(&self) -> &dyn Fence {
        self.0.writes()
    }

    /// The source's triggers, rules and foreign-key actions.
    pub fn side_effects(&self) -> &dyn SideEffects {
        self.0.writes()
    }

    /// Fixture SQL, for drills and tests.
    pub fn fixtures(&self) -> &dyn Fixtures {
        self.0.writes()
    }

    /// Where the database is, as messages name it.
    pub fn location(&self) -> &str {
        &self.2
    }

    /// Every table with its rows, for a drill to compare before and after
    /// ([`snapshot`]).
    pub fn snapshot(&self) -> Result<Vec<(String, Vec<String>)>> {
        snapshot::snapshot(self)
    }

    /// The control store on this database ([`control`]).
    pub fn control(&self) -> control::Control<'_> {
        control::Control::new(self.0.writes(), self.0.source(), self.1.dialect, &self.2)
    }

    /// The source's applied set.
    pub fn applied_set(&self) -> AppliedSet<'_> {
        AppliedSet(self.control())
    }

    /// The fence's row (a target) or its copies and the replay verdicts (a
    /// source).
    pub fn fence_records(&self) -> FenceRecords<'_> {
        FenceRecords(self.control())
    }

    /// The journal's identity in the target.
    pub fn identity(&self) -> JournalIdentity<'_> {
        JournalIdentity(self.control())
    }

    /// Load's and sync's progress in the target.
    pub fn progress(&self) -> Progress<'_> {
        Progress(self.control())
    }

    /// A feed's receipts in the database it applies to.
    pub fn receipts(&self) -> Receipts<'_> {
        Receipts(self.control())
    }

    /// Opens a SQLite file (drill fixtures).
    pub fn open_file(path: &Path, access: Access, side: Side) -> Result<Db> {
        Db::open(&Location::Sqlite(path.to_path_buf()), access, side)
    }

    /// Creates a new database from a script (drill and test fixtures).
    pub fn create(location: &Path, script: &str) -> Result<()> {
        sqlite::Sqlite::create(location, script)
    }

    /// Wraps an engine that implements the read side alone ([`Source`]):
    /// cutover reads it as a source and refuses, before anything is
    /// written, whatever would write it ([`read_only`]). `kind` is the
    /// registry entry whose dialect and capabilities it reads by.
    pub fn read_only(
        engine: impl Source + 'static,
        kind: &'static engines::Engine,
        location: impl Into<String>,
    ) -> Db {
        let location = location.into();
        let refusing = read_only::ReadOnly {
            location: location.clone(),
        };
        Db(Handle::Read(Box::new(engine), refusing), kind, location)
    }

    /// Wraps an engine opened by the caller (a CSV snapshot's temporary
    /// database, a test) as a `Db`, which messages call `location`.
    pub fn new(
        engine: impl Database + 'static,
        kind: &'static engines::Engine,
        location: impl Into<String>,
    ) -> Db {
        Db(Handle::Both(Box::new(engine)), kind, location.into())
    }

    /// The engine itself, to hand to a reader thread.
    pub(crate) fn engine_mut(&mut self) -> &mut dyn Source {
        self.0.source_mut()
    }

    /// Runs `f` inside one write transaction: committed when it returns
    /// `Ok`, rolled back when it fails, so the database is either changed
    /// whole or exactly as before.
    pub fn write<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.begin_write()?.run(f)
    }

    /// Runs `f`, which changes the schema (an install: the journal's tables
    /// and triggers, a column added), as one transaction where the engine's
    /// schema changes are transactional; where they are not (each commits
    /// at once), `f` runs statement by statement, and is written so that a
    /// rerun after a crash half-way completes it.
    pub fn schema_change<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.1.capabilities.transactional_ddl {
            self.write(f)
        } else {
            f()
        }
    }

    /// Opens a write transaction holding the write lock now, so what is
    /// read inside it cannot change before it commits; rolled back unless
    /// committed.
    pub fn begin_write(&self) -> Result<Transaction<'_>> {
        Transaction::begin(self.0.source(), true)
    }

    /// Opens a transaction whose reads all see one snapshot, for a reader
    /// that asks many questions of one state; rolled back when dropped.
    pub fn begin_read(&self) -> Result<Transaction<'_>> {
        Transaction::begin(self.0.source(), false)
    }

    /// Runs `f` on this database inside a write transaction that is rolled
    /// back whatever `f` returns, so nothing it writes is ever committed
    /// (the gate's rehearsal, a dry run). `f` gets the database itself, to
    /// hand its engine to a reader thread.
    pub fn rolled_back<T>(&mut self, f: impl FnOnce(&mut Db) -> Result<T>) -> Result<T> {
        self.0.source().transaction(transaction::Step::BeginWrite)?;
        let r = f(self);
        self.0.source().transaction(transaction::Step::Rollback)?;
        r
    }

    /// Runs `f` inside one write transaction of this database, committed
    /// when `f` answers `true` and rolled back otherwise, or when `f` fails:
    /// what `f` wrote is there whole or not at all (the replay). Answers
    /// what `f` did and whether it was committed.
    pub fn all_or_nothing<T>(
        &mut self,
        f: impl FnOnce(&mut Db) -> Result<(T, bool)>,
    ) -> Result<(T, bool)> {
        self.0.source().transaction(transaction::Step::BeginWrite)?;
        match f(self) {
            Ok((t, true)) => {
                self.0
                    .source()
                    .transaction(transaction::Step::Commit)
                    .map_err(|e| {
                        e.context(format!(
                            "the commit failed and was rolled back; {} is as it was before",
                            self.location()
                        ))
                    })?;
                Ok((t, true))
            }
            Ok((t, false)) => {
                self.0.source().transaction(transaction::Step::Rollback)?;
                Ok((t, false))
            }
            Err(e) => {
                let _ = self.0.source().transaction(transaction::Step::Rollback);
                Err(e)
            }
        }
    }

    /// Runs `f` on this database inside a read transaction, so that all
    /// its reads see one snapshot (the gate in digest mode); as
    /// [`Db::rolled_back`], `f` gets the database itself.
    pub fn on_one_snapshot<T>(&mut self, f: impl FnOnce(&mut Db) -> Result<T>) -> Result<T> {
        self.0.source().transaction(transaction::Step::BeginRead)?;
        let r = f(self);
        self.0.source().transaction(transaction::Step::Rollback)?;
        r
    }

    /// Opens a nested transaction inside the open one (a dry run's batch,
    /// a rehearsal's fault); undone unless released.
    pub fn savepoint(&self) -> Result<Savepoint<'_>> {
        Savepoint::open(self.0.source())
    }

    /// The statements of a spec table as the source holds it.
    pub fn source_sql(&self, t: &Table) -> TableSql {
        self.0
            .source()
            .table_sql(&t.source_table, &t.source_names(), t.key_len, None)
    }

    /// The statements of a spec table as the target holds it.
    pub fn target_sql(&self, t: &Table) -> TableSql {
        self.0
            .source()
            .table_sql(&t.target_table, &t.target_names(), t.key_len, None)
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
        self.0.source().scan_into(sql, after, block_rows, &mut f)
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
        if let Some(d) = self.0.source().rows_digest(sql)? {
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

/// The writes and counts of [`Rows`] by name, for any engine: what the
/// interface takes as one [`RowWrite`] or [`Count`].
pub trait RowsExt: Rows {
    /// Inserts a row; how many rows the statement inserted (0 when a
    /// trigger swallowed it).
    fn insert_row(&self, sql: &TableSql, row: &[Value]) -> Result<usize> {
        self.write_row(sql, RowWrite::Insert(row))
    }

    /// Rewrites the row stored under `key` (which differs from the row's
    /// own key when the key changed).
    fn update_row(&self, sql: &TableSql, key: &[Value], row: &[Value]) -> Result<usize> {
        self.write_row(sql, RowWrite::Update { key, row })
    }

    fn delete_row(&self, sql: &TableSql, key: &[Value]) -> Result<usize> {
        self.write_row(sql, RowWrite::Delete(key))
    }

    /// Deletes every row of the table (load `--replace`).
    fn clear_table(&self, sql: &TableSql) -> Result<usize> {
        self.write_row(sql, RowWrite::All)
    }

    /// How many rows the table holds, counted.
    fn count_rows(&self, sql: &TableSql) -> Result<i64> {
        self.row_count(sql, Count::Exact)
    }
}

impl<T: Rows + ?Sized> RowsExt for T {}

/// What the catalogue's id generators say of one table.
pub trait CatalogueExt: Catalogue {
    /// The high-water mark of the table's own id generator, if it has one
    /// and it handed out an id ([`SequenceMark::own`]).
    fn sequence(&self, table: &str) -> Result<Option<i64>> {
        Ok(self
            .sequence_marks(&[table])?
            .into_iter()
            .find(|m| m.own && m.table == table)
            .and_then(|m| m.high_water()))
    }
}

impl<T: Catalogue + ?Sized> CatalogueExt for T {}

/// A range of the journal's entries counted per op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCounts {
    pub insert: i64,
    pub update: i64,
    pub delete: i64,
}

impl OpCounts {
    pub fn total(&self) -> i64 {
        self.insert + self.update + self.delete
    }

    fn add(&mut self, op: Op, n: i64) {
        match op {
            Op::Insert => self.insert += n,
            Op::Update => self.update += n,
            Op::Delete => self.delete += n,
        }
    }
}

/// The journal's counts as the runs ask them, over [`JournalLog::journal_counts`].
pub trait JournalLogExt: JournalLog {
    /// Entries with `after < seq <= upto`.
    fn count_between(&self, after: i64, upto: i64) -> Result<i64> {
        Ok(self.counts_by_op(after, upto)?.total())
    }

    /// Entries with `after < seq <= upto`, per op.
    fn counts_by_op(&self, after: i64, upto: i64) -> Result<OpCounts> {
        let mut out = OpCounts::default();
        for c in self.journal_counts(SeqRange { after, upto })? {
            out.add(c.op, c.entries);
        }
        Ok(out)
    }

    /// Every entry of each spec table (in byte order of its name), per op.
    fn counts_by_table(&self) -> Result<Vec<(String, OpCounts)>> {
        let mut out: Vec<(String, OpCounts)> = Vec::new();
        for c in self.journal_counts(SeqRange::ALL)? {
            match out.last_mut() {
                Some((t, counts)) if *t == c.tbl => counts.add(c.op, c.entries),
                _ => {
                    let mut counts = OpCounts::default();
                    counts.add(c.op, c.entries);
                    out.push((c.tbl, counts));
                }
            }
        }
        Ok(out)
    }

    /// The last seq journaled for spec table `name`, under any column list.
    fn last_journaled(&self, name: &str) -> Result<Option<i64>> {
        Ok(self
            .journal_counts(SeqRange::ALL)?
            .into_iter()
            .filter(|c| c.tbl == name)
            .map(|c| c.last)
            .max())
    }
}

impl<T: JournalLog + ?Sized> JournalLogExt for T {}

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

/// The assignments of a trigger body's `SET` list (`a = 1, b = f(x, y)`),
/// up to the `;` outside parentheses that ends it, or the end: each split
/// at the commas outside parentheses. Both engines that read a trigger's
/// writes from its text (MySQL's `SET NEW.col = …`, SQLite's `UPDATE … SET
/// col = …`) read the list alike.
pub(crate) fn set_list(text: &str) -> Vec<&str> {
    let mut depth = 0i32;
    let mut start = 0usize;
    let mut parts = Vec::new();
    for (i, ch) in text.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            ';' if depth <= 0 => {
                parts.push(&text[start..i]);
                return parts;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// When `err` is the database refusing a row (a constraint, a value its
/// column cannot hold, a trigger raising an error) rather than a failure
/// of the tool, what it said: a value an engine refused before the server
/// saw it ([`ValueRefused`]), or the server's refusal as the engine's
/// [`engines::Engine::refusal`] reads it.
pub fn constraint_violation(engine: &engines::Engine, err: &anyhow::Error) -> Option<String> {
    if let Some(v) = err.chain().find_map(|e| e.downcast_ref::<ValueRefused>()) {
        return Some(v.0.clone());
    }
    (engine.refusal)(err)
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
