//! How the last replay ended, as the source records it: `fence off` and
//! `status` go by it.

use anyhow::Result;

use crate::db::{Db, FenceRecords, JournalId};

/// Why the rollback of `journal` is not done at `boundary`, as the source
/// records its last replay; `None` when that replay reconciled clean there.
pub fn replay_not_passed(
    source: FenceRecords<'_>,
    journal: &JournalId,
    boundary: i64,
) -> Result<Option<String>> {
    Ok(match source.last_verdict(journal)? {
        Some(v) if v.passed && v.boundary == boundary => None,
        Some(v) if v.passed => Some(format!(
            "the last replay reconciled clean at boundary {}, not at this fence's {boundary}",
            v.boundary
        )),
        Some(v) => Some(format!("the last replay FAILED at {}: {}", v.at, v.detail)),
        None => Some("no replay has reconciled the source with the target yet".to_string()),
    })
}

/// How the verdict of a pass under `--accept-findings` begins: `status`
/// and the reports name it so.
pub const ACCEPTED: &str = "passed with accepted findings";

/// How a replay ended, as [`record_replay`] records it.
pub struct ReplayEnd<'a> {
    pub boundary: i64,
    /// Every entry applied and the source reconciled clean.
    pub passed: bool,
    pub conflict: Option<&'a crate::apply::Conflict>,
    pub breach: Option<&'a str>,
    pub foreign_keys: &'a [String],
    /// The reconciliation's summary line.
    pub summary: Option<&'a str>,
    /// What a pass under `--accept-findings` went past.
    pub accepted: &'a [String],
}

/// Records how a replay ended in the source (`_cutover_replays`): a pass
/// when every entry up to the boundary is applied and the source reconciled
/// clean, else what failed. `status` and `fence off` go by the last one.
pub fn record_replay(source: &Db, journal: &JournalId, end: ReplayEnd<'_>) -> Result<()> {
    let detail = if end.passed && !end.accepted.is_empty() {
        format!(
            "{ACCEPTED} ({}): {}",
            end.accepted.len(),
            end.accepted.join("; ")
        )
    } else if end.passed {
        String::new()
    } else if let Some(c) = end.conflict {
        format!(
            "a conflict at seq {} in table '{}', key {}: {}",
            c.tag, c.table, c.key, c.reason
        )
    } else if let Some(b) = end.breach {
        b.to_string()
    } else if let Some(first) = end.foreign_keys.first() {
        format!(
            "{} source rows were left without their parent row ({first})",
            end.foreign_keys.len()
        )
    } else {
        format!(
            "the source does not reconcile with the target ({})",
            end.summary.unwrap_or_default()
        )
    };
    source
        .write(|| {
            source.fence_records().record_verdict(&crate::db::ReplayVerdict {
                journal: journal.clone(),
                boundary: end.boundary,
                passed: end.passed,
                detail,
                at: source.control().now()?,
            })
        })
        .map_err(|e| {
            e.context(format!(
                "the replay ran to its end ({}), but its verdict could not be recorded in source {}; run `cutover replay` again to record it",
                if end.passed { "pass" } else { "FAIL" },
                source.location()
            ))
        })
}
