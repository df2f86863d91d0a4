//! `cutover status`: where the migration stands (loaded, journaling, fenced,
//! replayed k of n, rolled back) and the next command the runbook calls for.
//! Reads counters and control tables; with a fence on, it re-reads the fence's
//! fingerprint (a scan of the fenced tables) to say whether it still holds.

use anyhow::Result;
use serde::Serialize;

use crate::db::Access;
use crate::fence::Copy;
use crate::provenance::Cursor;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

/// Where the migration stands, and the next command the runbook calls for.
#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub phase: String,
    pub next: String,
    /// The phase, as a value (`phase` says it in words).
    #[serde(skip)]
    pub stage: Stage,
    pub target_rows: i64,
    pub journal_installed: bool,
    pub journal_entries: i64,
    pub fenced: bool,
    pub boundary: Option<i64>,
    pub replayed: i64,
    pub to_replay: i64,
    /// How the target differs from the spec and journal (an alarm).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<String>,
    /// Per synced table: its sync batches so far and where the cursor is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync: Vec<SyncState>,
}

/// The stages of a migration, in runbook order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    NotLoaded,
    LoadIncomplete,
    Loaded,
    Journaling,
    /// Fenced, the replay not finished.
    Fenced,
    /// Fenced, and what the fence protects changed (or its record differs
    /// from the copy the source keeps).
    Breached,
    /// Fenced, and the last replay failed: a conflict, a breach, rows left
    /// without their parent, or a source that does not reconcile.
    ReplayFailed,
    /// The fence was lifted (`--force`) after a replay that failed.
    LiftedAfterFailure,
    /// Fenced, every entry replayed.
    RolledBack,
    /// Rolled back; the fence lifted, the journal still installed.
    FenceLifted,
    /// Rolled back; fence and journal removed.
    Finished,
}

impl StatusReport {
    /// Whether the rollback is done and nothing raises an alarm.
    pub fn rolled_back(&self) -> bool {
        matches!(
            self.stage,
            Stage::RolledBack | Stage::FenceLifted | Stage::Finished
        ) && self.drift.is_empty()
    }
}

/// Drift, a breach and a failed replay are alarms: exit 1.
impl Report for StatusReport {
    fn holds(&self) -> bool {
        self.drift.is_empty()
            && !matches!(
                self.stage,
                Stage::Breached | Stage::ReplayFailed | Stage::LiftedAfterFailure
            )
    }
}

/// A synced table: its batches so far and its cursor.
#[derive(Debug, Serialize)]
pub struct SyncState {
    pub table: String,
    pub batches: usize,
    pub cursor: Option<Cursor>,
}

pub fn run(spec: &Spec) -> Result<StatusReport> {
    // No schema check: a target whose schema drifted after the switch is
    // exactly what status must report, not refuse.
    let source = schema::open_source(spec, None, Access::Read)?;
    let target = crate::db::Db::open(&spec.target, Access::Read, "target")?;
    if target.journal_id()?.is_none() {
        // Before the switch, a spec that does not fit is an error to fix.
        schema::open(spec, Access::Read, Access::Read)?;
    }
    let mut target_rows = 0;
    for t in &spec.tables {
        target_rows += target.row_count(&target.target_sql(t)).unwrap_or(0);
    }
    let journal_installed = crate::journal::installed(spec, &target)?;
    let (journal_entries, _) = target.journal_extent()?;
    let fence = crate::fence::read(&target)?;
    let orphaned = match fence {
        Some(_) => None,
        None => crate::fence::orphaned(&target, spec)?,
    };
    let journal = crate::journal::identity(&target)?;
    let (replayed, _) = match &journal {
        Some(j) => source.applied_progress(j)?,
        None => (0, 0),
    };
    // How the last replay ended, as the source records it.
    let verdict = match &journal {
        Some(j) => source.last_replay_verdict(j)?,
        None => None,
    };
    // Once a journal exists, the target must stay as the spec describes it:
    // drift or a missing trigger means writes may be unjournaled.
    let mut drift = if journal.is_some() {
        crate::journal::drift(spec, &target)?
    } else {
        Vec::new()
    };
    let spec_arg = format!("--spec {}", spec.path.display());
    let mut load_incomplete = Vec::new();
    for t in &spec.tables {
        if let Some((_, _, false)) = target.load_checkpoint(&t.name)? {
            load_incomplete.push(t.name.clone());
        }
    }
    let (stage, phase, next, to_replay) = match &fence {
        Some(f) => {
            let n = target.journal_count_between(target.journal_start()?, f.boundary)?;
            let copy = crate::fence::copy_of(f, &source, &target)?;
            let breach = match &copy {
                Copy::Differs(what) => Some(what.clone()),
                _ => f.breach(&target, spec)?,
            };
            let passed = match &journal {
                Some(j) => crate::fence::replay_passed(&source, j, f.boundary)?,
                None => Err(String::new()),
            };
            let record_copy = if copy == Copy::Missing {
                format!(
                    "cutover fence on {spec_arg} (it keeps the fence record's copy in the source; replay refuses without it), then "
                )
            } else {
                String::new()
            };
            if let Some(what) = breach {
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
                        "do not switch the application back yet; keep the fence on. Fix what the replay's report names in the source (cutover replay --dry-run {spec_arg} lists what is left), then {record_copy}cutover replay {spec_arg}: a run that reconciles clean records the pass, even when it applies nothing"
                    ),
                    n,
                )
            } else if replayed >= n && passed.is_ok() {
                (
                    Stage::RolledBack,
                    format!(
                        "rolled back (fenced at boundary {}, replayed {replayed} of {n})",
                        f.boundary
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
            }
        }
        None if orphaned.is_some() => (
            Stage::Breached,
            format!(
                "fence BREACHED: {}",
                orphaned.as_deref().unwrap_or_default()
            ),
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
    };
    // Once the rollback is done and the fence lifted, the target is no
    // longer the system of record: its journal's triggers are meant to go
    // (RUNBOOK D1), and how its schema differs from the spec matters no more.
    if matches!(stage, Stage::FenceLifted | Stage::Finished) {
        drift.clear();
    }
    let (phase, next) = if drift.is_empty() {
        (phase, next)
    } else {
        (
            format!("ALARM: {} ({phase})", drift.join("; ")),
            format!(
                "if the cutover is failing: cutover fence on {spec_arg} (it fences the target as it is); otherwise carry the change into the spec and run cutover journal install {spec_arg}"
            ),
        )
    };
    let mut rep = StatusReport {
        drift,
        phase,
        next,
        stage,
        target_rows,
        journal_installed,
        journal_entries,
        fenced: fence.is_some() || orphaned.is_some(),
        boundary: fence.as_ref().map(|f| f.boundary),
        replayed,
        to_replay,
        sync: Vec::new(),
    };

    for t in spec.tables.iter().filter(|t| t.watermark.is_some()) {
        rep.sync.push(SyncState {
            table: t.name.clone(),
            batches: target.sync_batches(&t.name)?.len(),
            cursor: Cursor::of(target.sync_cursor(&t.name)?),
        });
    }
    Ok(rep)
}

/// The report as text: `key  value` lines, then one per synced table.
pub fn render(rep: &StatusReport) -> String {
    let mut text = report::pairs(&[
        ("phase", rep.phase.clone()),
        ("target_rows", rep.target_rows.to_string()),
        (
            "journal",
            if rep.journal_installed {
                format!("installed, {} entries", rep.journal_entries)
            } else {
                format!("not installed ({} entries)", rep.journal_entries)
            },
        ),
        (
            "fence",
            match rep.boundary {
                Some(b) => format!("on, journal_boundary={b}"),
                None if rep.fenced => "on, its record gone".into(),
                None => "off".into(),
            },
        ),
        ("replayed", format!("{} of {}", rep.replayed, rep.to_replay)),
        ("next", rep.next.clone()),
    ]);
    for s in &rep.sync {
        let at = match &s.cursor {
            None => "no sync yet".to_string(),
            Some(c) => format!("cursor ({}, {})", c.watermark, c.key),
        };
        text.push_str(&format!("sync {}  {} batches, {at}\n", s.table, s.batches));
    }
    text
}
