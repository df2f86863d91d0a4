//! Where the migration stands, decided from what status reads of both
//! sides: the stage, what it says in words, and the next command the
//! runbook calls for.

use anyhow::Result;

use super::Stage;
use crate::db::{Db, JournalLogExt, RowsExt};
use crate::fence::Copy;
use crate::journal::Drift;
use crate::spec::Spec;

/// What status reads before it decides the stage.
pub(super) struct Seen {
    pub(super) spec_arg: String,
    pub(super) journal: Option<crate::db::JournalId>,
    /// How the last replay ended, as the source records it.
    pub(super) verdict: Option<crate::db::ReplayVerdict>,
    pub(super) replayed: i64,
    pub(super) journal_installed: bool,
    pub(super) journal_entries: i64,
    pub(super) load_incomplete: Vec<String>,
    pub(super) target_rows: i64,
    /// Fence triggers standing without their row, as a breach.
    pub(super) orphaned: Option<String>,
    /// How the target differs from the spec and the journal, once a
    /// journal exists.
    pub(super) drift: Vec<Drift>,
}

impl Seen {
    /// Reads both sides: rows, journal, replay progress and verdict, drift,
    /// loads left incomplete.
    pub(super) fn read(spec: &Spec, source: &Db, target: &Db, fenced: bool) -> Result<Seen> {
        let mut target_rows = 0;
        for t in &spec.tables {
            target_rows += target.rows().count_rows(&target.target_sql(t)).unwrap_or(0);
        }
        let journal_installed = crate::journal::installed(spec, target)?;
        let journal_entries = target.journal().journal_extent()?.entries;
        let orphaned = if fenced {
            None
        } else {
            crate::fence::orphaned(target, spec)?
        };
        let journal = target.identity().id()?;
        let replayed = match &journal {
            Some(j) => source.applied_set().progress(j.as_str())?.entries,
            None => 0,
        };
        // How the last replay ended, as the source records it.
        let verdict = match &journal {
            Some(j) => source.fence_records().last_verdict(j)?,
            None => None,
        };
        // Once a journal exists, the target must stay as the spec describes it:
        // drift or a missing trigger means writes may be unjournaled.
        let drift = if journal.is_some() {
            crate::journal::drift(spec, target)?
        } else {
            Vec::new()
        };
        let spec_arg = format!("--spec {}", spec.path.display());
        let mut load_incomplete = Vec::new();
        for t in &spec.tables {
            if target
                .progress()
                .load_checkpoint(&t.name)?
                .is_some_and(|c| !c.done)
            {
                load_incomplete.push(t.name.clone());
            }
        }
        Ok(Seen {
            spec_arg,
            journal,
            verdict,
            replayed,
            journal_installed,
            journal_entries,
            load_incomplete,
            target_rows,
            orphaned,
            drift,
        })
    }
}

/// A stage, what it says in words, the next command, and the entries to
/// replay.
pub(super) type Standing = (Stage, String, String, i64);

/// The stage of a fenced target: breached, its replay failed, rolled back,
/// or fenced with entries left to replay.
/// The standing of a fenced target whose replay passed.
fn rolled_back(
    f: &crate::fence::FenceRow,
    verdict: Option<&crate::db::ReplayVerdict>,
    (replayed, n): (i64, i64),
    record_copy: &str,
) -> Standing {
    (
        Stage::RolledBack,
        format!(
            "rolled back (fenced at boundary {}, replayed {replayed} of {n}){}",
            f.boundary,
            verdict
                .filter(|v| !v.detail.is_empty())
                .map(|v| format!("; {}", v.detail))
                .unwrap_or_default()
        ),
        format!(
            "switch the application back to the source; keep the fence on. Confirm with `cutover gate`{}",
            if record_copy.is_empty() {
                String::new()
            } else {
                format!("; {}", record_copy.trim_end_matches(", then "))
            }
        ),
        n,
    )
}

pub(super) fn fenced(
    f: &crate::fence::FenceRow,
    spec: &Spec,
    source: &Db,
    target: &Db,
    seen: &Seen,
) -> Result<Standing> {
    let Seen {
        spec_arg,
        journal,
        verdict,
        replayed,
        ..
    } = seen;
    let replayed = *replayed;
    let n = target
        .journal()
        .count_between(target.identity().start()?, f.boundary)?;
    let copy = crate::fence::copy_of(f, source, target)?;
    let breach = match &copy {
        Copy::Differs(what) => Some(what.clone()),
        _ => f.breach(target, spec)?,
    };
    let passed = match &journal {
        Some(j) => {
            crate::fence::replay_not_passed(source.fence_records(), j, f.boundary)?.is_none()
        }
        None => false,
    };
    let record_copy = if copy == Copy::Missing {
        format!(
            "cutover fence on {spec_arg} (it keeps the fence record's copy in the source; replay refuses without it), then "
        )
    } else {
        String::new()
    };
    Ok(if let Some(what) = breach {
        (
            Stage::Breached,
            format!(
                "fence BREACHED: {what} (fenced at boundary {}, replayed {replayed} of {n})",
                f.boundary
            ),
            format!(
                "stop: find what changed with cutover fence status {spec_arg}; then re-plan the rollback (cutover fence off --force, cutover fence on, cutover replay --dry-run)"
            ),
            n,
        )
    } else if let Some(v) = verdict.as_ref().filter(|v| !v.passed) {
        (
            Stage::ReplayFailed,
            format!(
                "replay FAILED at {}: {} (fenced at boundary {}, replayed {replayed} of {n})",
                v.at, v.detail, f.boundary
            ),
            format!(
                "do not switch the application back yet; keep the fence on. The failed replay wrote nothing: fix what its report names in the source (cutover replay --dry-run {spec_arg} lists it), then {record_copy}cutover replay {spec_arg}; the verdict stays FAILED until a replay reconciles"
            ),
            n,
        )
    } else if replayed >= n && passed {
        rolled_back(f, verdict.as_ref(), (replayed, n), &record_copy)
    } else if replayed >= n {
        (
            Stage::Fenced,
            format!(
                "fenced at boundary {}, replayed {replayed} of {n}; the source is not yet reconciled with the target",
                f.boundary
            ),
            format!(
                "{record_copy}cutover replay {spec_arg} (it applies nothing more and reconciles)"
            ),
            n,
        )
    } else {
        (
            Stage::Fenced,
            format!(
                "fenced at boundary {}, replayed {replayed} of {n}",
                f.boundary
            ),
            format!("{record_copy}cutover replay {spec_arg}"),
            n,
        )
    })
}

/// The stage of a target without a fence: breached (its triggers left
/// standing), lifted after a failed replay, rolled back, journaling,
/// loaded or not.
pub(super) fn unfenced(seen: &Seen) -> Standing {
    let Seen {
        spec_arg,
        verdict,
        replayed,
        journal_installed,
        journal_entries,
        load_incomplete,
        target_rows,
        orphaned,
        ..
    } = seen;
    let (replayed, journal_installed, journal_entries, target_rows) = (
        *replayed,
        *journal_installed,
        *journal_entries,
        *target_rows,
    );
    match orphaned {
        Some(what) => (
            Stage::Breached,
            format!("fence BREACHED: {what}"),
            format!(
                "stop: find what changed with cutover fence status {spec_arg}; then re-plan the rollback (cutover fence off --force, cutover fence on, cutover replay --dry-run)"
            ),
            0,
        ),
        // The fence was lifted after the last replay failed: `--force`.
        None if verdict.as_ref().is_some_and(|v| !v.passed) => {
            let v = verdict.as_ref().expect("a failed verdict");
            (
                Stage::LiftedAfterFailure,
                format!(
                    "fence lifted after a FAILED replay ({}: {}); replayed {replayed} entries, and the source does not hold the target's data",
                    v.at, v.detail
                ),
                format!(
                    "compare the source with the target (cutover gate {spec_arg}) and settle the difference by hand, or start again at RUNBOOK part A"
                ),
                replayed,
            )
        }
        // A rollback that finished, and whose fence was lifted afterwards
        // (a replay without a recorded verdict is an earlier cutover's).
        None if (replayed > 0 || verdict.is_some()) && journal_installed => (
            Stage::FenceLifted,
            format!(
                "rolled back, fence lifted (replayed {replayed} entries); the journal is still installed"
            ),
            format!("when the target is retired: cutover journal remove {spec_arg}"),
            replayed,
        ),
        None if replayed > 0 || verdict.is_some() => (
            Stage::Finished,
            format!(
                "rolled back and finished (replayed {replayed} entries; fence and journal removed)"
            ),
            "nothing; the source is the system of record again".to_string(),
            replayed,
        ),
        None if journal_installed => (
            Stage::Journaling,
            format!("journaling ({journal_entries} entries)"),
            format!(
                "if the cutover fails: cutover fence on {spec_arg}, then cutover replay {spec_arg}"
            ),
            0,
        ),
        None if !load_incomplete.is_empty() => (
            Stage::LoadIncomplete,
            format!("load incomplete (tables {})", load_incomplete.join(", ")),
            format!("cutover load {spec_arg} (it resumes after the last committed batch)"),
            0,
        ),
        None if target_rows > 0 => (
            Stage::Loaded,
            "loaded".to_string(),
            format!("cutover gate {spec_arg}; at the switch: cutover journal install {spec_arg}"),
            0,
        ),
        None => (
            Stage::NotLoaded,
            "not loaded".to_string(),
            format!("cutover check {spec_arg}, then cutover load {spec_arg}"),
            0,
        ),
    }
}
