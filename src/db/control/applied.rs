//! The source's applied set (`_cutover_applied`): the journal entries
//! replayed into it, per journal identity (or feed), as runs of entries
//! that never overlap — one per replay batch, one per entry a feed applies
//! — written in the same transaction as the rows; and the columns replay
//! keeps for the rows it deletes (`_cutover_kept`).

use anyhow::{Result, bail};
use serde_json::{Map, Value as Json};

use super::{Control, P, Set, flag, int, opt_text};

/// Whether a recorded run of journal `:journal` meets the seqs
/// `:first..=:last`: the first run ending at or after `:first` starts at or
/// before `:last` (runs never overlap, so no other can). One look-up in
/// the primary key.
const MEETS: &str = "coalesce((SELECT coalesce(first_seq, seq) FROM {{schema}}._cutover_applied
     WHERE journal = :journal AND seq >= :first ORDER BY seq LIMIT 1), :last + 1) <= :last";

/// How far replay (or a feed) got in one journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Entries applied.
    pub entries: i64,
    /// The last seq applied; 0 before the first.
    pub last: i64,
}

/// The source's applied set, on one connection.
#[derive(Clone, Copy)]
pub struct AppliedSet<'a>(pub(crate) Control<'a>);

impl AppliedSet<'_> {
    /// Creates the applied set and the kept columns. An applied set from a
    /// cutover that recorded no journal identity is refused rather than
    /// misread; one from before runs were recorded gains their columns,
    /// its rows read as runs of one entry.
    pub fn ensure(&self) -> Result<()> {
        let c = &self.0;
        if c.has("_cutover_applied")? {
            if !c.has_column("_cutover_applied", "journal")? {
                bail!(
                    "{}: _cutover_applied was written by an older cutover and records no journal identity; finish that rollback with the version that started it",
                    c.location
                );
            }
            if !c.has_column("_cutover_applied", "first_seq")? {
                c.exec(
                    "ALTER TABLE {{schema}}._cutover_applied ADD COLUMN first_seq {bigint}",
                    &[],
                )?;
                c.exec(
                    "ALTER TABLE {{schema}}._cutover_applied ADD COLUMN entries {bigint} NOT NULL DEFAULT 1",
                    &[],
                )?;
            }
        }
        c.ensure(Set::Applied)
    }

    /// Makes the applied set as [`AppliedSet::ensure`]; `true` when none
    /// of it was there before.
    pub fn make(&self) -> Result<bool> {
        let absent = self.0.absent(Set::Applied)?;
        self.ensure()?;
        Ok(absent)
    }

    /// Drops the applied set if it holds no row (see
    /// [`super::Control::drop_if_empty`]).
    pub fn drop_if_empty(&self) -> Result<()> {
        self.0.drop_if_empty(Set::Applied)
    }

    /// Whether the applied set can name a journal: false when there is no
    /// applied set yet.
    fn present(&self) -> Result<bool> {
        Ok(self.0.has("_cutover_applied")? && self.0.has_column("_cutover_applied", "journal")?)
    }

    /// How far journal `journal` was applied; nothing when absent.
    pub fn progress(&self, journal: &str) -> Result<Applied> {
        if !self.present()? {
            return Ok(Applied::default());
        }
        let r = self.0.one(
            "SELECT coalesce(sum(entries), 0), coalesce(max(seq), 0) FROM {{schema}}._cutover_applied
             WHERE journal = :journal",
            &[("journal", P::Text(journal))],
        )?;
        Ok(match r {
            Some(r) => Applied {
                entries: int(&r, 0)?,
                last: int(&r, 1)?,
            },
            None => Applied::default(),
        })
    }

    /// The last seq of `journal` applied; 0 before the first. A look-up
    /// at the end of the primary key, cheap enough before every batch.
    pub fn last(&self, journal: &str) -> Result<i64> {
        if !self.present()? {
            return Ok(0);
        }
        let r = self.0.one(
            "SELECT coalesce(max(seq), 0) FROM {{schema}}._cutover_applied WHERE journal = :journal",
            &[("journal", P::Text(journal))],
        )?;
        r.map_or(Ok(0), |r| int(&r, 0))
    }

    /// Whether entry `seq` of `journal` was applied: the first run ending
    /// at or after it starts at or before it. Called per change inside a
    /// batch, after [`AppliedSet::ensure`]: no catalogue look-up.
    pub fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        let r = self.0.one(
            &format!("SELECT CASE WHEN {MEETS} THEN 1 ELSE 0 END"),
            &[
                ("journal", P::Text(journal)),
                ("first", P::Int(seq)),
                ("last", P::Int(seq)),
            ],
        )?;
        r.map_or(Ok(false), |r| flag(&r, 0))
    }

    /// Holds the applied set against every other writer until this
    /// transaction ends, where the engine's write transaction does not
    /// already: two runs that overlap without sharing their last seq do
    /// not meet in the primary key; under the lock the second sees the
    /// first committed, and records nothing.
    fn lock(&self) -> Result<()> {
        if let Some(lock) = self.0.dialect().lock_applied {
            self.0.exec(lock, &[])?;
        }
        Ok(())
    }

    /// Records each of a delivery's entries as applied at `at` (the batch's
    /// commit time), a run of one, skipping those already recorded;
    /// returns how many were new.
    pub fn record_entries(
        &self,
        journal: &str,
        seqs: &[i64],
        delivery: &str,
        at: &str,
    ) -> Result<usize> {
        if seqs.is_empty() {
            return Ok(0);
        }
        self.lock()?;
        let mut new = 0;
        for &seq in seqs {
            new += self.0.exec(
                &format!(
                    "INSERT INTO {{{{schema}}}}._cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
                     SELECT :journal, :first, :delivery, :at, :first, 1 WHERE NOT ({MEETS}) {}",
                    (self.0.dialect().upsert)(&["journal", "seq"], &[], "")
                ),
                &[
                    ("journal", P::Text(journal)),
                    ("first", P::Int(seq)),
                    ("last", P::Int(seq)),
                    ("delivery", P::Text(delivery)),
                    ("at", P::Text(at)),
                ],
            )?;
        }
        Ok(new as usize)
    }

    /// Records a batch's entries (every entry of the journal from the least
    /// of `seqs` to the greatest) as one run; returns how many were new:
    /// all of them, or none when the run meets one recorded.
    pub fn record_run(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let (Some(&first), Some(&last)) = (seqs.iter().min(), seqs.iter().max()) else {
            return Ok(0);
        };
        self.lock()?;
        let n = self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
                 SELECT :journal, :last, :delivery, {{now}}, :first, :entries WHERE NOT ({MEETS}) {}",
                (self.0.dialect().upsert)(&["journal", "seq"], &[], "")
            ),
            &[
                ("journal", P::Text(journal)),
                ("first", P::Int(first)),
                ("last", P::Int(last)),
                ("delivery", P::Text(delivery)),
                ("entries", P::Int(seqs.len() as i64)),
            ],
        )?;
        Ok(if n == 1 { seqs.len() } else { 0 })
    }

    /// Keeps the columns of a source row that the spec does not carry, as
    /// replay deletes it; a later delete of the same key replaces them.
    pub fn keep_columns(
        &self,
        journal: &str,
        tbl: &str,
        key: &str,
        row: &Map<String, Json>,
        seq: i64,
    ) -> Result<()> {
        let row = serde_json::to_string(row)?;
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_kept (journal, tbl, \"key\", \"row\", seq)
                 VALUES (:journal, :tbl, :key, :row, :seq) {}",
                (self.0.dialect().upsert)(&["journal", "tbl", "\"key\""], &["\"row\"", "seq"], "")
            ),
            &[
                ("journal", P::Text(journal)),
                ("tbl", P::Text(tbl)),
                ("key", P::Text(key)),
                ("row", P::Text(&row)),
                ("seq", P::Int(seq)),
            ],
        )?;
        Ok(())
    }

    /// Takes back (and forgets) the kept columns of a key that replay
    /// inserts again.
    pub fn take_kept_columns(
        &self,
        journal: &str,
        tbl: &str,
        key: &str,
    ) -> Result<Option<Map<String, Json>>> {
        let params = [
            ("journal", P::Text(journal)),
            ("tbl", P::Text(tbl)),
            ("key", P::Text(key)),
        ];
        let Some(r) = self.0.one(
            "SELECT \"row\" FROM {{schema}}._cutover_kept WHERE journal = :journal AND tbl = :tbl AND \"key\" = :key",
            &params,
        )?
        else {
            return Ok(None);
        };
        self.0.exec(
            "DELETE FROM {{schema}}._cutover_kept WHERE journal = :journal AND tbl = :tbl AND \"key\" = :key",
            &params,
        )?;
        match opt_text(&r, 0)? {
            Some(text) => Ok(Some(serde_json::from_str(&text)?)),
            None => Ok(None),
        }
    }
}
