//! The source's applied set (`_cutover_applied`) and kept columns
//! (`_cutover_kept`), written by replay in the same transaction as the rows.

use anyhow::{Result, bail};

use super::Postgres;
use super::control::NOW;
use crate::db::{AppliedSet, Catalogue, FenceRecord, ReplayVerdict};

const APPLIED_DDL: &str = include_str!("../../../sql/postgres/applied.sql");
const VERDICTS_DDL: &str = include_str!("../../../sql/postgres/verdicts.sql");

/// Whether a recorded run of journal `$1` meets the seqs `$2..=$3`: the
/// first run ending at or after `$2` starts at or before `$3` (runs never
/// overlap, so no other can). One look-up in the primary key.
const COVERS: &str =
    "coalesce((SELECT coalesce(first_seq, seq) <= $3::bigint FROM {{schema}}._cutover_applied
     WHERE journal = $1::text AND seq >= $2::bigint ORDER BY seq LIMIT 1), false)";

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
        )?;
        // An applied set from before runs were recorded gains their columns;
        // its rows read as runs of one entry.
        if !self
            .table_columns("_cutover_applied")?
            .iter()
            .any(|c| c.name == "first_seq")
        {
            self.ctl_execute(
                "ALTER TABLE {{schema}}._cutover_applied
                 ADD COLUMN IF NOT EXISTS first_seq bigint,
                 ADD COLUMN IF NOT EXISTS entries bigint NOT NULL DEFAULT 1",
                &[],
            )?;
        }
        Ok(())
    }

    /// `(entries, last seq applied)` of journal `journal`; zeros when absent.
    fn applied_progress(&self, journal: &str) -> Result<(i64, i64)> {
        if !self.has_applied()? {
            return Ok((0, 0));
        }
        let r = self.ctl_query(
            "SELECT coalesce(sum(entries), 0)::bigint, coalesce(max(seq), 0) FROM {{schema}}._cutover_applied WHERE journal = $1",
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

    /// Whether journal entry `seq` was applied: the first run ending at or
    /// after it starts at or before it. Called per change inside a batch,
    /// after [`AppliedSet::ensure_applied_table`]: no catalogue look-up.
    fn is_applied(&self, journal: &str, seq: i64) -> Result<bool> {
        let r = self.ctl_query(&format!("SELECT {COVERS}"), &[&journal, &seq, &seq])?;
        Ok(r[0].get(0))
    }

    /// Records each of a delivery's journal entries as applied at `at`, a
    /// run of one, skipping those already recorded, in one statement;
    /// returns how many were new.
    fn record_applied(
        &self,
        journal: &str,
        seqs: &[i64],
        delivery: &str,
        at: &str,
    ) -> Result<usize> {
        if seqs.is_empty() {
            return Ok(0);
        }
        self.lock_applied()?;
        let n = self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
             SELECT $1::text, s, $3::text, $4::text, s, 1 FROM unnest($2::bigint[]) AS s
             WHERE NOT coalesce((SELECT coalesce(a.first_seq, a.seq) <= s FROM {{schema}}._cutover_applied a
                                 WHERE a.journal = $1::text AND a.seq >= s ORDER BY a.seq LIMIT 1), false)
             ON CONFLICT DO NOTHING",
            &[&journal, &seqs, &delivery, &at],
        )?;
        Ok(n as usize)
    }

    /// Records a batch's journal entries (every entry of the journal from
    /// the least of `seqs` to the greatest) as one run; returns how many
    /// were new: all of them, or none when the run meets one recorded.
    fn record_applied_all(&self, journal: &str, seqs: &[i64], delivery: &str) -> Result<usize> {
        let (Some(&first), Some(&last)) = (seqs.iter().min(), seqs.iter().max()) else {
            return Ok(0);
        };
        self.lock_applied()?;
        let n = self.ctl_execute(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_applied (journal, seq, delivery, applied_at, first_seq, entries)
                 SELECT $1::text, $3::bigint, $4::text, {NOW}, $2::bigint, $5::bigint WHERE NOT {COVERS}
                 ON CONFLICT DO NOTHING"
            ),
            &[&journal, &first, &last, &delivery, &(seqs.len() as i64)],
        )?;
        Ok(if n == 1 { seqs.len() } else { 0 })
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

    /// Keeps a copy of the target's fence record; the same fence (journal
    /// and `fenced_at`) kept before is replaced, unlifted.
    fn record_fence_copy(&self, journal: &str, f: &FenceRecord) -> Result<()> {
        self.ensure_verdict_tables()?;
        self.ctl_execute(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_fences (journal, fenced_at, boundary, journal_rows, fingerprint, tables, parts)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (journal, fenced_at) DO UPDATE SET boundary = excluded.boundary,
                   journal_rows = excluded.journal_rows, fingerprint = excluded.fingerprint,
                   tables = excluded.tables, parts = excluded.parts, recorded_at = {NOW}, lifted_at = NULL"
            ),
            &[
                &journal,
                &f.fenced_at,
                &f.boundary,
                &f.journal_rows,
                &f.fingerprint,
                &f.tables,
                &f.parts,
            ],
        )?;
        Ok(())
    }

    /// The latest copy of a journal's fence record not yet lifted.
    fn fence_copy(&self, journal: &str) -> Result<Option<FenceRecord>> {
        if !self.has_table("_cutover_fences")? {
            return Ok(None);
        }
        Ok(self
            .ctl_opt(
                "SELECT boundary, journal_rows, fingerprint, tables, parts, fenced_at
                 FROM {{schema}}._cutover_fences WHERE journal = $1 AND lifted_at IS NULL
                 ORDER BY recorded_at DESC, fenced_at DESC LIMIT 1",
                &[&journal],
            )?
            .map(|r| FenceRecord {
                boundary: r.get(0),
                journal_rows: r.get(1),
                fingerprint: r.get(2),
                tables: r.get(3),
                parts: r.get(4),
                fenced_at: r.get(5),
            }))
    }

    fn lift_fence_copy(&self, journal: &str, at: &str) -> Result<()> {
        if self.has_table("_cutover_fences")? {
            self.ctl_execute(
                "UPDATE {{schema}}._cutover_fences SET lifted_at = $2
                 WHERE journal = $1 AND lifted_at IS NULL",
                &[&journal, &at],
            )?;
        }
        Ok(())
    }

    fn record_replay_verdict(&self, v: &ReplayVerdict) -> Result<()> {
        self.ensure_verdict_tables()?;
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_replays (id, journal, boundary, passed, detail, at)
             SELECT coalesce(max(id), 0) + 1, $1, $2, $3, $4, $5 FROM {{schema}}._cutover_replays",
            &[&v.journal, &v.boundary, &v.passed, &v.detail, &v.at],
        )?;
        Ok(())
    }

    fn last_replay_verdict(&self, journal: &str) -> Result<Option<ReplayVerdict>> {
        if !self.has_table("_cutover_replays")? {
            return Ok(None);
        }
        Ok(self
            .ctl_opt(
                "SELECT boundary, passed, detail, at FROM {{schema}}._cutover_replays
                 WHERE journal = $1 ORDER BY id DESC LIMIT 1",
                &[&journal],
            )?
            .map(|r| ReplayVerdict {
                journal: journal.to_string(),
                boundary: r.get(0),
                passed: r.get(1),
                detail: r.get(2),
                at: r.get(3),
            }))
    }
}

impl Postgres {
    /// Makes the fence copies' and the verdicts' tables, once.
    fn ensure_verdict_tables(&self) -> Result<()> {
        self.ensure_tables(
            VERDICTS_DDL,
            &["_cutover_fences", "_cutover_replays"],
            "the fence's copies and the replay verdicts",
        )
    }

    /// Holds the applied set against every other writer until this
    /// transaction ends. Two runs that overlap without sharing their last
    /// seq do not meet in the primary key; under this lock the second sees
    /// the first committed, and records nothing.
    fn lock_applied(&self) -> Result<()> {
        self.ctl_execute(
            "LOCK TABLE {{schema}}._cutover_applied IN SHARE ROW EXCLUSIVE MODE",
            &[],
        )?;
        Ok(())
    }

    /// Whether the applied set can name a journal: false when there is no
    /// applied set yet (or only an older one, without journal identities).
    fn has_applied(&self) -> Result<bool> {
        Ok(self
            .table_columns("_cutover_applied")?
            .iter()
            .any(|c| c.name == "journal"))
    }
}
