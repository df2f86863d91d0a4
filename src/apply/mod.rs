//! The apply engine: the one place that writes rows and the bookkeeping that
//! proves what was written. Load, replay and change-feed apply all go through
//! [`Applier::apply_batch`].
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

mod batch;
mod checkpoint;
mod expect;
mod plain;
mod revision;
mod rows;
#[cfg(test)]
mod tests;
mod write;

pub use checkpoint::{
    Checkpoint, DeliveryCheckpoint, JournalCheckpoint, LoadCheckpoint, SyncCheckpoint,
};
use rows::short;
pub use rows::{
    row_from_json, row_from_json_of, row_json, row_json_of, same_recorded, source_form,
};
use write::Current;

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::{Catalogue, ConditionalWrite, Db, Holding, TableSql, Transaction};
use crate::spec::{Side, Table};
use crate::value::{Block, Row, Value, key_json};

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
    /// The rule (or the database) refused it: the batch ends here.
    Conflict(Box<Conflict>),
}

/// The engine bound to one database of the migration.
pub struct Applier<'a> {
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
    /// The transaction opened by [`Applier::hold`], whose savepoints the
    /// batches are until [`Applier::commit_held`] commits it: load holds its
    /// first commit until every source row has been validated.
    held: std::cell::RefCell<Option<Transaction<'a>>>,
    /// The held batches wait for the end of the run ([`Applier::hold_whole`]).
    whole: std::cell::Cell<bool>,
    /// [`Applier::hold`] made the control tables the held batches write,
    /// outside their transaction (a schema change commits at once): rolled
    /// back, the batches leave them empty, and they are taken away again.
    made: std::cell::Cell<bool>,
    /// The source row of the change being applied, as stored (storage
    /// classes included), kept only for tables with money columns: a money
    /// value written back keeps the class the row had (see
    /// [`Applier::stored_form`]).
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
    /// clock to the row's value in them ([`Applier::clock`]).
    clocks: Vec<Vec<crate::side_effects::Clock>>,
}

/// A table's conditional writes on one database.
type Writer<'a> = Box<dyn ConditionalWrite + 'a>;

impl<'a> Applier<'a> {
    /// The engine writing `tables` (a spec's, or sync's plan of one) into
    /// `db`, the database on `side`.
    pub fn new(tables: &'a [Table], db: &'a Db, side: Side) -> Applier<'a> {
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
        Applier {
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
    pub fn clocks(mut self, clocks: Vec<Vec<crate::side_effects::Clock>>) -> Applier<'a> {
        self.clocks = clocks;
        self
    }

    /// The same engine, told which triggers and rules of the database act
    /// on its writes to each table (in the order of `tables`), so that a
    /// swallowed write is named by what can swallow it.
    pub fn acting(mut self, acting: Vec<Vec<String>>) -> Applier<'a> {
        self.acting = acting;
        self
    }

    /// The same engine writing inside the caller's transaction, each batch
    /// a savepoint of it (see [`Applier::run`]): the caller commits or rolls
    /// back every batch at once, and carries the id generators after its
    /// commit.
    pub fn within(mut self) -> Applier<'a> {
        self.within = true;
        self
    }

    /// Opens a transaction that the next batches join, uncommitted, until
    /// [`Applier::commit_held`] or [`Applier::rollback_held`].
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

    /// [`Applier::hold`] until [`Applier::commit_held`] whatever happens
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
    /// ([`Applier::hold_whole`]).
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
        // The transaction is over: dropping the empty tables [`Applier::hold`]
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
    pub fn for_journal(tables: &'a [Table], db: &'a Db, journal: &str) -> Applier<'a> {
        let mut e = Applier::new(tables, db, Side::Source);
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

    /// Applies one change by its rule.
    fn apply_one(&self, c: &Change, delivery: &str) -> Result<Effect> {
        if let Some(i) = c.key.iter().position(|v| matches!(v, Value::Null)) {
            let table = &self.tables[c.table];
            return Ok(Effect::Conflict(self.conflict(
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
                Ok(true) => return Ok(Effect::Written),
                Ok(false) => {}
                // The database refused the row the change expected (a
                // UNIQUE value taken, a CHECK): as the long way would.
                Err(e) => return self.refused(c, e, None).map(Effect::Conflict),
            }
        }
        let here = match self.current(table, c.table, &c.key, true)? {
            Current::Row(r) => r,
            Current::Unreadable { column, why } => {
                return Ok(Effect::Conflict(self.conflict(
                    c,
                    why,
                    Some(column),
                    None,
                    None,
                )));
            }
        };
        match &c.rule {
            Rule::Expect { before, revision } => {
                let effect = self.expect(c, before.as_ref(), here)?;
                if let (Effect::Written, Some(rev)) = (&effect, revision) {
                    self.record_replaced(c, before.as_ref(), *rev, delivery)?;
                }
                Ok(effect)
            }
            Rule::Plain => self.plain(c, here),
            Rule::Revision(rev) => self.revision(c, *rev, here, delivery),
            Rule::Watermark(w) => self.watermark(c, *w, here),
        }
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
}
