//! One batch inside its transaction: the checkpoint's precondition, each
//! change through its rule (or a block of rows through the load's fast
//! path), the id generators moved past what was written, and the
//! checkpoint recorded with the batch.

use std::collections::BTreeSet;

use anyhow::{Context, Result};

use super::{
    Applied, Applier, Batch, BatchOutcome, Change, Checkpoint, Effect, FailedChange, Fault, Rule,
    crash_at, sql_key_names,
};
use crate::spec::Side;
use crate::value::Block;

/// What a batch wrote so far, and the first change's crash point.
#[derive(Default)]
struct Tally(Applied);

impl Tally {
    /// Counts `n` changes (or journal entries) that had `effect`, the
    /// `i`th of the batch. A conflict counts nothing: it ends the batch,
    /// which its caller returns first.
    fn count(&mut self, effect: &Effect, i: usize, n: u64) {
        match effect {
            Effect::Written => self.0.written += n,
            Effect::Duplicate => self.0.duplicate += n,
            Effect::Stale => self.0.stale += n,
            Effect::Conflict(_) => return,
        }
        if i == 0 {
            crash_at(Fault::MidBatch);
        }
    }
}

impl Applier<'_> {
    /// The batch, inside the transaction (or savepoint) [`Applier::run`]
    /// opened.
    pub(super) fn apply_inside(
        &self,
        batch: Batch<'_>,
        checkpoint: &dyn Checkpoint,
    ) -> Result<BatchOutcome> {
        if self.ddl_inside() {
            self.ensure_control(checkpoint)?;
        }
        if let Some(outcome) = checkpoint.precondition(self.db)? {
            return Ok(outcome);
        }
        checkpoint.before_writes(self.db)?;
        let written_tables: BTreeSet<usize> = match &batch {
            Batch::Changes(changes) => changes.iter().map(|c| c.table).collect(),
            Batch::Rows { table, .. } => [*table].into(),
        };
        let mut tally = Tally::default();
        let ended = match batch {
            Batch::Changes(changes) => self.apply_changes(changes, checkpoint, &mut tally)?,
            Batch::Rows {
                table,
                blocks,
                first_tag,
            } => self.load_blocks(table, blocks, first_tag, checkpoint, &mut tally)?,
        };
        if let Some(conflict) = ended {
            return Ok(conflict);
        }
        let done = tally.0;
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

    /// Each change through its rule; the batch's conflict, if one ends it.
    fn apply_changes(
        &self,
        changes: &[Change],
        checkpoint: &dyn Checkpoint,
        tally: &mut Tally,
    ) -> Result<Option<BatchOutcome>> {
        let delivery = checkpoint.delivery();
        let applied = checkpoint.applied_entries(self.side);
        for (i, c) in changes.iter().enumerate() {
            // A journal entry already applied (by a replay or another feed)
            // is not applied twice.
            if let Some(a) = &applied
                && let Some(&seq) = a.seqs.get(i)
                && seq > 0
                && self.db.applied_set().is_applied(a.journal, seq)?
            {
                tally.count(&Effect::Duplicate, i, c.entries);
                continue;
            }
            let effect = self.apply_one(c, delivery).with_context(|| FailedChange {
                index: i,
                tag: c.tag,
            })?;
            let counted = match effect {
                // The entries of a record folded into its net effect were
                // applied, even where they cancel out.
                Effect::Duplicate if c.entries > 1 => Effect::Written,
                other => other,
            };
            if let Effect::Conflict(conflict) = counted {
                return Ok(Some(BatchOutcome::Conflict(conflict)));
            }
            tally.count(&counted, i, c.entries);
        }
        Ok(None)
    }

    /// Loads canonical rows of table `ti` under the plain rule; the
    /// batch's conflict, if one ends it. Where the target enforces the
    /// key's uniqueness, each row is simply inserted (the whole batch in
    /// one statement where the engine has one) and only a collision is
    /// looked at.
    fn load_blocks(
        &self,
        ti: usize,
        blocks: &[Block],
        first_tag: i64,
        checkpoint: &dyn Checkpoint,
        tally: &mut Tally,
    ) -> Result<Option<BatchOutcome>> {
        let table = &self.tables[ti];
        let sql = &self.sql[ti];
        let key: Vec<&str> = sql_key_names(table, self.side);
        // Rows reach here from `canonical_block`, which has applied the
        // column checks; the source side would need the reverse transform,
        // so only the target takes the fast path.
        let fast =
            self.side == Side::Target && self.db.catalogue().key_is_unique(&sql.table, &key)?;
        // The whole batch in one statement where the engine has one (COPY):
        // a collision leaves nothing written, and the rows go one by one.
        if fast && let Some(n) = self.db.rows().bulk_insert(sql, blocks)? {
            for i in 0..n as usize {
                tally.count(&Effect::Written, i, 1);
            }
            return Ok(None);
        }
        // Prepared only where it is used: an engine may refuse its
        // statement on a table it cannot trust a key on (PostgreSQL's ON
        // CONFLICT beside an INSERT rule).
        let mut ins = match fast {
            true => Some(self.db.rows().inserter(sql)?),
            false => None,
        };
        let delivery = checkpoint.delivery();
        let mut i = 0usize;
        for b in blocks {
            for r in 0..b.rows() {
                let tag = first_tag + i as i64;
                let inserted = match ins.as_mut() {
                    Some(ins) => ins
                        .insert(b, r)
                        .with_context(|| FailedChange { index: i, tag })?,
                    None => false,
                };
                let effect = if inserted {
                    Effect::Written
                } else {
                    // A collision (or no unique key to rely on): the plain
                    // rule decides, on the stored row.
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
                    self.apply_one(&c, delivery)
                        .with_context(|| FailedChange { index: i, tag })?
                };
                if let Effect::Conflict(conflict) = effect {
                    return Ok(Some(BatchOutcome::Conflict(conflict)));
                }
                tally.count(&effect, i, 1);
                i += 1;
            }
        }
        Ok(None)
    }
}
