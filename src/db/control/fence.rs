//! The fence's records: its row in the target (`_cutover_fence`, guarded
//! by the fence's own triggers once written), the copy of it the source
//! keeps (`_cutover_fences`) and how each replay ended (`_cutover_replays`).

use anyhow::Result;

use super::{Control, P, Set, flag, int, text};
use crate::db::{FenceRecord, JournalId, ReplayVerdict};

/// The fence's records, on one connection: the row on a target, the copies
/// and verdicts on a source.
#[derive(Clone, Copy)]
pub struct FenceRecords<'a>(pub(crate) Control<'a>);

const RECORD: &str = "boundary, journal_rows, fingerprint, tables, parts, fenced_at";

fn record(r: &[crate::value::Value]) -> Result<FenceRecord> {
    Ok(FenceRecord {
        boundary: int(r, 0)?,
        journal_rows: int(r, 1)?,
        fingerprint: text(r, 2)?,
        tables: serde_json::from_str(&text(r, 3)?)?,
        parts: text(r, 4)?,
        fenced_at: text(r, 5)?,
    })
}

fn params<'r>(f: &'r FenceRecord, tables: &'r str) -> [(&'static str, P<'r>); 6] {
    [
        ("boundary", P::Int(f.boundary)),
        ("journal_rows", P::Int(f.journal_rows)),
        ("fingerprint", P::Text(&f.fingerprint)),
        ("tables", P::Text(tables)),
        ("parts", P::Text(&f.parts)),
        ("fenced_at", P::Text(&f.fenced_at)),
    ]
}

impl FenceRecords<'_> {
    /// The fence row, if the database is fenced.
    pub fn row(&self) -> Result<Option<FenceRecord>> {
        if !self.0.has("_cutover_fence")? {
            return Ok(None);
        }
        self.0
            .one(
                &format!("SELECT {RECORD} FROM {{{{schema}}}}._cutover_fence WHERE id = 1"),
                &[],
            )?
            .map(|r| record(&r))
            .transpose()
    }

    /// Writes the fence row, every field as given (`fenced_at` too: the
    /// fingerprint covers it), into the target's control tables.
    pub fn set_row(&self, f: &FenceRecord) -> Result<()> {
        let tables = f.tables_json();
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_fence (id, {RECORD})
                 VALUES (1, :boundary, :journal_rows, :fingerprint, :tables, :parts, :fenced_at)"
            ),
            &params(f, &tables),
        )?;
        Ok(())
    }

    /// Keeps a copy of the target's fence record of `journal` (making its
    /// table first); a copy of the same fence (same `fenced_at`) already
    /// kept is replaced, unlifted, and counts again.
    pub fn record_copy(&self, journal: &JournalId, f: &FenceRecord) -> Result<()> {
        self.0.ensure(Set::Verdicts)?;
        let tables = f.tables_json();
        let mut p = params(f, &tables).to_vec();
        p.push(("journal", P::Text(journal.as_str())));
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_fences (journal, {RECORD})
                 VALUES (:journal, :boundary, :journal_rows, :fingerprint, :tables, :parts, :fenced_at)
                 {}",
                (self.0.dialect().upsert)(
                    &["journal", "fenced_at"],
                    &["boundary", "journal_rows", "fingerprint", "tables", "parts"],
                    "recorded_at = {now}, lifted_at = NULL"
                )
            ),
            &p,
        )?;
        Ok(())
    }

    /// The latest copy of `journal`'s fence record not yet lifted; `None`
    /// when none is kept (or the tables were never made).
    pub fn copy(&self, journal: &JournalId) -> Result<Option<FenceRecord>> {
        if !self.0.has("_cutover_fences")? {
            return Ok(None);
        }
        self.0
            .one(
                &format!(
                    "SELECT {RECORD} FROM {{{{schema}}}}._cutover_fences
                     WHERE journal = :journal AND lifted_at IS NULL
                     ORDER BY recorded_at DESC, fenced_at DESC LIMIT 1"
                ),
                &[("journal", P::Text(journal.as_str()))],
            )?
            .map(|r| record(&r))
            .transpose()
    }

    /// Marks every copy of `journal`'s fence record lifted now.
    pub fn lift_copy(&self, journal: &JournalId) -> Result<()> {
        if self.0.has("_cutover_fences")? {
            self.0.exec(
                "UPDATE {{schema}}._cutover_fences SET lifted_at = {now}
                 WHERE journal = :journal AND lifted_at IS NULL",
                &[("journal", P::Text(journal.as_str()))],
            )?;
        }
        Ok(())
    }

    /// Records how a replay ended (making its table first).
    pub fn record_verdict(&self, v: &ReplayVerdict) -> Result<()> {
        self.0.ensure(Set::Verdicts)?;
        // The id is one more than the last, not a sequence: the source's
        // sequences are the application's, and a dry run must leave them
        // all as they were. The last id is read in a derived table: beside
        // an aggregate, MySQL's ONLY_FULL_GROUP_BY takes the parameters for
        // columns that are not grouped.
        self.0.exec(
            "INSERT INTO {{schema}}._cutover_replays (id, journal, boundary, passed, detail, at)
             SELECT m.id, :journal, :boundary, :passed, :detail, :at
             FROM (SELECT coalesce(max(id), 0) + 1 AS id FROM {{schema}}._cutover_replays) m",
            &[
                ("journal", P::Text(v.journal.as_str())),
                ("boundary", P::Int(v.boundary)),
                ("passed", P::Bool(v.passed)),
                ("detail", P::Text(&v.detail)),
                ("at", P::Text(&v.at)),
            ],
        )?;
        Ok(())
    }

    /// The last replay verdict of `journal`, if a replay recorded one.
    pub fn last_verdict(&self, journal: &JournalId) -> Result<Option<ReplayVerdict>> {
        if !self.0.has("_cutover_replays")? {
            return Ok(None);
        }
        self.0
            .one(
                "SELECT boundary, passed, detail, at FROM {{schema}}._cutover_replays
                 WHERE journal = :journal ORDER BY id DESC LIMIT 1",
                &[("journal", P::Text(journal.as_str()))],
            )?
            .map(|r| {
                Ok(ReplayVerdict {
                    journal: journal.clone(),
                    boundary: int(&r, 0)?,
                    passed: flag(&r, 1)?,
                    detail: text(&r, 2)?,
                    at: text(&r, 3)?,
                })
            })
            .transpose()
    }
}
