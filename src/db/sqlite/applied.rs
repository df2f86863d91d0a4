//! The source's applied set (`_cutover_applied`) and kept columns
//! (`_cutover_kept`), written by replay in the same transaction as the rows.

use anyhow::{Result, bail};
use rusqlite::{OptionalExtension, params};

use super::*;

const VERDICTS_DDL: &str = include_str!("../../../sql/sqlite/verdicts.sql");

/// Whether a recorded run of journal `?1` meets the seqs `?2..=?3`: the
/// first run ending at or after `?2` starts at or before `?3` (runs never
/// overlap, so no other can). One look-up in the primary key.
const COVERS: &str = "coalesce((SELECT coalesce(first_seq, seq) <= ?3 FROM _cutover_applied
     WHERE journal = ?1 AND seq >= ?2 ORDER BY seq LIMIT 1), 0)";

impl AppliedSet for Sqlite {
    /// Creates the source's applied set (per journal identity) and kept
    /// columns. A source replayed by an older cutover, whose applied set had
    /// no journal identity, is refused rather than misread.
    fn ensure_applied_table(&self) -> Result<()> {
        if self.has_table("_cutover_applied")? && !self.has_column("_cutover_applied", "journal")? {
            bail!(
                "{}: _cutover_applied was written by an older cutover and records no journal identity; finish that rollback with the version that started it",
                self.location
            );
        }
        // An applied set from before runs were recorded gains their columns;
        // its rows read as runs of one entry.
        if self.has_table("_cutover_applied")?
            && !self.has_column("_cutover_applied", "first_seq")?
        {
            self.conn.execute_batch(
                "ALTER TABLE _cutover_applied ADD COLUMN first_seq INTEGER;
                 ALTER TABLE _cutover_applied ADD COLUMN entries INTEGER NOT NULL DEFAULT 1;",
            )?;
        }
        Ok(self.conn.execute_batch(APPLIED_DDL)?)
    }

    /// `(entries, last seq applied)` of journal `journal` in
    /// `_cutover_applied`; zeros when absent.
    fn applied_progress(&self, journal: &str) -> Result<(i64, i64)> {
        if !self.has_applied()? {
            return Ok((0, 0));
        }
        Ok(self.conn.query_row(
            "SELECT coalesce(sum(entries), 0), coalesce(max(seq), 0) FROM _cutover_applied WHERE journal = ?1",
            [journal],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?)
    }

    /// The last `seq` of `journal` applied; 0 before the first. A look-up in
    /// the primary key, cheap enough to run before every batch.
    fn applied_last(&self, journal: &str) -> Result<i64> {
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

    /// Whether journal entry `seq` was applied: the first run ending at or
    /// after it starts at or before it. Called per change inside a batch,
    /// after [`Db::ensure_applied_table`]: no catalogue look-up.
    fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached(&format!("SELECT {COVERS}"))?
            .query_row(params![journal, seq, seq], |r| r.get(0))?)
    }

    /// Records each of a delivery's journal entries as applied, a run of
    /// one, skipping those already recorded; returns how many were new.
    /// `at` is the batch's commit time ([`Db::now`]).
    fn record_applied(
        &self,
        journal: &str,
        seqs: &[i64],
        delivery: &str,
        at: &str,
    ) -> Result<usize> {
        let mut st = self.conn.prepare_cached(&format!(
            "INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
             SELECT ?1, ?2, ?4, ?5, ?2, 1 WHERE NOT {COVERS}"
        ))?;
        let mut new = 0;
        for &seq in seqs {
            new += st.execute(params![journal, seq, seq, delivery, at])?;
        }
        Ok(new)
    }

    /// Records a batch's journal entries (every entry of the journal from
    /// the least of `seqs` to the greatest) as one run; returns how many
    /// were new: all of them, or none when the run meets one recorded.
    fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let (Some(&first), Some(&last)) = (seqs.iter().min(), seqs.iter().max()) else {
            return Ok(0);
        };
        let n = self
            .conn
            .prepare_cached(&format!(
                "INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
                 SELECT ?1, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), ?2, ?5 WHERE NOT {COVERS}"
            ))?
            .execute(params![journal, first, last, delivery, seqs.len() as i64])?;
        Ok(if n == 1 { seqs.len() } else { 0 })
    }

    /// Keeps the columns of a source row that the spec does not carry, as
    /// replay deletes it (`row` is a JSON object of those columns).
    fn keep_columns(&self, journal: &str, tbl: &str, key: &str, row: &str, seq: i64) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO _cutover_kept (journal, tbl, key, row, seq) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![journal, tbl, key, row, seq])?;
        Ok(())
    }

    /// Takes back the kept columns of a key that replay inserts again.
    fn take_kept_columns(&self, journal: &str, tbl: &str, key: &str) -> Result<Option<String>> {
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

    /// Keeps a copy of the target's fence record; the same fence (journal
    /// and `fenced_at`) kept before is replaced, unlifted.
    fn record_fence_copy(&self, journal: &str, f: &FenceRecord) -> Result<()> {
        self.conn.execute_batch(VERDICTS_DDL)?;
        self.conn.execute(
            "INSERT OR REPLACE INTO _cutover_fences (journal, fenced_at, boundary, journal_rows, fingerprint, tables, parts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![journal, f.fenced_at, f.boundary, f.journal_rows, f.fingerprint, f.tables, f.parts],
        )?;
        Ok(())
    }

    /// The latest copy of a journal's fence record not yet lifted.
    fn fence_copy(&self, journal: &str) -> Result<Option<FenceRecord>> {
        if !self.has_table("_cutover_fences")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT boundary, journal_rows, fingerprint, tables, parts, fenced_at FROM _cutover_fences
                 WHERE journal = ?1 AND lifted_at IS NULL ORDER BY rowid DESC LIMIT 1",
                [journal],
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

    fn lift_fence_copy(&self, journal: &str, at: &str) -> Result<()> {
        if self.has_table("_cutover_fences")? {
            self.conn.execute(
                "UPDATE _cutover_fences SET lifted_at = ?2 WHERE journal = ?1 AND lifted_at IS NULL",
                params![journal, at],
            )?;
        }
        Ok(())
    }

    fn record_replay_verdict(&self, v: &ReplayVerdict) -> Result<()> {
        self.conn.execute_batch(VERDICTS_DDL)?;
        self.conn.execute(
            "INSERT INTO _cutover_replays (id, journal, boundary, passed, detail, at)
             VALUES ((SELECT coalesce(max(id), 0) + 1 FROM _cutover_replays), ?1, ?2, ?3, ?4, ?5)",
            params![v.journal, v.boundary, v.passed, v.detail, v.at],
        )?;
        Ok(())
    }

    fn last_replay_verdict(&self, journal: &str) -> Result<Option<ReplayVerdict>> {
        if !self.has_table("_cutover_replays")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .query_row(
                "SELECT boundary, passed, detail, at FROM _cutover_replays
                 WHERE journal = ?1 ORDER BY id DESC LIMIT 1",
                [journal],
                |r| {
                    Ok(ReplayVerdict {
                        journal: journal.to_string(),
                        boundary: r.get(0)?,
                        passed: r.get(1)?,
                        detail: r.get(2)?,
                        at: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }
}

impl Sqlite {
    /// Whether the applied set can name this journal: false when there is
    /// no applied set yet.
    pub(super) fn has_applied(&self) -> Result<bool> {
        Ok(
            self.has_table("_cutover_applied")?
                && self.has_column("_cutover_applied", "journal")?,
        )
    }
}
