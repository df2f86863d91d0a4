//! The source's applied set (`_cutover_applied`) and kept columns
//! (`_cutover_kept`), written by replay in the same transaction as the rows.

use anyhow::{Result, bail};
use rusqlite::{OptionalExtension, params};

use super::*;

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
        Ok(self.conn.execute_batch(APPLIED_DDL)?)
    }

    /// `(rows, last seq applied)` of journal `journal` in `_cutover_applied`;
    /// zeros when absent.
    fn applied_progress(&self, journal: &str) -> Result<(i64, i64)> {
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

    /// Whether journal entry `seq` was applied. Called per change inside a
    /// batch, after [`Db::ensure_applied_table`]: no catalogue look-up.
    fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM _cutover_applied WHERE journal = ?1 AND seq = ?2")?
            .query_row(params![journal, seq], |_| Ok(()))
            .optional()?
            .is_some())
    }

    /// Records a journal entry as applied; `false` if it already was.
    /// `at` is the batch's commit time ([`Db::now`]): formatting a time per
    /// row costs more than the insert itself.
    fn record_applied(&self, journal: &str, seq: i64, delivery: &str, at: &str) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached("INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![journal, seq, delivery, at])?;
        Ok(n == 1)
    }

    /// Records a batch's journal entries as applied in one statement;
    /// returns how many were new.
    fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let list = serde_json::to_string(seqs)?;
        Ok(self
            .conn
            .prepare_cached(
                "INSERT OR IGNORE INTO _cutover_applied (journal, seq, delivery, applied_at)
                 SELECT ?1, value, ?3, at FROM json_each(?2), (SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS at)",
            )?
            .execute(params![journal, list, delivery])?)
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
