//! The source's applied set (`_cutover_applied`) and kept columns
//! (`_cutover_kept`), written by replay in the same transaction as the rows.

use anyhow::{Result, bail};

use super::Postgres;
use super::control::NOW;
use crate::db::{AppliedSet, Catalogue};

const APPLIED_DDL: &str = include_str!("../../../sql/postgres/applied.sql");

impl AppliedSet for Postgres {
    /// Creates the source's applied set (per journal identity) and kept
    /// columns in the spec's schema. An applied set without a journal
    /// identity (an older cutover's) is refused rather than misread.
    fn ensure_applied_table(&self) -> Result<()> {
        if self.has_table("_cutover_applied")? && !self.has_applied()? {
            bail!(
                "{}: _cutover_applied was written by an older cutover and records no journal identity; finish that rollback with the version that started it",
                self.shown
            );
        }
        self.ensure_tables(
            APPLIED_DDL,
            &["_cutover_applied", "_cutover_kept"],
            "the applied set",
        )
    }

    /// `(rows, last seq applied)` of journal `journal`; zeros when absent.
    fn applied_progress(&self, journal: &str) -> Result<(i64, i64)> {
        if !self.has_applied()? {
            return Ok((0, 0));
        }
        let r = self.ctl_query(
            "SELECT count(*), coalesce(max(seq), 0) FROM {{schema}}._cutover_applied WHERE journal = $1",
            &[&journal],
        )?;
        Ok((r[0].get(0), r[0].get(1)))
    }

    /// The last `seq` of `journal` applied; 0 before the first. A look-up
    /// at the end of the primary key.
    fn applied_last(&self, journal: &str) -> Result<i64> {
        if !self.has_applied()? {
            return Ok(0);
        }
        let r = self.ctl_query(
            "SELECT coalesce(max(seq), 0) FROM {{schema}}._cutover_applied WHERE journal = $1",
            &[&journal],
        )?;
        Ok(r[0].get(0))
    }

    /// Whether journal entry `seq` was applied. Called per change inside a
    /// batch, after [`AppliedSet::ensure_applied_table`]: no catalogue
    /// look-up.
    fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        Ok(self
            .ctl_opt(
                "SELECT 1 FROM {{schema}}._cutover_applied WHERE journal = $1 AND seq = $2",
                &[&journal, &seq],
            )?
            .is_some())
    }

    /// Records a journal entry as applied at `at`; `false` if it already was.
    fn record_applied(&self, journal: &str, seq: i64, delivery: &str, at: &str) -> Result<bool> {
        let n = self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_applied (journal, seq, delivery, applied_at)
             VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            &[&journal, &seq, &delivery, &at],
        )?;
        Ok(n == 1)
    }

    /// Records a batch's journal entries as applied in one statement;
    /// returns how many were new.
    fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let text = format!(
            "INSERT INTO {{{{schema}}}}._cutover_applied (journal, seq, delivery, applied_at)
             SELECT $1, s, $3, {NOW} FROM unnest($2::bigint[]) AS s
             ON CONFLICT DO NOTHING"
        );
        Ok(self.ctl_execute(&text, &[&journal, &seqs, &delivery])? as usize)
    }

    /// Keeps the columns of a source row that the spec does not carry, as
    /// replay deletes it (`row` is a JSON object of those columns); a later
    /// delete of the same key replaces them.
    fn keep_columns(&self, journal: &str, tbl: &str, key: &str, row: &str, seq: i64) -> Result<()> {
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_kept (journal, tbl, key, row, seq) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (journal, tbl, key) DO UPDATE SET row = excluded.row, seq = excluded.seq",
            &[&journal, &tbl, &key, &row, &seq],
        )?;
        Ok(())
    }

    /// Takes back (and forgets) the kept columns of a key that replay
    /// inserts again.
    fn take_kept_columns(&self, journal: &str, tbl: &str, key: &str) -> Result<Option<String>> {
        Ok(self
            .ctl_opt(
                "DELETE FROM {{schema}}._cutover_kept WHERE journal = $1 AND tbl = $2 AND key = $3
                 RETURNING row",
                &[&journal, &tbl, &key],
            )?
            .map(|r| r.get(0)))
    }
}

impl Postgres {
    /// Whether the applied set can name a journal: false when there is no
    /// applied set yet (or only an older one, without journal identities).
    fn has_applied(&self) -> Result<bool> {
        Ok(self
            .table_columns("_cutover_applied")?
            .iter()
            .any(|c| c.name == "journal"))
    }
}
