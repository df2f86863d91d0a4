//! What a batch commits with its rows: the record that makes the batch happen
//! once. Each run that writes through the engine brings its own — load its
//! checkpoint, replay the applied set, sync its cursor, a feed its receipt —
//! and the engine asks each the same questions at the same points of the
//! batch's transaction.

use anyhow::{Result, bail};

use super::{Applied, BatchOutcome, short};
use crate::db::control::progress::{NewBatch, SeenColumn};
use crate::db::control::receipts::Receipt;
use crate::db::{ColumnInfo, Db, RowsExt};
use crate::spec::Side;
use crate::value::Value;

/// A batch's record, asked in this order inside the write transaction:
/// `ensure_tables`, `precondition`, `before_writes`, the changes, `record`.
pub trait Checkpoint {
    /// Creates the control tables this checkpoint writes, inside the batch:
    /// a batch that never commits leaves no trace.
    fn ensure_tables(&self, _db: &Db) -> Result<()> {
        Ok(())
    }

    /// Read inside the write lock, so no other process can change it before
    /// the batch commits: `Some(outcome)` ends the batch with nothing written.
    fn precondition(&self, db: &Db) -> Result<Option<BatchOutcome>>;

    /// Runs after the precondition, before the first change.
    fn before_writes(&self, _db: &Db) -> Result<()> {
        Ok(())
    }

    /// What the evidence and the applied set name as the batch's delivery.
    fn delivery(&self) -> &str;

    /// The journal whose applied set the batch's entries are checked
    /// against, with their seqs, change by change; `None` when none is.
    fn applied_entries(&self, _side: Side) -> Option<AppliedEntries<'_>> {
        None
    }

    /// Records the batch, after its changes and before the commit.
    fn record(&self, db: &Db, side: Side, done: &Applied) -> Result<()>;
}

/// The journal entries of a batch that the applied set is asked about,
/// change by change: each seq (0 for a change that is no journal entry) was
/// applied already, or not.
pub struct AppliedEntries<'a> {
    /// The applied set's name for them (a journal's identity, or the feed's
    /// name).
    pub journal: &'a str,
    pub seqs: &'a [i64],
}

/// Load: the table's last committed key; `clear` empties the target table
/// first (load `--replace`). `expect_rows` is the checkpoint's row count this
/// load saw, so a concurrent load is noticed.
pub struct LoadCheckpoint<'a> {
    pub table: &'a str,
    pub target_table: &'a str,
    pub last_key: Option<String>,
    pub expect_rows: i64,
    pub rows: i64,
    pub done: bool,
    pub clear: bool,
    /// The source table's id sequence, carried to the target with the last
    /// batch, which also moves every sequence feeding the target table past
    /// the largest value of its column.
    pub sequence: Option<i64>,
}

impl Checkpoint for LoadCheckpoint<'_> {
    fn precondition(&self, db: &Db) -> Result<Option<BatchOutcome>> {
        let rows = db.progress().load_checkpoint(self.table)?.map(|c| c.rows);
        // No checkpoint yet is a load that has committed no row.
        let rows = rows.unwrap_or(0);
        Ok((rows != self.expect_rows && !self.clear).then_some(BatchOutcome::Raced))
    }

    fn before_writes(&self, db: &Db) -> Result<()> {
        if self.clear {
            db.rows()
                .clear_table(&db.rows().table_sql(self.target_table, &[], 0, None))?;
        }
        Ok(())
    }

    fn delivery(&self) -> &str {
        "load"
    }

    fn record(&self, db: &Db, _side: Side, _done: &Applied) -> Result<()> {
        if self.done {
            db.catalogue()
                .raise_sequence(self.target_table, self.sequence.unwrap_or(0))?;
        }
        let last_key = match &self.last_key {
            Some(k) => Some(k.clone()),
            None => db
                .progress()
                .load_checkpoint(self.table)?
                .and_then(|c| c.last_key),
        };
        db.progress().set_load_checkpoint(
            self.table,
            &crate::db::control::progress::LoadCheckpoint {
                last_key,
                rows: self.rows,
                done: self.done,
            },
        )
    }
}

/// Replay: these journal `seqs` are applied, and the last applied must
/// still be `after` (else another replay got there first).
pub struct JournalCheckpoint<'a> {
    pub journal: &'a str,
    /// Where the journal's entries start: "none applied yet" reads as it.
    pub floor: i64,
    pub after: i64,
    pub seqs: &'a [i64],
    pub delivery: &'a str,
}

impl Checkpoint for JournalCheckpoint<'_> {
    fn precondition(&self, db: &Db) -> Result<Option<BatchOutcome>> {
        let last = db.applied_set().last(self.journal)?.max(self.floor);
        Ok((last != self.after).then_some(BatchOutcome::Raced))
    }

    fn delivery(&self) -> &str {
        self.delivery
    }

    fn record(&self, db: &Db, _side: Side, _done: &Applied) -> Result<()> {
        let recorded = db
            .applied_set()
            .record_run(self.journal, self.seqs, self.delivery)?;
        if recorded != self.seqs.len() {
            bail!(
                "journal entries {}..{} are already recorded as applied, some or all; another replay is running against this source",
                self.seqs.iter().min().copied().unwrap_or(0),
                self.seqs.iter().max().copied().unwrap_or(0)
            );
        }
        Ok(())
    }
}

/// A sync batch: its content digest and watermark range advance the table's
/// cursor; `schema` is the source's columns as this sync saw them.
pub struct SyncCheckpoint<'a> {
    pub table: &'a str,
    pub batch: &'a str,
    pub first: &'a Value,
    pub last: &'a Value,
    pub last_key: &'a str,
    pub schema: &'a [ColumnInfo],
}

impl Checkpoint for SyncCheckpoint<'_> {
    fn ensure_tables(&self, db: &Db) -> Result<()> {
        db.progress().ensure_sync_tables()
    }

    fn precondition(&self, db: &Db) -> Result<Option<BatchOutcome>> {
        // The batch id is a digest of its content: seen, it changes nothing
        // (a rerun over the same snapshot).
        Ok(db
            .progress()
            .sync_batch_seen(self.table, self.batch)?
            .then_some(BatchOutcome::Replayed))
    }

    fn delivery(&self) -> &str {
        self.batch
    }

    fn record(&self, db: &Db, _side: Side, done: &Applied) -> Result<()> {
        let seen: Vec<SeenColumn> = self
            .schema
            .iter()
            .map(|c| SeenColumn {
                name: c.name.clone(),
                decl_type: c.decl_type.clone(),
            })
            .collect();
        db.progress().record_source_schema(self.table, &seen)?;
        db.progress().record_sync_batch(
            self.table,
            &NewBatch {
                batch: self.batch,
                rows: done.written + done.duplicate + done.stale,
                changed: done.written,
                first_watermark: self.first,
                last_watermark: self.last,
                last_key: self.last_key,
            },
        )
    }
}

/// A change-feed delivery and its receipt; `seqs` are journal sequence
/// numbers the lines carry (a feed exported from the journal).
pub struct DeliveryCheckpoint<'a> {
    pub feed: &'a str,
    pub delivery: &'a str,
    pub digest: &'a str,
    pub first: i64,
    pub last: i64,
    pub seqs: &'a [i64],
}

impl Checkpoint for DeliveryCheckpoint<'_> {
    fn ensure_tables(&self, db: &Db) -> Result<()> {
        db.receipts().ensure()
    }

    fn precondition(&self, db: &Db) -> Result<Option<BatchOutcome>> {
        let (feed, delivery, first, last) = (self.feed, self.delivery, self.first, self.last);
        if let Some(seen) = db.receipts().digest(feed, delivery)? {
            return Ok(Some(if seen == self.digest {
                BatchOutcome::Replayed
            } else {
                BatchOutcome::Refused(format!(
                    "delivery '{delivery}' of feed '{feed}' was committed before with different content (digest {} then, {} now); a delivery id must never be reused for other changes",
                    short(&seen),
                    short(self.digest)
                ))
            }));
        }
        let at = db.receipts().checkpoint(feed)?;
        if at.checked_add(1) != Some(first) {
            return Ok(Some(BatchOutcome::Refused(if first <= at {
                format!(
                    "delivery '{delivery}' (positions {first}..{last}) is stale: feed '{feed}' is already at position {at} and no delivery with this id was committed"
                )
            } else {
                format!(
                    "delivery '{delivery}' (positions {first}..{last}) is from the future: feed '{feed}' is at position {at}, so positions {}..{} are missing; apply them first",
                    at.saturating_add(1),
                    first - 1
                )
            })));
        }
        Ok(None)
    }

    fn delivery(&self) -> &str {
        self.delivery
    }

    /// The applied set of journal entries is kept per journal: a feed
    /// exported from a journal is named after it. Journal sequence numbers
    /// mean something only in the source, where `_cutover_applied` lives.
    fn applied_entries(&self, side: Side) -> Option<AppliedEntries<'_>> {
        (side == Side::Source).then_some(AppliedEntries {
            journal: self.feed,
            seqs: self.seqs,
        })
    }

    fn record(&self, db: &Db, side: Side, done: &Applied) -> Result<()> {
        db.receipts().insert(&Receipt {
            feed: self.feed,
            delivery: self.delivery,
            digest: self.digest,
            first: self.first,
            last: self.last,
            written: done.written,
            duplicate: done.duplicate,
            stale: done.stale,
        })?;
        if side == Side::Source {
            let at = db.control().now()?;
            let seqs: Vec<i64> = self.seqs.iter().copied().filter(|&s| s > 0).collect();
            db.applied_set()
                .record_entries(self.feed, &seqs, self.delivery, &at)?;
        }
        Ok(())
    }
}
