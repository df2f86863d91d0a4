//! `cutover status`: where the migration stands (loaded, journaling, fenced,
//! replayed k of n, rolled back) and the next command the runbook calls for.
//! Reads counters and control tables; with a fence on, it re-reads the fence's
//! fingerprint (a scan of the fenced tables) to say whether it still holds.

use anyhow::Result;
use serde::Serialize;

use crate::db::Access;
use crate::provenance::Cursor;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

mod stage;

use stage::{Seen, fenced, unfenced};

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
    if target.identity().get()?.is_none() {
        // Before the switch, a spec that does not fit is an error to fix.
        schema::open(spec, Access::Read, Access::Read)?;
    }
    let fence = crate::fence::read(&target)?;
    let seen = Seen::read(spec, &source, &target, fence.is_some())?;
    let (stage, phase, next, to_replay) = match &fence {
        Some(f) => fenced(f, spec, &source, &target, &seen)?,
        None => unfenced(&seen),
    };
    let Seen {
        spec_arg,
        replayed,
        journal_installed,
        journal_entries,
        target_rows,
        orphaned,
        mut drift,
        ..
    } = seen;
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
            batches: target.progress().sync_batches(&t.name)?.len(),
            cursor: Cursor::of(target.progress().sync_cursor(&t.name)?),
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
