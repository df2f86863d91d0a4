//! The engine interfaces: what cutover asks of a database, cut by concept.
//! An engine is one type that implements all of them ([`Database`]), or,
//! for a database cutover only reads, the read side alone ([`Source`]);
//! each engine keeps one file per interface (`src/db/sqlite/<concept>.rs`).
//!
//! The cut follows what the commands need, not what SQL can do: a command
//! that reconciles asks for key-ordered [`Rows`], one that fences asks for a
//! [`Fence`], and none of them sees a statement, a pragma or a driver type.
//! The control tables are not an engine's business: the control store
//! ([`super::control`]) writes them once for every engine, over the
//! engine's dialect, and runs its statements through [`ControlSql`].

use anyhow::Result;

use super::control::Statement;
use super::types::{
    ColumnInfo, Decision, Extent, Facts, ForeignKey, ForeignKeyViolation, Generated, Holding,
    JournalCount, Journaled, KeyRange, OwnTriggers, Powers, Probe, Run, SchemaPart, SegmentDigest,
    SeqRange, SequenceMark, SideEffect, TableForm, TableSql, Unproven,
};
use crate::value::{Block, Row, Value};

/// One open connection: transactions, nested transactions for a dry run,
/// and the change token.
pub trait Connection {
    /// What the connection says of the database it reaches: whether this
    /// process can write it, how it commits, how the connection is
    /// protected.
    fn facts(&self) -> Result<Facts>;
    /// Runs one step of a transaction ([`super::transaction::Step`]). The
    /// guards of [`super::transaction`] are its only callers: a
    /// `Rollback` or `RollbackSavepoint` never fails (an engine ignores
    /// an error there: there is nothing left to undo).
    fn transaction(&self, step: super::transaction::Step) -> Result<()>;
    /// `suspend`: until called again with `false` (or the open write
    /// transaction ends), the writes on these tables do not act on a
    /// foreign key (nothing cascades), and check none where the engine
    /// lets this role say so; a key still checked refuses a write, which
    /// the rehearsal undoes in its savepoint. An error, before anything is
    /// written, when a key would act for this role. `false`: writes go as
    /// the application's would again.
    fn suspend_foreign_keys(&self, tables: &[&str], suspend: bool) -> Result<()>;
    /// Damage to the database's storage that the engine's own check finds
    /// (a corrupt page), as a line that names the file and what to do; `None`
    /// when the check passes or the engine has none. Asked before a
    /// difference is blamed on a write: a damaged page reads as other rows.
    fn damage(&self) -> Result<Option<String>>;
    /// Waits, bounded, until no other session of cutover writes these
    /// tables (or the load checkpoint): a killed run's session may still be
    /// ending on the server, its transaction not yet rolled back (or, killed
    /// while committing, committed). `waiting` hears, once, which sessions
    /// are waited for; an error names them when they outlast the wait.
    fn await_other_runs(&self, tables: &[&str], waiting: &mut dyn FnMut(&str)) -> Result<()>;
}

/// What the database says about its tables.
pub trait Catalogue {
    /// Columns of a table in declaration order; empty when there is no such table.
    fn table_columns(&self, table: &str) -> Result<Vec<ColumnInfo>>;
    /// The generated columns of a table: `(name, "virtual" | "stored")`.
    fn generated_columns(&self, table: &str) -> Result<Vec<Generated>>;
    /// The tables of the database, in byte order of their names: the
    /// user's (for messages that list what is there), or with `own` every
    /// table there is, cutover's own and the engine's record of ids
    /// (SQLite's `sqlite_sequence`) too (a drill's snapshot).
    fn tables(&self, own: bool) -> Result<Vec<String>>;
    /// Whether the table enforces uniqueness of exactly these columns (its
    /// primary key, or a unique index): then an insert that collides can be
    /// trusted to fail rather than to add a second row.
    fn key_is_unique(&self, table: &str, key: &[&str]) -> Result<bool>;
    /// The foreign keys a table declares, in declaration order.
    fn foreign_keys(&self, table: &str) -> Result<Vec<ForeignKey>>;
    /// Rows of `table` that break a foreign key, with their key columns
    /// `key_names` read when the row can be found.
    fn foreign_key_violations(
        &self,
        table: &str,
        key_names: &[&str],
    ) -> Result<Vec<ForeignKeyViolation>>;
    /// The definition of the given tables and of the control tables: every
    /// table, index and trigger, as `(name, definition)` in name order.
    fn schema_of(&self, tables: &[&str]) -> Result<Vec<SchemaPart>>;
    /// Moves every id generator that feeds a column of the table so that
    /// its next value is past the largest value of each column it feeds,
    /// and the table's own (the one [`Catalogue::sequence`] reports) past
    /// `to` as well, so it never hands out an id either database already
    /// used. A generator already past is left alone; nothing for a table
    /// without one. The table's own is the one [`SequenceMark::own`]
    /// marks.
    fn raise_sequence(&self, table: &str, to: i64) -> Result<()>;
    /// Where every id generator feeding a column of these tables stands, for
    /// [`Catalogue::restore_sequences`] (a transactional one, SQLite's
    /// `sqlite_sequence`, is put back by a rollback itself), each table's
    /// own marked.
    fn sequence_marks(&self, tables: &[&str]) -> Result<Vec<SequenceMark>>;
    /// Puts back each generator of `marks` that stands elsewhere now (a
    /// rolled-back run moved it: PostgreSQL never undoes `nextval` or
    /// `setval`); returns the names of those it put back.
    fn restore_sequences(&self, marks: &[SequenceMark]) -> Result<Vec<String>>;
    /// Adds a column to a table for source column `from` (of any engine),
    /// of this engine's type closest to its kind that holds every value of
    /// it (`sync --evolve`); named as `from` is.
    fn add_column(&self, table: &str, from: &ColumnInfo) -> Result<()>;
    /// How many of cutover's own triggers a table has: the journal's, and
    /// the fence's that refuse a write (a trigger disabled, or rewritten to
    /// let writes through, does not count).
    fn own_triggers(&self, table: &str) -> Result<OwnTriggers>;
    /// What the table of `sql` can store exactly, read once: for each row
    /// (in the columns of `sql`, in the form it would be written), a NULL
    /// in a NOT NULL column, a value past its column's type, length, range,
    /// scale or precision, one the server would round, cut or pad; and the
    /// table's CHECK constraints, which only a write judges (as a trigger
    /// does). Without `server`, no round trip per row: a value only the
    /// server can judge (text of a type cutover reads as text, on
    /// PostgreSQL) is left to the write, whose refusal is a conflict;
    /// replay asks it so of every row it writes. `cutover watch` and
    /// `check` ask it with `server` of every journaled write or row.
    fn holding<'a>(&'a self, sql: &TableSql, server: bool) -> Result<Holding<'a>>;
}

/// Inserts rows straight from blocks.
pub trait BatchInsert {
    /// Inserts one row; `Ok(false)` when a row with the same primary key or
    /// unique key is already there (the caller decides what that means).
    fn insert(&mut self, block: &Block, row: usize) -> Result<bool>;
}

/// Writes one row of a table only if the row stored under its key is
/// exactly the one expected: replay's per-entry write, one statement
/// instead of a read and a write.
pub trait ConditionalWrite {
    /// Writes `after` (`None`: deletes) under the key of the rows given, in
    /// one statement, only if the row stored there is exactly `before`, each
    /// value of the same storage class and bytes (`None`: no row holds the
    /// key). `true`: written; `false`: nothing was written (the row is
    /// another, the database refused or swallowed the write, or the change
    /// moves the key, which this write does not do), and the transaction
    /// goes on.
    fn write_if(&mut self, before: Option<&[Value]>, after: Option<&[Value]>) -> Result<bool>;
}

/// How [`Rows::row_count`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    Exact,
    Estimate,
}

/// One write of [`Rows::write_row`].
#[derive(Clone, Copy, Debug)]
pub enum RowWrite<'a> {
    /// Inserts a row.
    Insert(&'a [Value]),
    /// Rewrites the row stored under `key` (which differs from the row's
    /// own key when the key changed).
    Update { key: &'a [Value], row: &'a [Value] },
    /// Deletes the row stored under a key.
    Delete(&'a [Value]),
    /// Deletes every row (load `--replace`; row triggers fire, as for any
    /// other write).
    All,
}

/// Rows: key-ordered scans and keyed writes. Key order is the engine-neutral
/// order of [`crate::value::CellRef::sql_cmp`], whatever a column's collation.
pub trait Rows {
    /// The statements of `table` reading `columns` in this order, the first
    /// `key_len` the key; scans go in key order, or in the order of column
    /// `first` then the key (sync's watermark). An empty name is a column the
    /// table does not have (a target-only constant): it reads as NULL and is
    /// never written.
    fn table_sql(
        &self,
        table: &str,
        columns: &[&str],
        key_len: usize,
        first: Option<usize>,
    ) -> TableSql;
    /// How many rows the table holds: counted, or (`Count::Estimate`)
    /// about as many as the engine's statistics say, to size the gate's
    /// first key ranges (0 when it has none).
    fn row_count(&self, sql: &TableSql, count: Count) -> Result<i64>;
    /// Streams the table in key order (optionally only keys after `after`),
    /// handing rows out in blocks of `block_rows` until `sink` returns `false`.
    /// A scan ordered by a column `first` takes one value as `after`: only
    /// the rows whose `first` is at or past it, in the engine-neutral order.
    fn scan_into(
        &self,
        sql: &TableSql,
        after: Option<&[Value]>,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()>;
    /// The SHA-256 of every row a scan of `sql` returns, as
    /// [`crate::db::Db::digest_rows`] computes it, where the engine reads
    /// each value in place instead of copying the rows into blocks (a
    /// large value is then never copied whole); `None`: the engine has no
    /// such read, and the blocks are hashed.
    fn rows_digest(&self, _sql: &TableSql) -> Result<Option<String>> {
        Ok(None)
    }
    /// The row stored under `key`, if any; a key held by two rows is an error.
    fn get_row(&self, sql: &TableSql, key: &[Value]) -> Result<Option<Row>>;
    /// Writes one row (or, [`RowWrite::All`], deletes every row); how many
    /// rows the statement changed (0 when a trigger swallowed it).
    fn write_row(&self, sql: &TableSql, write: RowWrite<'_>) -> Result<usize>;
    /// A prepared insert for a run of rows from [`Block`]s.
    fn inserter<'a>(&'a self, sql: &TableSql) -> Result<Box<dyn BatchInsert + 'a>>;
    /// Inserts every row of `blocks` in one go, where the engine has a way
    /// faster than row by row (PostgreSQL's binary COPY): `Some(rows)` when
    /// all went in; `None` when it has no such way, or when a row's key was
    /// already there — then nothing was written, the transaction goes on,
    /// and the caller inserts row by row.
    fn bulk_insert(&self, sql: &TableSql, blocks: &[Block]) -> Result<Option<u64>>;
    /// The conditional writes of a table, through statements prepared on
    /// first use and then held ([`ConditionalWrite`]); `None`: the engine
    /// has no such write (or the table none), and the caller reads each row
    /// first.
    fn conditional_writer<'a>(&'a self, _sql: &TableSql) -> Option<Box<dyn ConditionalWrite + 'a>> {
        None
    }
    /// The largest integer in a column.
    fn max_integer(&self, table: &str, column: &str) -> Result<Option<i64>>;
    /// The engine's [`Digests`], when it can compute them.
    fn digests(&self) -> Option<&dyn Digests> {
        None
    }
}

/// Digests computed inside the database: a table's canonical rows (its
/// values through a [`TableForm`]) hashed and summed per key range, so that
/// the gate compares digests instead of rows and reads rows only where the
/// digests differ. An engine offers it through [`Rows::digests`].
pub trait Digests {
    /// Why the engine cannot digest this table in this form (a type or a
    /// transform it cannot compute exactly, a key that is not unique and
    /// NOT NULL), or `None` when it can.
    fn digest_refusal(&self, sql: &TableSql, form: &TableForm) -> Result<Option<String>>;
    /// Up to `parts - 1` keys, in key order, that split the rows of `range`
    /// into `parts` runs of nearly equal size. For a whole large table the
    /// keys may come from a sample of it: they still cut it, less evenly.
    fn split_keys(&self, sql: &TableSql, range: &KeyRange, parts: usize) -> Result<Vec<Row>>;
    /// The count, notes, digest and money sums of the rows of each part of
    /// `range` cut at `bounds` (in key order, inside it): `bounds.len() + 1`
    /// segments, each from its lower bound up to but excluding the next
    /// (as [`KeyRange`]), in one pass.
    fn digest_ranges(
        &self,
        sql: &TableSql,
        form: &TableForm,
        range: &KeyRange,
        bounds: &[Row],
    ) -> Result<Vec<SegmentDigest>>;
    /// Streams the rows of `range` in key order, as [`Rows::scan_into`].
    fn scan_range(
        &self,
        sql: &TableSql,
        range: &KeyRange,
        block_rows: usize,
        sink: &mut dyn FnMut(Block) -> Result<bool>,
    ) -> Result<()>;
}

/// Runs what the control store ([`super::control`]) writes, and nothing
/// else: a [`Statement`] is made only there, in the engine's
/// [`super::control::Dialect`].
pub trait ControlSql {
    /// Runs a statement (or a script of DDL); the rows it changed.
    fn control_execute(&self, st: &Statement) -> Result<u64>;
    /// Runs a query; its rows, integers and booleans read as integers,
    /// texts as text, as the control tables hold them.
    fn control_query(&self, st: &Statement) -> Result<Vec<Row>>;
}

/// Change capture, installing side: the journal's triggers and image
/// tables, its identity, and the proof that a write is journaled.
pub trait Capture {
    /// The image id of spec table `name` with these target columns: the
    /// existing one when the columns are the same, else a new one. Every
    /// table's image must exist before any trigger is written.
    fn image_for(&self, name: &str, table: &str, columns: &[&str]) -> Result<i64>;
    /// Installs (or replaces, when they differ) the journal triggers on one
    /// table; returns how many were created or replaced.
    fn install_journal(&self, table: &Journaled<'_>) -> Result<usize>;
    /// Writes through each table's journal triggers in a nested transaction
    /// that is always rolled back, and checks the entries they write; the
    /// first that fails, by its index.
    fn prove_journals(&self, tables: &[Journaled<'_>]) -> Result<(), Unproven>;
    /// The names of a table's journal triggers that are missing, differ from
    /// what the spec needs now, or fire in the wrong order.
    fn stale_journal_triggers(&self, table: &Journaled<'_>) -> Result<Vec<String>>;
    fn remove_journal(&self, table: &str) -> Result<()>;
    /// The journal's own tables, which the fence guards like the journal.
    fn journal_image_tables(&self) -> Result<Vec<String>>;
}

/// How much of the journal [`JournalLog::journal_run`] reads at once, and
/// how: a reader holds no more than a page, so a page of large values is a
/// short one.
pub struct RunShape<'a> {
    /// At most this many entries.
    pub limit: usize,
    /// The page ends with the entry whose images bring it to this many
    /// bytes (a page holds at least one entry, whatever its size).
    pub bytes: usize,
    /// Whether the large values ([`crate::value::LARGE`] bytes on) of
    /// image `img`, column `col` (in the image's own column order), of the
    /// before-image (`false`) or the after-image (`true`), are read as
    /// their digests: for a reader that only compares them.
    pub digest: &'a dyn Fn(i64, usize, bool) -> bool,
}

/// Change capture, reading side: the journal's entries.
pub trait JournalLog {
    /// The entries of `range` counted per spec table and op (in byte order
    /// of both), each with the last seq among them: the rows of the
    /// journal's image tables, so that a row written there behind the
    /// journal's back is counted.
    fn journal_counts(&self, range: SeqRange) -> Result<Vec<JournalCount>>;
    /// Every entry counted, and the last seq.
    fn journal_extent(&self) -> Result<Extent>;
    /// Entries with `after < seq <= upto` in seq order, read to `shape`: at
    /// most `shape.limit`, fewer once their images hold `shape.bytes`, and
    /// the large values `shape.digest` names read as their digests (an
    /// engine may read them whole). `true` beside them when more may follow
    /// before `upto` (the page was cut). Each image table is read as one
    /// range and the runs merged by seq ([`super::journal_merge`]).
    fn journal_run(&self, after: i64, upto: i64, shape: &RunShape<'_>) -> Result<Run>;
    /// A digest of every entry and image, exact to each value's kind.
    fn journal_digest(&self) -> Result<String>;
}

/// The write fence: triggers that refuse every write, the guarded fence
/// row, and probes that prove it from another connection.
pub trait Fence {
    /// Called first in the write transaction that installs the fence, before
    /// anything is read: waits until no transaction is writing `tables` and
    /// keeps new writers out until the commit, so everything read afterwards
    /// includes every write committed before the fence and none after it.
    fn drain_writers(&self, tables: &[&str]) -> Result<()>;
    /// A token that changes whenever another connection, in any process,
    /// commits something that could change a fenced table: replay checks it
    /// before each batch and reads the whole fingerprint only when it moved.
    fn change_token(&self) -> Result<i64>;
    /// Installs the fence triggers on one table; whatever goes by their names
    /// is replaced, so a planted trigger cannot pass for the fence.
    fn install_fence_triggers(&self, table: &str, message: &str) -> Result<()>;
    /// Guards the fence row (`row_message`): once written it cannot be
    /// changed or deleted; and, where the engine and the role allow it,
    /// refuses every schema change to cutover's own tables (`ddl_message`)
    /// until [`Fence::remove_fence`]. What guards the schema (or why nothing
    /// can), for the report; `None` when the engine has no such guard.
    fn install_fence_guard(&self, row_message: &str, ddl_message: &str) -> Result<Option<String>>;
    /// Takes the fence off, inside the caller's write transaction: the
    /// schema guard first (it refuses changes to cutover's tables), then
    /// the fence's triggers on each of `tables` (nothing for a table that is
    /// not there) and the fence row's guard, then the row. `Some(keep)`:
    /// also drops the functions the fence's triggers call but those in
    /// `keep` (a `fence on` that could not stand puts back what it found,
    /// [`Fence::fence_functions`]).
    fn remove_fence(&self, tables: &[&str], keep_functions: Option<&[String]>) -> Result<()>;
    /// Tries an insert, an update and a delete on `table`, each in a
    /// transaction that is always rolled back: `(statement, Ok(rows
    /// written) | Err(refusal))`.
    fn probe_writes(&self, table: &str) -> Result<Vec<Probe>>;
    /// The functions the fence's triggers call that exist now, by name: a
    /// `fence on` that cannot stand drops those it created and keeps these.
    /// None on an engine whose triggers call no function of their own.
    fn fence_functions(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}

/// What drills and tests need of a database they built: fixture SQL run
/// as it is (their set-up and the application's writes). Nothing else in
/// the tool runs SQL of its own through the seam (`tests/engine_seam.rs`).
pub trait Fixtures {
    fn execute_script(&self, sql: &str) -> Result<()>;
}

/// What a source does by itself when replay writes a row (its triggers,
/// rules and foreign-key actions), what this connection's role can switch
/// off, and replay's hold on them.
pub trait SideEffects {
    /// The triggers, rules and foreign-key actions (from any table) that a
    /// write to `table` sets off; not cutover's own.
    fn side_effects(&self, table: &str) -> Result<Vec<SideEffect>>;
    /// What this connection's role may switch off on `tables`.
    fn powers(&self, tables: &[&str]) -> Result<Powers>;
    /// From now on every write transaction of this connection lets exactly
    /// the side effects decided `Fire` act, within what `powers` allows;
    /// undone inside the transaction before it commits, so no other session
    /// sees a change.
    fn hold_side_effects(&self, decided: &[(SideEffect, Decision)], powers: &Powers) -> Result<()>;
    /// Up to `limit` rows (as JSON text) that a foreign-key action would
    /// change when the row of `effect.table` holding `parent` (its
    /// referenced columns, in source form) is deleted or rekeyed.
    fn referencing_rows(
        &self,
        effect: &SideEffect,
        parent: &[Value],
        limit: usize,
    ) -> Result<Vec<String>>;
    /// The tables (in this database) that declare a foreign key to `table`.
    fn referencing_tables(&self, table: &str) -> Result<Vec<String>>;
    /// Sets the statement time of this session to `at` (a time in the
    /// engine's text, as a row holds it), which the statement-time
    /// functions of the triggers then return; `None` gives the session the
    /// server's clock back. `false`: the engine has no such clock, or it
    /// cannot hold `at` (MySQL's runs from 1970 to 2038).
    fn hold_clock(&self, at: Option<&Value>) -> Result<bool> {
        Ok(at.is_none())
    }
}

/// The read side: what cutover asks of a database it only reads (a source
/// of `check`, `load`, `gate` and `sync`). An engine that implements these
/// alone is opened with [`super::Db::read_only`].
pub trait Source: Connection + Catalogue + Rows + Send {}

impl<T: Connection + Catalogue + Rows + Send> Source for T {}

/// The write side: the control store's statements, the journal, the
/// fence, a source's side effects and fixture SQL.
pub trait Writes: ControlSql + Capture + JournalLog + Fence + Fixtures + SideEffects {}

impl<T: ControlSql + Capture + JournalLog + Fence + Fixtures + SideEffects> Writes for T {}

/// An engine that is written as well as read: both sides, on one
/// connection that can move to a reader thread.
pub trait Database: Source + Writes {}
