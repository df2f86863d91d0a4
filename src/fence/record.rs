//! The fence row as the target records it, and the copy of it the source
//! keeps: a record rewritten on the target no longer matches its copy,
//! which is a breach even when the fingerprint was rewritten to fit.

use anyhow::{Context, Result};
use serde::Serialize;

use super::{FORMAT, Fingerprint};
use crate::db::{Access, Db, FenceRecord, FenceRecords};
use crate::schema;
use crate::spec::Spec;

/// The fence as recorded in the target.
#[derive(Clone, Debug, Serialize)]
pub struct FenceRow {
    pub boundary: i64,
    pub journal_rows: i64,
    pub fingerprint: String,
    pub tables: Vec<String>,
    pub fenced_at: String,
    /// The fingerprint's format (see [`FORMAT`]).
    pub format: u32,
    /// What the fingerprint was made of when the fence went on.
    #[serde(skip)]
    pub parts: Option<Fingerprint>,
    /// The row as stored, field for field.
    #[serde(skip)]
    pub record: FenceRecord,
}

/// The copy of the fence record kept in the source, against the target's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Copy {
    /// The source keeps a copy equal to the target's record.
    Kept,
    /// The source keeps none (a fence set by an earlier cutover, or a
    /// source that could not be written when the fence went on).
    Missing,
    /// The source's copy differs: the target's record was rewritten.
    Differs(String),
}

impl FenceRow {
    /// The target's record against the copy the source keeps.
    pub fn against(&self, copy: Option<&FenceRecord>, source: &Db) -> Copy {
        let Some(c) = copy else {
            return Copy::Missing;
        };
        let r = &self.record;
        if c == r {
            return Copy::Kept;
        }
        let mut what = Vec::new();
        if c.boundary != r.boundary {
            what.push(format!("boundary {} (kept: {})", r.boundary, c.boundary));
        }
        if c.journal_rows != r.journal_rows {
            what.push(format!(
                "journal entries {} (kept: {})",
                r.journal_rows, c.journal_rows
            ));
        }
        if c.tables != r.tables {
            what.push(format!(
                "tables {} (kept: {})",
                r.tables.join(", "),
                c.tables.join(", ")
            ));
        }
        if c.fenced_at != r.fenced_at {
            what.push(format!("fenced at {} (kept: {})", r.fenced_at, c.fenced_at));
        }
        if c.fingerprint != r.fingerprint || c.parts != r.parts {
            what.push("fingerprint".to_string());
        }
        Copy::Differs(format!(
            "the fence record on the target was rewritten: it differs from the copy kept in source {} ({})",
            source.location(),
            what.join(", ")
        ))
    }
}

pub fn read(records: FenceRecords<'_>) -> Result<Option<FenceRow>> {
    Ok(match records.row()? {
        None => None,
        Some(f) => {
            let parts: Option<Fingerprint> = serde_json::from_str(&f.parts).ok();
            Some(FenceRow {
                boundary: f.boundary,
                journal_rows: f.journal_rows,
                fingerprint: f.fingerprint.clone(),
                tables: f.tables.clone(),
                fenced_at: f.fenced_at.clone(),
                format: parts.as_ref().map_or(FORMAT, |p| p.version),
                parts,
                record: f,
            })
        }
    })
}

/// The copy of the fence record that the source keeps for the target's
/// journal, and how the target's record compares with it.
pub fn copy_of(fence: &FenceRow, source: &Db, target: &Db) -> Result<Copy> {
    let Some(journal) = target.identity().id()? else {
        return Ok(Copy::Missing);
    };
    Ok(fence.against(source.fence_records().copy(&journal)?.as_ref(), source))
}

/// What to do when the source keeps no copy of the fence record.
pub fn copy_missing(spec: &Spec) -> String {
    format!(
        "the source keeps no copy of the fence record (a fence set by an earlier cutover, or a source that could not be written at fence on): run `cutover fence on --spec {}` again; it changes nothing on the target and keeps the copy",
        spec.path.display()
    )
}

/// Keeps a copy of the fence record in the source. `Err` says why it could
/// not, and what to run.
pub fn keep_copy(spec: &Spec, target: &Db, fence: &FenceRow) -> Result<String> {
    let journal = target
        .identity()
        .id()?
        .context("the target's journal has no identity")?;
    let source = schema::open_source(spec, None, Access::Write)?;
    source.write(|| source.fence_records().record_copy(&journal, &fence.record))?;
    Ok("kept in the source".to_string())
}

/// Keeps the copy, or says (as an error, exit 2) that the fence stands
/// without one and how to record it.
pub fn keep_copy_or_say(spec: &Spec, target: &Db, fence: &FenceRow) -> Result<String> {
    keep_copy(spec, target, fence).map_err(|e| {
        e.context(format!(
            "the fence is on (journal_boundary={}) and the target is read-only, but the copy of its record could not be kept in the source; replay refuses until it is. When the source can be written, run `cutover fence on --spec {}` again: it changes nothing on the target and keeps the copy",
            fence.boundary,
            spec.path.display()
        ))
    })
}
