//! `cutover status`: where the migration stands (loaded, journaling, fenced,
//! replayed k of n, rolled back) and the next command the runbook calls for.
//! Reads counters and control tables; with a fence on, it re-reads the fence's
//! fingerprint (a scan of the fenced tables) to say whether it still holds.

use anyhow::Result;
use serde::Serialize;

use crate::db::Access;
use crate::journal::Drift;
use crate::provenance::Cursor;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::{Side, Spec};

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
    pub drift: Vec<Drift>,
    /// Per synced table: its sync batches so far and where the cursor is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sync: Vec<SyncState>,
    /// Rollback readiness as the last `cutover watch` pass left it, and
    /// the estimate of the rollback's duration; `None` before the journal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
}

/// Rollback readiness, for the on-call.
#[derive(Debug, Serialize)]
pub struct Readiness {
    /// When the last watch pass ran; `None`: never, for this journal.
    pub last_pass_at: Option<String>,
    pub checked: i64,
    /// Journaled writes that cannot go back, as the last pass found them.
    pub irreversible: i64,
    /// The first of them, with its fix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first: Option<crate::watch::Finding>,
    pub estimate: crate::watch::Estimate,
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

/// Drift, a breach, a failed replay and a write known not to go back are
/// alarms: exit 1.
impl Report for StatusReport {
    fn holds(&self) -> bool {
        self.drift.is_empty()
            && self.readiness.as_ref().is_none_or(|r| r.irreversible == 0)
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
    let target = crate::db::Db::open(&spec.target, Access::Read, Side::Target)?;
    if target.identity().get()?.is_none() {
        // Before the switch, a spec that does not fit is an error to fix.
        schema::open(spec, Access::Read, Access::Read)?;
    }
    let fence = crate::fence::read(target.fence_records())?;
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
            format!(
                "ALARM: {} ({phase})",
                drift
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
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
        readiness: None,
    };
    readiness(spec, &target, &mut rep)?;

    for t in spec.tables.iter().filter(|t| t.watermark.is_some()) {
        rep.sync.push(SyncState {
            table: t.name.clone(),
            batches: target.progress().sync_batches(&t.name)?.len(),
            cursor: Cursor::of(target.progress().sync_cursor(&t.name)?),
        });
    }
    Ok(rep)
}

/// Readiness from the watch's state file, while the rollback is still to
/// come (journaling, or fenced before the replay is done): a known
/// irreversible write is an alarm, and `next` says what to do about it.
fn readiness(spec: &Spec, target: &crate::db::Db, rep: &mut StatusReport) -> Result<()> {
    if !matches!(rep.stage, Stage::Journaling | Stage::Fenced) {
        return Ok(());
    }
    let pending = (rep.journal_entries - rep.replayed).max(0);
    let journal = target.identity().id()?.map(|j| j.as_str().to_string());
    let found = crate::watch::readiness(spec, pending, rep.target_rows)?;
    let (last_pass_at, checked, irreversible, first, estimate) = match found {
        Some(r) if r.journal == journal => (
            r.last_pass_at,
            r.checked,
            r.irreversible,
            r.findings.into_iter().next(),
            r.estimate,
        ),
        // No pass for this journal yet: only the measured pace counts.
        Some(r) => (None, 0, 0, None, r.estimate),
        None => (
            None,
            0,
            0,
            None,
            crate::watch::estimate(None, pending, rep.target_rows),
        ),
    };
    let arg = format!("--spec {}", spec.path.display());
    if irreversible > 0 && rep.drift.is_empty() {
        let f = first.as_ref();
        rep.phase = format!(
            "ALARM: {irreversible} journaled writes cannot go back to the source, first seq {} ({})",
            f.map_or(0, |f| f.seq),
            rep.phase
        );
        rep.next = format!(
            "fix each write cutover watch {arg} lists ({}), then run cutover watch {arg} again; until then a rollback would stop there",
            f.map_or(String::new(), |f| f.fix.shown())
        );
    }
    rep.readiness = Some(Readiness {
        last_pass_at,
        checked,
        irreversible,
        first,
        estimate,
    });
    Ok(())
}

/// The report as text: `key  value` lines, then one per synced table.
pub fn render(rep: &StatusReport) -> String {
    let mut items = vec![
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
    ];
    if let Some(r) = &rep.readiness {
        items.push((
            "watch",
            match &r.last_pass_at {
                Some(at) => format!(
                    "last pass {at}: {} entries checked, {} cannot go back",
                    r.checked, r.irreversible
                ),
                None => "no pass yet for this journal (cutover watch)".into(),
            },
        ));
        items.push(("rollback", r.estimate.text()));
    }
    items.push(("next", rep.next.clone()));
    let mut text = report::pairs(&items);
    for s in &rep.sync {
        let at = match &s.cursor {
            None => "no sync yet".to_string(),
            Some(c) => format!("cursor ({}, {})", c.watermark, c.key),
        };
        text.push_str(&format!("sync {}  {} batches, {at}\n", s.table, s.batches));
    }
    text
}
