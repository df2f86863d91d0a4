//! The apply engine: the one place that writes rows and the bookkeeping that
//! proves what was written. Load, replay and change-feed apply all go through
//! [`Engine::apply_batch`].
//!
//! The contract (docs/feed.md, "How a feed is applied"):
//!
//! - a batch is atomic: its changes and its [`Checkpoint`] (load cursor,
//!   applied journal sequence numbers, or a delivery receipt) commit in one
//!   `BEGIN IMMEDIATE` transaction; a conflict or any error rolls all of it
//!   back and every table is as before;
//! - identity is the spec key (several columns allowed) within one table;
//! - each change follows one [`Rule`]: the replay rule (the row must equal
//!   `before`, or already equal `after`), the revision rule (newer replaces,
//!   older is kept as evidence, a tombstone is never resurrected by an older
//!   update), or the plain rule (same content is a duplicate, different
//!   content a conflict unless the table's `on_change = "update"`);
//! - deliveries are idempotent: a receipt with the same digest is `replayed`,
//!   a different digest is refused, and positions are gapless per feed.
//!
//! Rows in a change are canonical (target form). Applied to the source they
//! are reverse-transformed; the source's current row is compared in canonical
//! form, so value-equal but non-canonical text (`12.5`) is not a conflict.
//! The replay rule's common changes (an update that keeps its key, an
//! insert, a delete) first go in one conditional statement where the engine
//! has one ([`crate::db::ConditionalWrite`]): written only when the stored row
//! is exactly the before-image in stored form, the one case where the rule
//! writes anyway; anything else reads the row and runs the rule.
//!
//! `CUTOVER_FAULT` crash points (drills) live here, because this is where a
//! batch can be interrupted: `mid-batch`, `before-commit`, `after-commit`.

use std::sync::OnceLock;

mod checkpoint;
pub use checkpoint::{
    Checkpoint, DeliveryCheckpoint, JournalCheckpoint, LoadCheckpoint, SyncCheckpoint,
};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::canonical::canonical;
use crate::db::control::receipts::{Evidence, EvidenceKind, Revision};
use crate::db::{Catalogue, ConditionalWrite, Db, Holding, RowsExt, TableSql, Transaction};
use crate::spec::{OnChange, Side, Table};
use crate::transform::Transform;
use crate::value::{Block, Row, Value, display_key, key_cmp, key_json};

/// How a change decides whether it may be written.
#[derive(Clone, Debug)]
pub enum Rule {
    /// Replay: the current row must equal `before` (`None`: no row), or
    /// already equal the change's `after`. On a table with a revision column,
    /// `revision` (when the change carries one) is recorded as evidence: a
    /// delete leaves its tombstone like any other.
    Expect {
        before: Option<Row>,
        revision: Option<i64>,
    },
    /// The record's revision; the table has a revision column.
    Revision(i64),
    /// No revision: identical content is a duplicate, different a conflict
    /// (or an update, if the table's `on_change` says so).
    Plain,
    /// Sync: the row with the later value in this column (the watermark)
    /// wins; an older one is stale and replaces nothing; the same watermark
    /// with other content is a conflict (unless `on_change = "update"`).
    Watermark(usize),
}

/// One change to one record.
#[derive(Clone, Debug)]
pub struct Change {
    /// Index of the table in the spec.
    pub table: usize,
    /// The record's key (for a key change under [`Rule::Expect`], the key it
    /// had before).
    pub key: Row,
    pub rule: Rule,
    /// The row to leave in place (canonical); `None` deletes.
    pub after: Option<Row>,
    /// Where the change came from, for reports: a journal `seq`, a feed
    /// position, a source row number.
    pub tag: i64,
    /// The before-image (of [`Rule::Expect`]) and `after` as the source
    /// stores them ([`source_form`]), when the change's maker computed them
    /// ahead, off the applying thread (replay's journal reader); `None`
    /// otherwise, or when an image has no source form.
    pub source_images: Option<(Option<Row>, Option<Row>)>,
    /// How many journal entries or feed lines the change stands for: more
    /// than one when replay folded a record's changes in a batch into their
    /// net effect, none for the other records of such a fold.
    pub entries: u64,
    /// The columns (indexes into the table's) the change carries no value
    /// for, under [`Rule::Expect`] only: a journal entry recorded before the
    /// column was journaled, or a feed line that leaves it out. Their places
    /// in `after` and the before-image hold NULL, which stands for nothing:
    /// the replay rule compares the other columns only, an update leaves
    /// these as the database holds them and an insert leaves them to the
    /// column's default. Empty for a whole row.
    pub unrecorded: Vec<usize>,
}

/// Whether two rows (or two absences of a row) agree on every column but
/// `unrecorded`.
pub fn same_recorded(a: Option<&Row>, b: Option<&Row>, unrecorded: &[usize]) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) if unrecorded.is_empty() => a == b,
        (Some(a), Some(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| x == y || unrecorded.contains(&i)),
        _ => false,
    }
}

/// `row` (canonical) as the source stores it: each column checked, then
/// carried back by its transform. What the engine writes into a source
/// whose stored row's storage classes it has not read. The columns in
/// `unrecorded` carry nothing and stay NULL, unchecked.
pub fn source_form(
    table: &Table,
    row: &Row,
    unrecorded: &[usize],
) -> Result<Row, (String, String)> {
    check_row(table, row, unrecorded)?;
    table
        .columns
        .iter()
        .zip(row)
        .enumerate()
        .map(|(i, (col, v))| match unrecorded.contains(&i) {
            true => Ok(Value::Null),
            false => reverse_column(col, v),
        })
        .collect()
}

/// The spec's checks of every column of a canonical row but `unrecorded`.
fn check_row(table: &Table, row: &Row, unrecorded: &[usize]) -> Result<(), (String, String)> {
    for (i, (col, v)) in table.columns.iter().zip(row).enumerate() {
        if unrecorded.contains(&i) {
            continue;
        }
        col.checks
            .check(v)
            .map_err(|why| (col.target.clone(), why))?;
    }
    Ok(())
}

/// One canonical value carried back to its source column.
fn reverse_column(col: &crate::spec::Column, v: &Value) -> Result<Value, (String, String)> {
    col.transform.reverse(v).map_err(|r| {
        (
            col.target.clone(),
            format!(
                "{v} cannot be carried back to source column '{}': {r}",
                col.source
            ),
        )
    })
}

/// Where the id sequences feeding a spec's tables stood before a run that
/// is rolled back (a dry run, the rehearsal): a rollback does not undo
/// PostgreSQL's `nextval` or `setval`, so [`Sequences::restore`] puts back
/// each one the run moved.
pub struct Sequences(Vec<crate::db::SequenceMark>);

impl Sequences {
    /// The sequences of `tables` on `side`, as they stand now.
    pub fn mark(db: &dyn Catalogue, tables: &[Table], side: Side) -> Result<Sequences> {
        let names: Vec<&str> = tables
            .iter()
            .map(|t| match side {
                Side::Source => t.source_table.as_str(),
                Side::Target => t.target_table.as_str(),
            })
            .collect();
        Ok(Sequences(db.sequence_marks(&names)?))
    }

    /// Puts each marked sequence back where it stood, after the rollback.
    pub fn restore(self, db: &dyn Catalogue) -> Result<()> {
        db.restore_sequences(&self.0).map(drop)
    }
}

/// A change that the database's current state does not allow.
#[derive(Clone, Debug, Serialize)]
pub struct Conflict {
    pub tag: i64,
    pub table: String,
    pub key: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    pub reason: String,
    /// The row the change expected to find (canonical), where it says.
    pub expected: Option<Json>,
    /// The row that is there (canonical).
    pub found: Option<Json>,
    /// The row the change wanted to leave (canonical).
    pub wanted: Option<Json>,
}

/// What a committed batch did.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Applied {
    /// Changes written.
    pub written: u64,
    /// Changes already in place: duplicates, or replayed entries whose result
    /// was already there.
    pub duplicate: u64,
    /// Older revisions, kept as evidence without replacing the current row.
    pub stale: u64,
}

impl Applied {
    pub fn add(&mut self, o: Applied) {
        self.written += o.written;
        self.duplicate += o.duplicate;
        self.stale += o.stale;
    }
}

/// How a batch ended.
#[derive(Debug)]
pub enum BatchOutcome {
    Committed(Applied),
    /// Refused whole: a change conflicts with what is there.
    Conflict(Box<Conflict>),
    /// A delivery already committed with the same digest; nothing written.
    Replayed,
    /// Refused whole before any change: stale or future positions, or a
    /// known delivery id with other content.
    Refused(String),
    /// Another process committed this work first; re-read and go on.
    Raced,
}

/// A batch's outcome in words, for a caller that did not expect it.
impl std::fmt::Display for BatchOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchOutcome::Committed(a) => write!(f, "committed ({} written)", a.written),
            BatchOutcome::Conflict(c) => {
                write!(f, "a conflict in table '{}': {}", c.table, c.reason)
            }
            BatchOutcome::Replayed => f.write_str("a delivery already committed"),
            BatchOutcome::Refused(why) => write!(f, "refused: {why}"),
            BatchOutcome::Raced => f.write_str("committed first by another process"),
        }
    }
}

/// Crash points for drills: `CUTOVER_FAULT=mid-batch|before-commit|after-commit`
/// makes the process exit at once with code 73, without cleanup, at that
/// point of the first batch that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    MidBatch,
    BeforeCommit,
    AfterCommit,
}

pub const FAULT_EXIT: i32 = 73;

fn fault() -> Option<Fault> {
    static F: OnceLock<Option<Fault>> = OnceLock::new();
    *F.get_or_init(|| match std::env::var("CUTOVER_FAULT").ok().as_deref() {
        Some("mid-batch") => Some(Fault::MidBatch),
        Some("before-commit") => Some(Fault::BeforeCommit),
        Some("after-commit") => Some(Fault::AfterCommit),
        _ => None,
    })
}

pub(crate) fn crash_at(point: Fault) {
    if fault() == Some(point) {
        // No unwinding, no destructors, no rollback: what a kill -9 leaves.
        std::process::exit(FAULT_EXIT);
    }
}

/// Attached to an error raised while applying one change of a batch, so the
/// caller can say which line or entry it was (`Error::downcast_ref`).
#[derive(Clone, Copy, Debug)]
pub struct FailedChange {
    /// Index of the change in the batch.
    pub index: usize,
    pub tag: i64,
}

impl std::fmt::Display for FailedChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "applying change {} of the batch (tag {})",
            self.index + 1,
            self.tag
        )
    }
}

/// What a batch holds: changes, or canonical rows to load.
enum Batch<'a> {
    Changes(&'a [Change]),
    Rows {
        table: usize,
        blocks: &'a [Block],
        first_tag: i64,
    },
}

/// The key column names on the side being written.
fn sql_key_names(table: &Table, side: Side) -> Vec<&str> {
    table
        .key_columns()
        .iter()
        .map(|c| match side {
            Side::Source => c.source.as_str(),
            Side::Target => c.target.as_str(),
        })
        .collect()
}

/// What one change did.
enum Effect {
    Written,
    Duplicate,
    Stale,
}

/// The engine bound to one database of the migration.
pub struct Engine<'a> {
    /// The tables changes name by index (`Change::table`).
    tables: &'a [Table],
    db: &'a Db,
    side: Side,
    sql: Vec<TableSql>,
    /// The journal whose entries this engine replays into the source: the
    /// columns the spec does not carry are kept under it between a delete
    /// and a re-insert of the same key.
    journal: String,
    /// Batches are savepoints of a transaction the caller opened, and
    /// commits or rolls back whole (replay, its dry run, the rehearsal).
    within: bool,
    /// The transaction opened by [`Engine::hold`], whose savepoints the
    /// batches are until [`Engine::commit_held`] commits it: load holds its
    /// first commit until every source row has been validated.
    held: std::cell::RefCell<Option<Transaction<'a>>>,
    /// The held batches wait for the end of the run ([`Engine::hold_whole`]).
    whole: std::cell::Cell<bool>,
    /// [`Engine::hold`] made the control tables the held batches write,
    /// outside their transaction (a schema change commits at once): rolled
    /// back, the batches leave them empty, and they are taken away again.
    made: std::cell::Cell<bool>,
    /// The source row of the change being applied, as stored (storage
    /// classes included), kept only for tables with money columns: a money
    /// value written back keeps the class the row had (see
    /// [`Engine::stored_form`]).
    stored: std::cell::RefCell<Option<Row>>,
    /// Each table's conditional writes (`None`: the database has none).
    writers: std::cell::RefCell<Vec<Option<Writer<'a>>>>,
    /// Per table, the database's own triggers and rules that act on these
    /// writes, as messages name them: what can swallow a write.
    acting: Vec<Vec<String>>,
    /// The statements writing only some columns of a table, by table and
    /// the columns left out (see [`Change::unrecorded`]), made on first use.
    partial: std::cell::RefCell<std::collections::HashMap<(usize, Vec<usize>), TableSql>>,
    /// On the source: what each table's columns can hold (by table and the
    /// columns a change leaves out), read on first use. A value the source
    /// column would round, cut, pad or refuse is a conflict before it is
    /// written, never a changed value.
    holding: std::cell::RefCell<std::collections::HashMap<(usize, Vec<usize>), Holding<'a>>>,
    /// Per table, the database's triggers that set columns to the
    /// statement's time, which each write holds by setting the session's
    /// clock to the row's value in them ([`Engine::clock`]).
    clocks: Vec<Vec<crate::side_effects::Clock>>,
}

/// A table's conditional writes on one database.
type Writer<'a> = Box<dyn ConditionalWrite + 'a>;

impl<'a> Engine<'a> {
    /// The engine writing `tables` (a spec's, or sync's plan of one) into
    /// `db`, the database on `side`.
    pub fn new(tables: &'a [Table], db: &'a Db, side: Side) -> Engine<'a> {
        let sql: Vec<TableSql> = tables
            .iter()
            .map(|t| match side {
                Side::Source => db.source_sql(t),
                Side::Target => db.target_sql(t),
            })
            .collect();
        let writers = sql
            .iter()
            .map(|s| db.rows().conditional_writer(s))
            .collect();
        Engine {
            tables,
            db,
            side,
            sql,
            journal: String::new(),
            within: false,
            held: std::cell::RefCell::new(None),
            whole: std::cell::Cell::new(false),
            made: std::cell::Cell::new(false),
            stored: std::cell::RefCell::new(None),
            writers: std::cell::RefCell::new(writers),
            acting: Vec::new(),
            partial: std::cell::RefCell::default(),
            holding: std::cell::RefCell::default(),
            clocks: vec![Vec::new(); tables.len()],
        }
    }

    /// The same engine, told which triggers of the database set columns
    /// of each table to the statement's time (in the order of `tables`):
    /// each insert and update they fire on is written under a session
    /// clock set to the row's value.
    pub fn clocks(mut self, clocks: Vec<Vec<crate::side_effects::Clock>>) -> Engine<'a> {
        self.clocks = clocks;
        self
    }

    /// Sets the session's clock for a write of `row` (as stored) to table
    /// `ti`, an insert or an update, when a trigger that fires on it sets
    /// columns to the statement's time: `Ok(true)` when set (the caller
    /// gives the clock back after the write), `Ok(false)` when no trigger
    /// needs it, a conflict when the row's values cannot be one clock's.
    fn clock(
        &self,
        c: &Change,
        ti: usize,
        insert: bool,
        row: &[Value],
    ) -> Result<Result<bool, Box<Conflict>>> {
        let table = &self.tables[ti];
        let mut at: Option<(&Value, usize)> = None;
        for k in self.clocks[ti]
            .iter()
            .filter(|k| if insert { k.insert } else { k.update })
        {
            for &col in &k.columns {
                let v = &row[col];
                let differs = at.is_some_and(|(a, _)| a != v);
                if matches!(v, Value::Null) || differs {
                    let why = match at {
                        Some((_, first)) if differs => format!(
                            "source trigger '{}' sets '{}' to the statement's time, which replay sets to the journal's value, and the row holds another time in '{}' ({} and {})",
                            k.trigger,
                            table.columns[col].source,
                            table.columns[first].source,
                            v,
                            row[first]
                        ),
                        _ => format!(
                            "source trigger '{}' sets '{}' to the statement's time, and the row holds NULL there, which no clock reads",
                            k.trigger, table.columns[col].source
                        ),
                    };
                    return Ok(Err(self.conflict(
                        c,
                        why,
                        Some(table.columns[col].target.clone()),
                        None,
                        None,
                    )));
                }
                at.get_or_insert((v, col));
            }
        }
        let Some((v, col)) = at else {
            return Ok(Ok(false));
        };
        if !self.db.side_effects().hold_clock(Some(v))? {
            return Ok(Err(self.conflict(
                c,
                format!(
                    "a source trigger sets '{}' to the statement's time, and the session's clock cannot be set to {v} (it runs from 1970 to 2038)",
                    table.columns[col].source
                ),
                Some(table.columns[col].target.clone()),
                None,
                None,
            )));
        }
        Ok(Ok(true))
    }

    /// The same engine, told which triggers and rules of the database act
    /// on its writes to each table (in the order of `tables`), so that a
    /// swallowed write is named by what can swallow it.
    pub fn acting(mut self, acting: Vec<Vec<String>>) -> Engine<'a> {
        self.acting = acting;
        self
    }

    /// The same engine writing inside the caller's transaction, each batch
    /// a savepoint of it (see [`Engine::run`]): the caller commits or rolls
    /// back every batch at once, and carries the id generators after its
    /// commit.
    pub fn within(mut self) -> Engine<'a> {
        self.within = true;
        self
    }

    /// Opens a transaction that the next batches join, uncommitted, until
    /// [`Engine::commit_held`] or [`Engine::rollback_held`].
    pub fn hold(&self) -> Result<()> {
        // Where a schema change commits at once, the control tables the
        // batches write are made first: made inside, they would commit
        // the held batches half-way.
        if !self.ddl_inside() && !self.within {
            self.made.set(match self.side {
                Side::Source => self.db.applied_set().make()?,
                Side::Target => self.db.progress().make_control_tables()?,
            });
        }
        *self.held.borrow_mut() = Some(self.db.begin_write()?);
        Ok(())
    }

    /// [`Engine::hold`] until [`Engine::commit_held`] whatever happens
    /// meanwhile, the transaction's deferrable foreign keys checked at its
    /// commit only: load's tables whose keys refer to each other in a
    /// cycle are written whole, in any order, or not at all.
    pub fn hold_whole(&self) -> Result<()> {
        self.hold()?;
        if let Some(tx) = self.held.borrow().as_ref() {
            tx.defer_foreign_keys()?;
        }
        self.whole.set(true);
        Ok(())
    }

    /// Whether the held batches wait for the end of the run
    /// ([`Engine::hold_whole`]).
    pub fn holds_whole(&self) -> bool {
        self.whole.get()
    }

    /// Commits the held batches (a no-op when none are held). The crash
    /// faults of a batch's commit fire here: this is their commit.
    pub fn commit_held(&self) -> Result<()> {
        let Some(tx) = self.held.borrow_mut().take() else {
            return Ok(());
        };
        crash_at(Fault::BeforeCommit);
        tx.commit().map_err(|e| {
            e.context(format!(
                "the held batches were rolled back; {} is as it was before them",
                self.db.location()
            ))
        })?;
        crash_at(Fault::AfterCommit);
        Ok(())
    }

    /// Rolls back the held batches: none of them was ever committed.
    pub fn rollback_held(&self) {
        self.held.borrow_mut().take();
        // The transaction is over: dropping the empty tables [`Engine::hold`]
        // made commits nothing else. Should it fail, they stay, empty,
        // as the next run would make them.
        if self.made.take() {
            let _ = match self.side {
                Side::Source => self.db.applied_set().drop_if_empty(),
                Side::Target => self.db.progress().drop_empty_control_tables(),
            };
        }
    }

    /// The engine for replaying journal `journal` into the source.
    pub fn for_journal(tables: &'a [Table], db: &'a Db, journal: &str) -> Engine<'a> {
        let mut e = Engine::new(tables, db, Side::Source);
        e.journal = journal.to_string();
        // The source row is read only to be compared with the before-image
        // (which the journal reader digests alike): the large values of the
        // columns carried as they are are read as digests, never copied.
        e.sql = std::mem::take(&mut e.sql)
            .into_iter()
            .zip(tables)
            .map(|(sql, t)| sql.digesting(t.compared_only()))
            .collect();
        e
    }

    /// Applies `changes` and `checkpoint` in one transaction.
    pub fn apply_batch(
        &self,
        changes: &[Change],
        checkpoint: &dyn Checkpoint,
    ) -> Result<BatchOutcome> {
        self.run(Batch::Changes(changes), checkpoint)
    }

    /// Loads canonical rows of one table under the plain rule (absent:
    /// insert; identical: duplicate; different: conflict, or update under
    /// `on_change = "update"`), with `checkpoint`, in one transaction.
    /// Where the target enforces the key's uniqueness, each row is simply
    /// inserted and only a collision is looked at: the fast path of load.
    pub fn load_rows(
        &self,
        table: usize,
        blocks: &[Block],
        first_tag: i64,
        checkpoint: &dyn Checkpoint,
    ) -> Result<BatchOutcome> {
        self.run(
            Batch::Rows {
                table,
                blocks,
                first_tag,
            },
            checkpoint,
        )
    }

    fn run(&self, batch: Batch<'_>, checkpoint: &dyn Checkpoint) -> Result<BatchOutcome> {
        // Batches within the caller's transaction: a schema change that
        // commits at once would commit it, so there the caller made the
        // control tables before opening it.
        // Held batches: `hold` made them before it opened the transaction.
        if !self.ddl_inside() && !self.within && self.held.borrow().is_none() {
            self.ensure_control(checkpoint)?;
        }
        if self.within || self.held.borrow().is_some() {
            // Each batch a savepoint of the caller's transaction, which it
            // commits or rolls back whole, or of the transaction `hold`
            // opened.
            let batch_sp = self.db.savepoint()?;
            let outcome = self.apply_inside(batch, checkpoint)?;
            if let BatchOutcome::Committed(_) = outcome {
                batch_sp.release()?;
            }
            return Ok(outcome);
        }
        let tx = self.db.begin_write()?;
        match self.apply_inside(batch, checkpoint) {
            Ok(BatchOutcome::Committed(a)) => {
                crash_at(Fault::BeforeCommit);
                tx.commit().map_err(|e| {
                    e.context("the batch was rolled back; nothing of it was applied")
                })?;
                crash_at(Fault::AfterCommit);
                Ok(BatchOutcome::Committed(a))
            }
            Ok(other) => Ok(other),
            Err(e) => {
                drop(tx);
                Err(e.context(format!(
                    "the batch was rolled back; {} is as it was before it",
                    self.db.location()
                )))
            }
        }
    }

    /// Makes the control tables a batch writes: inside the batch where the
    /// engine's schema changes are transactional, so that a batch that
    /// never commits leaves no trace at all; before the batch where they
    /// are not (a schema change would commit the batch's transaction
    /// half-way), as an install that a rerun after a crash completes.
    fn ensure_control(&self, checkpoint: &dyn Checkpoint) -> Result<()> {
        match self.side {
            Side::Source => self.db.applied_set().ensure()?,
            Side::Target => self.db.progress().ensure_control_tables()?,
        }
        checkpoint.ensure_tables(self.db)
    }

    /// Whether control tables are made inside the batch's transaction.
    fn ddl_inside(&self) -> bool {
        self.db.engine().capabilities.transactional_ddl
    }

    fn apply_inside(&self, batch: Batch<'_>, checkpoint: &dyn Checkpoint) -> Result<BatchOutcome> {
        if self.ddl_inside() {
            self.ensure_control(checkpoint)?;
        }
        if let Some(outcome) = checkpoint.precondition(self.db)? {
            return Ok(outcome);
        }
        checkpoint.before_writes(self.db)?;
        let delivery = checkpoint.delivery();
        let applied = checkpoint.applied_entries(self.side);
        let written_tables: std::collections::BTreeSet<usize> = match &batch {
            Batch::Changes(changes) => changes.iter().map(|c| c.table).collect(),
            Batch::Rows { table, .. } => [*table].into(),
        };
        let mut done = Applied::default();
        let mut count = |effect: Effect, i: usize, n: u64| {
            match effect {
                Effect::Written => done.written += n,
                Effect::Duplicate => done.duplicate += n,
                Effect::Stale => done.stale += n,
            }
            if i == 0 {
                crash_at(Fault::MidBatch);
            }
        };
        match batch {
            Batch::Changes(changes) => {
                for (i, c) in changes.iter().enumerate() {
                    // A journal entry already applied (by a replay or another
                    // feed) is not applied twice.
                    if let Some(a) = &applied
                        && let Some(&seq) = a.seqs.get(i)
                        && seq > 0
                        && self.db.applied_set().is_applied(a.journal, seq)?
                    {
                        count(Effect::Duplicate, i, c.entries);
                        continue;
                    }
                    match self.apply_one(c, delivery).with_context(|| FailedChange {
                        index: i,
                        tag: c.tag,
                    })? {
                        // The entries of a record folded into its net effect
                        // were applied, even where they cancel out.
                        Ok(Effect::Duplicate) if c.entries > 1 => {
                            count(Effect::Written, i, c.entries)
                        }
                        Ok(effect) => count(effect, i, c.entries),
                        Err(conflict) => return Ok(BatchOutcome::Conflict(conflict)),
                    }
                }
            }
            Batch::Rows {
                table: ti,
                blocks,
                first_tag,
            } => {
                let table = &self.tables[ti];
                let sql = &self.sql[ti];
                let key: Vec<&str> = sql_key_names(table, self.side);
                // Rows reach here from `canonical_block`, which has applied the
                // column checks; the source side would need the reverse
                // transform, so only the target takes the fast path.
                let fast = self.side == Side::Target
                    && self.db.catalogue().key_is_unique(&sql.table, &key)?;
                // The whole batch in one statement where the engine has one
                // (COPY): a collision leaves nothing written, and the rows
                // go one by one below.
                let bulk = match fast {
                    true => self.db.rows().bulk_insert(sql, blocks)?,
                    false => None,
                };
                if let Some(n) = bulk {
                    for i in 0..n as usize {
                        count(Effect::Written, i, 1);
                    }
                } else {
                    // Prepared only where it is used: an engine may refuse
                    // its statement on a table it cannot trust a key on
                    // (PostgreSQL's ON CONFLICT beside an INSERT rule).
                    let mut ins = match fast {
                        true => Some(self.db.rows().inserter(sql)?),
                        false => None,
                    };
                    let mut i = 0usize;
                    for b in blocks {
                        for r in 0..b.rows() {
                            let tag = first_tag + i as i64;
                            if let Some(ins) = ins.as_mut()
                                && ins
                                    .insert(b, r)
                                    .with_context(|| FailedChange { index: i, tag })?
                            {
                                count(Effect::Written, i, 1);
                            } else {
                                // A collision (or no unique key to rely on): the
                                // plain rule decides, on the stored row.
                                let c = Change {
                                    table: ti,
                                    key: b.values(r, table.key_len),
                                    rule: Rule::Plain,
                                    after: Some(b.values(r, b.width())),
                                    tag,
                                    source_images: None,
                                    entries: 1,
                                    unrecorded: Vec::new(),
                                };
                                match self
                                    .apply_one(&c, delivery)
                                    .with_context(|| FailedChange { index: i, tag })?
                                {
                                    Ok(effect) => count(effect, i, 1),
                                    Err(conflict) => return Ok(BatchOutcome::Conflict(conflict)),
                                }
                            }
                            i += 1;
                        }
                    }
                }
            }
        }
        // Rows are written with their own ids: the id generator of each
        // table written moves past them (PostgreSQL's sequences do not
        // follow inserted ids), so the application's next insert takes a
        // new one. Not within the caller's transaction: a sequence moved
        // is not rolled back, and the caller carries them after its commit.
        // Not where moving one is a schema change that would commit the
        // batch half-way (MySQL's `ALTER TABLE … AUTO_INCREMENT`): there the
        // counter follows inserted ids by itself, and replay carries it past
        // the rest after its last batch.
        if done.written > 0 && !self.within && self.ddl_inside() {
            for &ti in &written_tables {
                self.db.catalogue().raise_sequence(&self.sql[ti].table, 0)?;
            }
        }
        checkpoint.record(self.db, self.side, &done)?;
        Ok(BatchOutcome::Committed(done))
    }

    fn apply_one(&self, c: &Change, delivery: &str) -> Result<Result<Effect, Box<Conflict>>> {
        if let Some(i) = c.key.iter().position(|v| matches!(v, Value::Null)) {
            let table = &self.tables[c.table];
            return Ok(Err(self.conflict(
                c,
                "a key column is NULL: the row has no identity, so it cannot be carried".into(),
                Some(table.columns[i].target.clone()),
                None,
                None,
            )));
        }
        let table = &self.tables[c.table];
        if !c.unrecorded.is_empty() && !matches!(c.rule, Rule::Expect { .. }) {
            bail!(
                "a change of table '{}' without some of its columns must carry the row it expects (the replay rule)",
                table.name
            );
        }
        if let Rule::Expect {
            before,
            revision: None,
        } = &c.rule
            && table.revision.is_none()
            && c.unrecorded.is_empty()
        {
            match self.wrote_if(c, before.as_ref()) {
                Ok(true) => return Ok(Ok(Effect::Written)),
                Ok(false) => {}
                // The database refused the row the change expected (a
                // UNIQUE value taken, a CHECK): as the long way would.
                Err(e) => return self.refused(c, e, None).map(Err),
            }
        }
        let here = match self.current(table, c.table, &c.key, true)? {
            Ok(r) => r,
            Err((column, why)) => return Ok(Err(self.conflict(c, why, Some(column), None, None))),
        };
        match &c.rule {
            Rule::Expect { before, revision } => {
                let effect = self.expect(c, before.as_ref(), here)?;
                if let (Ok(Effect::Written), Some(rev), Some(rc)) =
                    (&effect, revision, table.revision)
                {
                    let key = key_json(&c.key).to_string();
                    if let Some(b) = before
                        && let Value::Integer(old) = b[rc]
                    {
                        let json = row_json_of(table, b, &c.unrecorded).to_string();
                        self.db.receipts().record_evidence(
                            &Revision {
                                tbl: &table.name,
                                key: &key,
                                revision: old,
                            },
                            &Evidence {
                                kind: EvidenceKind::Superseded,
                                row: Some(json),
                            },
                            delivery,
                            c.tag,
                        )?;
                    }
                    if c.after.is_none() {
                        self.db.receipts().record_evidence(
                            &Revision {
                                tbl: &table.name,
                                key: &key,
                                revision: *rev,
                            },
                            &Evidence {
                                kind: EvidenceKind::Tombstone,
                                row: None,
                            },
                            delivery,
                            c.tag,
                        )?;
                    }
                }
                Ok(effect)
            }
            Rule::Plain => match (&here, &c.after) {
                (None, None) => Ok(Ok(Effect::Duplicate)),
                (Some(_), None) => self.write(c, here.as_ref(), None),
                (None, Some(_)) => self.write(c, None, c.after.as_ref()),
                (Some(h), Some(a)) if h == a => Ok(Ok(Effect::Duplicate)),
                (Some(h), Some(_)) => {
                    if table.on_change == OnChange::Update {
                        self.write(c, Some(h), c.after.as_ref())
                    } else {
                        let column = first_difference(table, Some(h), c.after.as_ref(), &[]);
                        Ok(Err(self.conflict(
                            c,
                            "a different row with this key is already there (no revision column to order them, and on_change is \"reject\")".into(),
                            column,
                            None,
                            here.as_ref(),
                        )))
                    }
                }
            },
            Rule::Revision(rev) => self.revision(c, *rev, here, delivery),
            Rule::Watermark(w) => {
                let (Some(h), Some(a)) = (&here, &c.after) else {
                    return match (&here, &c.after) {
                        (None, None) => Ok(Ok(Effect::Duplicate)),
                        _ => self.write(c, here.as_ref(), c.after.as_ref()),
                    };
                };
                if h == a {
                    return Ok(Ok(Effect::Duplicate));
                }
                match crate::watermark::watermark_cmp(&a[*w], &h[*w]) {
                    Some(std::cmp::Ordering::Greater) => self.write(c, Some(h), Some(a)),
                    Some(std::cmp::Ordering::Less) => Ok(Ok(Effect::Stale)),
                    Some(std::cmp::Ordering::Equal) if table.on_change == OnChange::Update => self.write(c, Some(h), Some(a)),
                    Some(std::cmp::Ordering::Equal) => Ok(Err(self.conflict(
                        c,
                        format!("the stored row has the same watermark {} but other content; set on_change = \"update\" to let the later sync win", a[*w]),
                        first_difference(table, Some(h), Some(a), &[]),
                        None,
                        Some(h),
                    ))),
                    None => Ok(Err(self.conflict(
                        c,
                        format!("watermarks {} and {} cannot be compared", a[*w], h[*w]),
                        Some(table.columns[*w].target.clone()),
                        None,
                        Some(h),
                    ))),
                }
            }
        }
    }

    /// The replay rule in one statement, where the engine has one: the
    /// write happens only if the stored row is exactly `before` in the form
    /// this side stores it, and then the rule would have written it too, so
    /// the row need not be read first. `false`: nothing was written, and
    /// the rule runs on the row read. A change of key, a change to the same
    /// content (a duplicate, not a write) and the kept columns of an insert
    /// or delete always take the long way.
    fn wrote_if(&self, c: &Change, before: Option<&Row>) -> Result<bool> {
        let table = &self.tables[c.table];
        let k = table.key_len;
        let keeps = self.side == Side::Source && !table.ignore.is_empty();
        let plain = match (before, &c.after) {
            (Some(b), Some(a)) => b != a,
            (Some(_), None) | (None, Some(_)) => !keeps,
            (None, None) => false,
        };
        let same_key = [before, c.after.as_ref()]
            .into_iter()
            .flatten()
            .all(|r| key_cmp(&r[..k], &c.key).is_eq());
        if !plain || !same_key || self.writers.borrow()[c.table].is_none() {
            return Ok(false);
        }
        // The stored form of a new value follows the class of the stored
        // one, which the condition pins to `before`'s own: the source form,
        // computed ahead when the change carries it.
        *self.stored.borrow_mut() = None;
        let computed;
        let (b, a) = match &c.source_images {
            Some((b, a)) if self.side == Side::Source => (b.as_deref(), a.as_deref()),
            _ => {
                let stored =
                    |r: Option<&Row>| r.map(|r| self.stored_form(table, r, &[])).transpose();
                let (Ok(b), Ok(a)) = (stored(before), stored(c.after.as_ref())) else {
                    return Ok(false);
                };
                computed = (b, a);
                (computed.0.as_deref(), computed.1.as_deref())
            }
        };
        // A value the source would not store as written takes the long
        // way, which names it as a conflict.
        if let Some(a) = a
            && self.unfit(c, a)?.is_some()
        {
            return Ok(false);
        }
        let clocked = match (b, a) {
            (_, Some(a)) if !self.clocks[c.table].is_empty() => {
                match self.clock(c, c.table, b.is_none(), a)? {
                    Ok(set) => set,
                    // The long way names the conflict.
                    Err(_) => return Ok(false),
                }
            }
            _ => false,
        };
        let wrote = match &mut self.writers.borrow_mut()[c.table] {
            Some(w) => w.write_if(b, a),
            None => Ok(false),
        };
        if clocked {
            self.db.side_effects().hold_clock(None)?;
        }
        wrote
    }

    /// On the source: whether the row change `c` leaves cannot be written
    /// there exactly — the spec's checks or the reverse transform refuse
    /// it, or the source column would not store it as written. `false` for
    /// a delete, and on the target.
    pub fn stuck(&self, c: &Change) -> Result<bool> {
        let (Some(after), Side::Source) = (&c.after, self.side) else {
            return Ok(false);
        };
        match source_form(&self.tables[c.table], after, &c.unrecorded) {
            Ok(row) => Ok(self.unfit(c, &row)?.is_some()),
            Err(_) => Ok(true),
        }
    }

    /// On the source: the conflict of change `c` when its row in the form
    /// written, `stored`, holds a value the source column would not store
    /// exactly (round a time's fraction, cut or pad a text, refuse a number
    /// past its precision, a label it does not have, a NULL), naming the
    /// column, the value and the column's type. `None` on the target, or
    /// when every value fits as far as the catalogue tells.
    fn unfit(&self, c: &Change, stored: &[Value]) -> Result<Option<Box<Conflict>>> {
        if self.side != Side::Source {
            return Ok(None);
        }
        let table = &self.tables[c.table];
        let id = (c.table, c.unrecorded.clone());
        let mut holding = self.holding.borrow_mut();
        let holds = match holding.entry(id) {
            std::collections::hash_map::Entry::Occupied(h) => h.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let h = match c.unrecorded.is_empty() {
                    true => self.db.catalogue().holding(&self.sql[c.table], false)?,
                    false => self
                        .db
                        .catalogue()
                        .holding(&self.partial_sql(table, &c.unrecorded), false)?,
                };
                v.insert(h)
            }
        };
        let unfit = match c.unrecorded.is_empty() {
            true => holds.unfit(stored)?,
            false => holds.unfit(
                &stored
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !c.unrecorded.contains(i))
                    .map(|(_, v)| v.clone())
                    .collect::<Row>(),
            )?,
        };
        let Some(unfit) = unfit else {
            return Ok(None);
        };
        let i = table
            .columns
            .iter()
            .position(|col| col.source == unfit.column);
        let value = i.map_or_else(String::new, |i| format!("{} ", stored[i]));
        let column = i.map(|i| table.columns[i].target.clone());
        Ok(Some(self.conflict(
            c,
            format!(
                "the source would not store the value {value}as written: {}",
                unfit.why
            ),
            column,
            None,
            None,
        )))
    }

    /// The replay rule, including a change of key.
    fn expect(
        &self,
        c: &Change,
        before: Option<&Row>,
        here: Option<Row>,
    ) -> Result<Result<Effect, Box<Conflict>>> {
        let table = &self.tables[c.table];
        let k = table.key_len;
        let moves =
            matches!((before, &c.after), (Some(_), Some(a)) if key_cmp(&c.key, &a[..k]).is_ne());
        let there = match (&c.after, moves) {
            (Some(a), true) => match self.current(table, c.table, &a[..k], false)? {
                Ok(r) => r,
                Err((column, why)) => {
                    return Ok(Err(self.conflict(c, why, Some(column), before, None)));
                }
            },
            _ => None,
        };
        let same = |a: Option<&Row>, b: Option<&Row>| same_recorded(a, b, &c.unrecorded);
        let already = if moves {
            here.is_none() && same(there.as_ref(), c.after.as_ref())
        } else {
            same(here.as_ref(), c.after.as_ref())
        };
        // An update that changed no value happened all the same (the
        // application's statement fired the row's triggers): found as
        // expected, it is written again, never taken as already there.
        let unchanged = before.is_some() && same(before, c.after.as_ref());
        if already && !(unchanged && same(here.as_ref(), before)) {
            return Ok(Ok(Effect::Duplicate));
        }
        let expected = same(here.as_ref(), before);
        if !expected || (moves && there.is_some()) {
            let (reason, found) = if expected {
                ("the key it moves to is already taken", there.as_ref())
            } else {
                match (before, &here) {
                    (None, Some(_)) => (
                        "a row with this key exists, but the change expected none",
                        here.as_ref(),
                    ),
                    (Some(_), None) => ("the row is gone, but the change expected it", None),
                    _ => (
                        "the row differs from the one the change expected",
                        here.as_ref(),
                    ),
                }
            };
            let column = first_difference(table, before, here.as_ref(), &c.unrecorded);
            return Ok(Err(self.conflict(c, reason.into(), column, before, found)));
        }
        self.write(c, here.as_ref(), c.after.as_ref())
    }

    /// The revision rule.
    fn revision(
        &self,
        c: &Change,
        rev: i64,
        here: Option<Row>,
        delivery: &str,
    ) -> Result<Result<Effect, Box<Conflict>>> {
        let table = &self.tables[c.table];
        let Some(rc) = table.revision else {
            bail!(
                "table '{}' has no revision column; a revision cannot be applied to it",
                table.name
            );
        };
        let key = key_json(&c.key).to_string();
        let evidence = |kind: EvidenceKind, row: Option<&Row>, revision: i64| {
            let row = row.map(|r| row_json(table, r).to_string());
            self.db.receipts().record_evidence(
                &Revision {
                    tbl: &table.name,
                    key: &key,
                    revision,
                },
                &Evidence { kind, row },
                delivery,
                c.tag,
            )
        };
        let rev_of = |row: &Row| match row[rc] {
            Value::Integer(i) => Ok(i),
            ref other => Err(other.clone()),
        };
        // An older revision: a duplicate of what we saw then, a conflict if it
        // says something else, otherwise kept as evidence.
        let older = |found: Option<&Row>| -> Result<Result<Effect, Box<Conflict>>> {
            let of = Revision {
                tbl: &table.name,
                key: &key,
                revision: rev,
            };
            match self.db.receipts().evidence(&of)? {
                Some(Evidence { kind, row: seen }) => {
                    let same = match (&c.after, seen) {
                        (None, None) => true,
                        (Some(a), Some(s)) => {
                            row_from_json(table, &serde_json::from_str(&s)?)
                                .ok()
                                .as_ref()
                                == Some(a)
                        }
                        _ => false,
                    };
                    if same {
                        Ok(Ok(Effect::Duplicate))
                    } else {
                        Ok(Err(self.conflict(
                            c,
                            format!(
                                "revision {rev} was seen before ({}) with different content",
                                kind.as_str()
                            ),
                            None,
                            None,
                            found,
                        )))
                    }
                }
                None => {
                    evidence(EvidenceKind::Stale, c.after.as_ref(), rev)?;
                    Ok(Ok(Effect::Stale))
                }
            }
        };
        match here {
            Some(h) => {
                let cur = match rev_of(&h) {
                    Ok(i) => i,
                    Err(v) => {
                        return Ok(Err(self.conflict(
                            c,
                            format!("the stored row's revision {v} is not an integer"),
                            Some(table.columns[rc].target.clone()),
                            None,
                            Some(&h),
                        )));
                    }
                };
                if rev > cur {
                    evidence(EvidenceKind::Superseded, Some(&h), cur)?;
                    if c.after.is_none() {
                        evidence(EvidenceKind::Tombstone, None, rev)?;
                    }
                    self.write(c, Some(&h), c.after.as_ref())
                } else if rev == cur {
                    if c.after.as_ref() == Some(&h) {
                        Ok(Ok(Effect::Duplicate))
                    } else {
                        let column = first_difference(table, Some(&h), c.after.as_ref(), &[]);
                        let why = if c.after.is_some() {
                            format!("revision {rev} is already stored with different content")
                        } else {
                            format!(
                                "a delete at revision {rev}, the revision of the stored row; a delete must carry a newer revision"
                            )
                        };
                        Ok(Err(self.conflict(c, why, column, None, Some(&h))))
                    }
                } else {
                    older(Some(&h))
                }
            }
            None => match self.db.receipts().tombstone(&table.name, &key)? {
                Some(t) if rev < t => older(None),
                Some(t) if rev == t => {
                    if c.after.is_none() {
                        Ok(Ok(Effect::Duplicate))
                    } else {
                        Ok(Err(self.conflict(
                            c,
                            format!("the record was deleted at revision {t}; an update at the same revision conflicts with that delete"),
                            None,
                            None,
                            None,
                        )))
                    }
                }
                _ => {
                    if c.after.is_none() {
                        // A delete of a record never seen here: remember it, so
                        // an older update arriving later cannot bring it back.
                        evidence(EvidenceKind::Tombstone, None, rev)?;
                        Ok(Ok(Effect::Written))
                    } else {
                        self.write(c, None, c.after.as_ref())
                    }
                }
            },
        }
    }

    /// Writes `after` where `here` is (insert, update, or delete).
    fn write(
        &self,
        c: &Change,
        here: Option<&Row>,
        after: Option<&Row>,
    ) -> Result<Result<Effect, Box<Conflict>>> {
        let table = &self.tables[c.table];
        let stored = match after {
            Some(a) => match self.stored_form(table, a, &c.unrecorded) {
                Ok(r) => Some(r),
                Err((column, why)) => {
                    return Ok(Err(self.conflict(c, why, Some(column), None, here)));
                }
            },
            None => None,
        };
        if let Some(row) = &stored
            && let Some(mut conflict) = self.unfit(c, row)?
        {
            conflict.found = here.map(|r| row_json(table, r));
            return Ok(Err(conflict));
        }
        let ctx = || {
            format!(
                "writing key {} of table '{}' in {}",
                display_key(&c.key),
                table.name,
                self.db.location()
            )
        };
        // Columns the spec does not carry survive a delete and re-insert.
        let keeps = self.side == Side::Source && !table.ignore.is_empty();
        let key_text = || key_json(&c.key).to_string();
        if keeps && here.is_some() && after.is_none() {
            self.keep_ignored(table, c, &key_text())?;
        }
        let clocked = match &stored {
            Some(row) if !self.clocks[c.table].is_empty() => {
                match self.clock(c, c.table, here.is_none(), row)? {
                    Ok(set) => set,
                    Err(mut conflict) => {
                        conflict.found = here.map(|r| row_json(table, r));
                        return Ok(Err(conflict));
                    }
                }
            }
            _ => false,
        };
        let done = if c.unrecorded.is_empty() {
            let sql = &self.sql[c.table];
            match (here, &stored) {
                (None, Some(row)) => self.db.rows().insert_row(sql, row),
                (Some(_), Some(row)) => self.db.rows().update_row(sql, &c.key, row),
                (Some(_), None) => self.db.rows().delete_row(sql, &c.key),
                (None, None) => Ok(1),
            }
        } else {
            // Only the columns the change carries are written: an update
            // leaves the others as they are, an insert to their defaults.
            let mut partial = self.partial.borrow_mut();
            let sql = partial
                .entry((c.table, c.unrecorded.clone()))
                .or_insert_with(|| self.partial_sql(table, &c.unrecorded));
            let row = stored.as_ref().map(|r| {
                r.iter()
                    .enumerate()
                    .filter(|(i, _)| !c.unrecorded.contains(i))
                    .map(|(_, v)| v.clone())
                    .collect::<Row>()
            });
            match (here, &row) {
                (None, Some(row)) => self.db.rows().insert_row(sql, row),
                (Some(_), Some(row)) => self.db.rows().update_row(sql, &c.key, row),
                (Some(_), None) => self.db.rows().delete_row(sql, &c.key),
                (None, None) => Ok(1),
            }
        };
        // An insert a rule sent elsewhere (into a partition of an
        // inheritance tree) reports no row, yet the table reads it back.
        let routed = |done: &Result<usize>| -> Result<bool> {
            Ok(matches!(done, Ok(0))
                && here.is_none()
                && stored.is_some()
                && matches!(self.current(table, c.table, &c.key, false)?, Ok(Some(r)) if same_recorded(Some(&r), after, &c.unrecorded)))
        };
        if clocked {
            self.db.side_effects().hold_clock(None)?;
        }
        let done = if routed(&done)? { Ok(1) } else { done };
        match done {
            // A write that changed no row (a trigger or rule of the
            // database that swallowed it) did not happen.
            Ok(0) => {
                let acting = self.acting.get(c.table).filter(|a| !a.is_empty());
                let by = match acting {
                    Some(a) => format!("what acts on it there: {}", a.join(", ")),
                    None => "a trigger or rule of the database swallowed it".to_string(),
                };
                Ok(Err(self.conflict(
                    c,
                    format!(
                        "{} took the write but changed no row ({by}); nothing of this batch was applied",
                        self.db.location()
                    ),
                    None,
                    None,
                    here,
                )))
            }
            Ok(_) => {
                if keeps
                    && here.is_none()
                    && let Some(row) = &stored
                {
                    self.restore_ignored(table, &row[..table.key_len], &key_text())?;
                }
                Ok(Ok(Effect::Written))
            }
            Err(e) => self.refused(c, e.context(ctx()), here).map(Err),
        }
    }

    /// The database refused the row of change `c` (say a UNIQUE index of
    /// the source that the new row would break): a conflict on this row,
    /// for the operator to settle, not a failure of the tool; any other
    /// error is the tool's.
    fn refused(&self, c: &Change, e: anyhow::Error, here: Option<&Row>) -> Result<Box<Conflict>> {
        match crate::db::constraint_violation(self.db.engine(), &e) {
            Some(msg) => {
                let reason = format!("{} refuses the row: {msg}", self.db.location());
                Ok(self.conflict(c, reason, None, None, here))
            }
            None => Err(e),
        }
    }

    /// Keeps the columns the spec does not carry of a source row about to
    /// be deleted, so that the same key inserted again gets them back.
    fn keep_ignored(&self, table: &Table, c: &Change, key_text: &str) -> Result<()> {
        let names: Vec<&str> = table.ignore.iter().map(String::as_str).collect();
        let key_names = sql_key_names(table, Side::Source);
        let columns: Vec<&str> = key_names.iter().chain(&names).copied().collect();
        let sql = self
            .db
            .rows()
            .table_sql(&table.source_table, &columns, key_names.len(), None);
        let Some(mut values) = self.db.rows().get_row(&sql, &c.key)? else {
            return Ok(());
        };
        let values = values.split_off(key_names.len());
        let row: serde_json::Map<String, Json> = names
            .iter()
            .zip(&values)
            .map(|(n, v)| (n.to_string(), v.to_json()))
            .collect();
        self.db
            .applied_set()
            .keep_columns(&self.journal, &table.name, key_text, &row, c.tag)
    }

    /// Gives a re-inserted source row the columns kept when it was deleted.
    fn restore_ignored(&self, table: &Table, key: &[Value], key_text: &str) -> Result<()> {
        let Some(kept) =
            self.db
                .applied_set()
                .take_kept_columns(&self.journal, &table.name, key_text)?
        else {
            return Ok(());
        };
        let key_names = sql_key_names(table, Side::Source);
        let mut columns = key_names.clone();
        let mut row: Row = key.to_vec();
        for (n, v) in &kept {
            columns.push(n.as_str());
            row.push(Value::from_json(v)?);
        }
        let sql = self
            .db
            .rows()
            .table_sql(&table.source_table, &columns, key_names.len(), None);
        self.db.rows().update_row(&sql, key, &row)?;
        Ok(())
    }

    fn conflict(
        &self,
        c: &Change,
        reason: String,
        column: Option<String>,
        expected: Option<&Row>,
        found: Option<&Row>,
    ) -> Box<Conflict> {
        let table = &self.tables[c.table];
        // Under the replay rule the expected row is always the before-image.
        let expected = match (&c.rule, expected) {
            (Rule::Expect { before, .. }, None) => before.as_ref(),
            (_, e) => e,
        };
        Box::new(Conflict {
            tag: c.tag,
            table: table.name.clone(),
            key: key_json(&c.key),
            column,
            reason,
            expected: expected.map(|r| row_json_of(table, r, &c.unrecorded)),
            found: found.map(|r| row_json(table, r)),
            wanted: c
                .after
                .as_ref()
                .map(|r| row_json_of(table, r, &c.unrecorded)),
        })
    }

    /// The row under `key` in canonical form; `Err((column, why))` when the
    /// stored row cannot be read canonically.
    /// `keep`: this is the row the change writes, whose storage classes
    /// [`Engine::stored_form`] keeps.
    fn current(
        &self,
        table: &Table,
        ti: usize,
        key: &[Value],
        keep: bool,
    ) -> Result<Result<Option<Row>, (String, String)>> {
        let row = self.db.rows().get_row(&self.sql[ti], key)?;
        if keep {
            *self.stored.borrow_mut() = match &row {
                Some(r)
                    if self.side == Side::Source
                        && table
                            .columns
                            .iter()
                            .any(|c| matches!(c.transform, Transform::DecimalToMinor { .. })) =>
                {
                    Some(r.clone())
                }
                _ => None,
            };
        }
        let Some(row) = row else {
            return Ok(Ok(None));
        };
        // SQLite's column affinity finds the integer 1 for the text '1'; that
        // is another record, never this one.
        if let Some(i) = (0..table.key_len).find(|&i| row[i] != key[i]) {
            return Ok(Err((
                table.columns[i].target.clone(),
                format!(
                    "the key names {} ({}) but the stored key is {} ({}); send the key with the column's own type",
                    key[i],
                    key[i].class(),
                    row[i],
                    row[i].class()
                ),
            )));
        }
        Ok(match self.side {
            Side::Target => Ok(Some(row)),
            Side::Source => match canonical(table, row) {
                Ok(r) => Ok(Some(r)),
                Err((_, column, value, why)) => Err((
                    column,
                    format!("the source holds {value}, which cannot be read: {why}"),
                )),
            },
        })
    }

    /// The statements of `table` on this side without the columns in
    /// `unrecorded`.
    fn partial_sql(&self, table: &Table, unrecorded: &[usize]) -> TableSql {
        let names: Vec<&str> = table
            .columns
            .iter()
            .enumerate()
            .filter(|(i, _)| !unrecorded.contains(i))
            .map(|(_, c)| match self.side {
                Side::Source => c.source.as_str(),
                Side::Target => c.target.as_str(),
            })
            .collect();
        let name = match self.side {
            Side::Source => &table.source_table,
            Side::Target => &table.target_table,
        };
        self.db.rows().table_sql(name, &names, table.key_len, None)
    }

    /// The canonical row as this side stores it, after the column checks;
    /// the columns in `unrecorded` stay NULL.
    fn stored_form(
        &self,
        table: &Table,
        row: &Row,
        unrecorded: &[usize],
    ) -> Result<Row, (String, String)> {
        match self.side {
            Side::Target => {
                check_row(table, row, unrecorded)?;
                Ok(row.clone())
            }
            Side::Source => {
                let stored = self.stored.borrow();
                let Some(was) = stored.as_ref() else {
                    return source_form(table, row, unrecorded);
                };
                check_row(table, row, unrecorded)?;
                table
                    .columns
                    .iter()
                    .zip(row)
                    .zip(was)
                    .enumerate()
                    .map(|(i, ((col, v), was))| {
                        if unrecorded.contains(&i) {
                            return Ok(Value::Null);
                        }
                        let back = reverse_column(col, v)?;
                        Ok(match &col.transform {
                            Transform::DecimalToMinor { scale, .. } => {
                                keep_class(back, v, was, *scale)
                            }
                            _ => back,
                        })
                    })
                    .collect()
            }
        }
    }
}

/// A money value written back to a source row in the storage class the row
/// holds: an INTEGER stays an integer when the amount is whole, a REAL a real
/// when the real reads back as exactly that amount; otherwise the canonical
/// text (`back`), which is exact. A new row gets the text, which the
/// column's affinity stores as the application's own writes would be.
fn keep_class(back: Value, minor: &Value, was: &Value, scale: u32) -> Value {
    let (Value::Text(text), Value::Integer(m)) = (&back, minor) else {
        return back;
    };
    let unit = 10i64.pow(scale);
    match was {
        Value::Integer(_) if m % unit == 0 => Value::Integer(m / unit),
        Value::Integer(_) | Value::Real(_) => match text.parse::<f64>() {
            Ok(r) if crate::transform::real_to_minor(r, scale) == Ok(*m) => Value::Real(r),
            _ => back,
        },
        _ => back,
    }
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

fn first_difference(
    table: &Table,
    a: Option<&Row>,
    b: Option<&Row>,
    unrecorded: &[usize],
) -> Option<String> {
    let (a, b) = (a?, b?);
    (0..a.len().min(b.len()))
        .find(|&i| a[i] != b[i] && !unrecorded.contains(&i))
        .map(|i| table.columns[i].target.clone())
}

/// A canonical row as a JSON object keyed by target column names.
pub fn row_json(table: &Table, row: &[Value]) -> Json {
    row_json_of(table, row, &[])
}

/// The same, leaving out the columns in `unrecorded`, which carry nothing
/// (see [`Change::unrecorded`]).
pub fn row_json_of(table: &Table, row: &[Value], unrecorded: &[usize]) -> Json {
    Json::Object(
        table
            .columns
            .iter()
            .zip(row)
            .enumerate()
            .filter(|(i, _)| !unrecorded.contains(i))
            .map(|(_, (c, v))| (c.target.clone(), v.to_json()))
            .collect(),
    )
}

/// A canonical row from a JSON object keyed by target column names. Every
/// mapped column must be present and no other.
pub fn row_from_json(table: &Table, json: &Json) -> Result<Row> {
    let (row, absent) = row_from_json_of(table, json)?;
    if let Some(&i) = absent.first() {
        bail!(
            "column '{}' of table '{}' is missing",
            table.columns[i].target,
            table.name
        );
    }
    Ok(row)
}

/// A canonical row from a JSON object keyed by target column names that
/// may leave out columns other than the key: the row, NULL in their
/// places, and the columns left out (see [`Change::unrecorded`]). No column
/// the spec does not map.
pub fn row_from_json_of(table: &Table, json: &Json) -> Result<(Row, Vec<usize>)> {
    let Json::Object(obj) = json else {
        bail!("a row must be a JSON object, found {json}");
    };
    for name in obj.keys() {
        if !table.columns.iter().any(|c| c.target == *name) {
            bail!(
                "column '{name}' is not a mapped target column of table '{}'",
                table.name
            );
        }
    }
    let mut absent = Vec::new();
    let mut row = Vec::with_capacity(table.columns.len());
    for (i, c) in table.columns.iter().enumerate() {
        match obj.get(&c.target) {
            Some(v) => {
                row.push(Value::from_json(v).with_context(|| format!("column '{}'", c.target))?)
            }
            None if i < table.key_len => bail!(
                "key column '{}' of table '{}' is missing",
                c.target,
                table.name
            ),
            None => {
                absent.push(i);
                row.push(Value::Null);
            }
        }
    }
    Ok((row, absent))
}
