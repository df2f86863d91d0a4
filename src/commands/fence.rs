//! `cutover fence on|off|status`: the fence (src/fence/) put on the target,
//! taken off, or checked, and the report each gives.

use anyhow::{Result, bail};
use serde::Serialize;

use crate::db::{Access, Db, JournalLogExt};
use crate::fence::{
    Before, Copy, FenceRow, copy_missing, copy_of, install, journal_tables, keep_copy_or_say, lift,
    orphaned, read, replay_not_passed, stand, take_off,
};
use crate::journal::Drift;
use crate::report::{self, Report};
use crate::schema;
use crate::spec::Spec;

/// Which fence command made a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    On,
    Off,
    Status,
}

/// The fence as `fence on`, `off` or `status` found or left it.
#[derive(Debug, Serialize)]
pub struct FenceReport {
    pub action: Action,
    pub fenced: bool,
    pub intact: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
    /// How the target's schema and journal triggers differ from the spec.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    #[serde(flatten)]
    pub fence: Option<FenceRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verification: Option<String>,
    /// The copy of the fence record in the source: `kept`, `recorded` (by
    /// this command), or what is wrong with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<String>,
    /// `fence on`: what the last `watch` pass left open, which the replay
    /// would refuse until it is fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<String>,
    /// What guards cutover's tables against schema changes (PostgreSQL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ddl_guard: Option<String>,
    /// Whether this command put the fence on or took it off (rather than
    /// finding it so).
    #[serde(skip)]
    pub changed: bool,
    /// `fence off --force`: journal entries left unreplayed.
    #[serde(skip)]
    pub not_replayed: i64,
}

impl FenceReport {
    fn of(action: Action, fence: Option<FenceRow>) -> FenceReport {
        FenceReport {
            action,
            fenced: fence.is_some(),
            intact: None,
            breach: None,
            drift: Vec::new(),
            fence,
            verification: None,
            copy: None,
            watch: None,
            ddl_guard: None,
            changed: false,
            not_replayed: 0,
        }
    }
}

/// Holds unless the fence is found breached.
impl Report for FenceReport {
    fn holds(&self) -> bool {
        self.intact != Some(false)
    }
}

/// The report as text: what the command did, then the fence's figures.
pub fn render(rep: &FenceReport) -> String {
    let headline = match (rep.action, &rep.fence) {
        (Action::On, Some(f)) if rep.changed => format!(
            "fence: on; the target is read-only for every writer; journal_boundary={}",
            f.boundary
        ),
        (Action::On, Some(f)) => {
            format!("fence: already on since {}; nothing changed", f.fenced_at)
        }
        (Action::Off, Some(_)) if rep.intact == Some(false) => {
            "fence: still on; nothing changed".to_string()
        }
        (Action::Off, Some(_)) if rep.not_replayed > 0 => format!(
            "fence: off (forced, with {} entries not replayed); writers can change the target again",
            rep.not_replayed
        ),
        (Action::Off, Some(_)) => "fence: off; writers can change the target again".to_string(),
        (Action::Off | Action::Status, None) if rep.fenced => {
            "fence: still on (fence triggers stand), but its record is gone".to_string()
        }
        (Action::Off, None) if rep.changed => {
            "fence: off (forced); writers can change the target again".to_string()
        }
        (Action::Off, None) => "fence: not on; nothing to do".to_string(),
        (Action::Status, Some(_)) => "fence: on".to_string(),
        (Action::Status | Action::On, None) => "fence: off".to_string(),
    };
    let mut text = with_figures(rep, &headline);
    if rep.action == Action::On && rep.changed {
        for d in &rep.drift {
            text.push_str(&format!("drift: {d}\n"));
        }
        if let Some(w) = &rep.watch {
            text.push_str(&format!("warning: {w}\n"));
        }
    }
    text
}

fn with_figures(rep: &FenceReport, headline: &str) -> String {
    let mut text = format!("{headline}\n");
    if let Some(f) = &rep.fence {
        text.push_str(&report::pairs(&[
            ("journal_boundary", f.boundary.to_string()),
            ("journal_entries", f.journal_rows.to_string()),
            ("fenced_tables", f.tables.join(", ")),
            ("fenced_at", f.fenced_at.clone()),
            ("fingerprint", f.fingerprint.clone()),
            (
                "intact",
                match rep.intact {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "-".into(),
                },
            ),
        ]));
    }
    if let Some(v) = &rep.verification {
        text.push_str(&format!("verification  {v}\n"));
    }
    if let Some(c) = &rep.copy {
        text.push_str(&format!("copy          {c}\n"));
    }
    if let Some(g) = &rep.ddl_guard {
        text.push_str(&format!("ddl_guard     {g}\n"));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!("{b}\n"));
    }
    text
}

pub fn on(spec: &Spec) -> Result<FenceReport> {
    // The emergency brake: no schema check against the spec. A target whose
    // schema drifted after the switch (a column added, a table rebuilt) is
    // fenced as it is, and the drift reported.
    let target = crate::schema::open_target(spec, Access::Write)?;
    if !(target.identity().installed()? && target.identity().get()?.is_some()) {
        // Before the switch a spec that does not fit is the error to report.
        schema::open(spec, Access::Read, Access::Read)?;
        bail!(
            "the journal is not installed on target {}; without it there is nothing to replay. Run `cutover journal install` at cutover time",
            target.location()
        );
    }
    let drift = crate::journal::drift(spec, &target)?;
    let tables: Vec<String> = spec
        .tables
        .iter()
        .map(|t| t.target_table.clone())
        .filter(|t| {
            target
                .catalogue()
                .table_columns(t)
                .is_ok_and(|c| !c.is_empty())
        })
        .collect();
    let images = journal_tables(target.capture())?;
    // Waits for a writer in flight, so its commit lands inside the boundary;
    // nothing is read before the writers are drained.
    let tx = target.begin_write()?;
    let guarded: Vec<&str> = tables.iter().chain(&images).map(String::as_str).collect();
    if let Err(e) = target.fence().drain_writers(&guarded) {
        return Err(e.context("the fence was not installed; the target is unchanged"));
    }
    if let Some(existing) = read(target.fence_records())? {
        drop(tx);
        return already_on(spec, &target, existing, drift);
    }
    // What `fence on` may leave behind besides its triggers, row and guard,
    // as it stands before anything is written: should the fence not stand,
    // these are put back as they were.
    let before = Before::read(&target, &guarded)
        .map_err(|e| e.context("the fence was not installed; the target is unchanged"))?;
    let ddl_guard = install(&target, tx, spec, &tables, &images)?;
    // The fence is committed. Until it is proven from another connection
    // and its copy is kept in the source, any failure takes it off again:
    // an exit 2 leaves the target as it was before this command.
    let (row, refused, copy) = match stand(spec, &tables, &images) {
        Ok(stood) => stood,
        Err(e) => return Err(take_off(&target, &tables, &before, e)),
    };
    let mut rep = FenceReport::of(Action::On, Some(row));
    rep.intact = Some(true);
    rep.drift = drift;
    rep.verification = Some(format!(
        "a write from another connection to each of the {} fenced tables and to the journal was refused: {}",
        tables.len(),
        refused.first().cloned().unwrap_or_default()
    ));
    rep.copy = Some(copy);
    rep.ddl_guard = ddl_guard;
    rep.changed = true;
    rep.watch = open_findings(spec)?;
    Ok(rep)
}

/// What the last `watch` pass left open, in one sentence; `None` when it
/// left nothing or there was none. The fence goes on either way: the
/// rollback has started, and the operator fixes what watch names.
fn open_findings(spec: &Spec) -> Result<Option<String>> {
    let Some(r) = crate::watch::readiness(spec, 0, 0)? else {
        return Ok(None);
    };
    let (Some(at), Some(first)) = (&r.last_pass_at, r.findings.first()) else {
        return Ok(None);
    };
    Ok(Some(format!(
        "the last watch pass ({at}) left {} entries that cannot go back, the first in table '{}', key {}: {}; replay will refuse them until each is fixed: run `cutover watch --spec {}` for the list and its fixes",
        r.irreversible.max(1),
        first.table,
        first.key,
        first.reason,
        spec.path.display()
    )))
}

/// `fence on` over a fence already standing: nothing changes on the target;
/// the fence is checked, and its copy kept in the source if it has none.
fn already_on(
    spec: &Spec,
    target: &Db,
    existing: FenceRow,
    drift: Vec<Drift>,
) -> Result<FenceReport> {
    let mut rep = FenceReport::of(Action::On, Some(existing.clone()));
    rep.drift = drift;
    let source = schema::open_source(spec, None, Access::Read)?;
    let copy = copy_of(&existing, &source, target)?;
    drop(source);
    let breach = match &copy {
        Copy::Differs(what) => Some(what.clone()),
        _ => existing.breach(target, spec)?,
    };
    rep.intact = Some(breach.is_none());
    rep.breach = breach.map(|what| format!("fence breached: {what}; the fence stays as it was. Find what changed, then re-plan: `cutover fence off --force` and `cutover fence on` set a new boundary"));
    rep.copy = Some(match copy {
        Copy::Kept => "kept in the source".to_string(),
        Copy::Differs(_) => "DIFFERS from the target's record".to_string(),
        // Intact: this is the fence `fence on` set; keep its copy now.
        Copy::Missing if rep.intact == Some(true) => keep_copy_or_say(spec, target, &existing)?,
        Copy::Missing => "none kept in the source".to_string(),
    });
    Ok(rep)
}

pub fn off(spec: &Spec, force: bool) -> Result<FenceReport> {
    let (source, target, _) = schema::open(spec, Access::Write, Access::Write)?;
    let journal = target.identity().id()?;
    let Some(existing) = read(target.fence_records())? else {
        let Some(what) = orphaned(&target, spec)? else {
            return Ok(FenceReport::of(Action::Off, None));
        };
        let mut rep = FenceReport::of(Action::Off, None);
        if force {
            let tables: Vec<String> = spec.tables.iter().map(|t| t.target_table.clone()).collect();
            lift(&source, &target, journal.as_ref(), &tables)?;
            rep.changed = true;
        } else {
            rep.fenced = true;
            rep.intact = Some(false);
            rep.breach = Some(format!(
                "fence breached: {what}; the fence stays on. Find what wrote to the target, then re-plan the rollback (`cutover fence off --force` lifts the fence anyway)"
            ));
        }
        return Ok(rep);
    };
    if let Copy::Differs(what) = copy_of(&existing, &source, &target)?
        && !force
    {
        let mut rep = FenceReport::of(Action::Off, Some(existing));
        rep.intact = Some(false);
        rep.breach = Some(format!(
            "fence breached: {what}; the fence stays on. Find what rewrote it, then re-plan the rollback (`cutover fence off --force` lifts the fence anyway)"
        ));
        return Ok(rep);
    }
    let applied = match &journal {
        Some(j) => source.applied_set().progress(j.as_str())?.entries,
        None => 0,
    };
    let start = target.identity().start()?;
    let pending = target.journal().count_between(start, existing.boundary)? - applied;
    if pending > 0 && !force {
        bail!(
            "the replay is incomplete: {pending} journal entries at or below boundary {} are not applied to the source. Run `cutover replay` to finish it; `cutover fence off --force` lifts the fence anyway and lets writers change the target again",
            existing.boundary
        );
    }
    let not_passed = match &journal {
        Some(j) => replay_not_passed(source.fence_records(), j, existing.boundary)?,
        None => {
            Some("the target's journal has no identity, so no replay of it is recorded".to_string())
        }
    };
    if let Some(why) = not_passed
        && !force
    {
        bail!(
            "the rollback is not done: {why}. Run `cutover replay --spec {spec}` until it ends with `replay: done` (after a failure, fix the source as its report says; a rerun that applies nothing and reconciles clean records the pass); `cutover fence off --force` lifts the fence anyway",
            spec = spec.path.display()
        );
    }
    lift(&source, &target, journal.as_ref(), &existing.tables)?;
    let mut rep = FenceReport::of(Action::Off, Some(existing));
    rep.fenced = false;
    rep.changed = true;
    rep.not_replayed = pending.max(0);
    Ok(rep)
}

pub fn status(spec: &Spec) -> Result<FenceReport> {
    let (source, target, _) = schema::open(spec, Access::Read, Access::Read)?;
    let Some(existing) = read(target.fence_records())? else {
        let mut rep = FenceReport::of(Action::Status, None);
        if let Some(what) = orphaned(&target, spec)? {
            rep.fenced = true;
            rep.intact = Some(false);
            rep.breach = Some(format!("fence breached: {what}"));
        }
        return Ok(rep);
    };
    let mut missing = Vec::new();
    for t in existing
        .tables
        .iter()
        .chain(&journal_tables(target.capture())?)
        .map(String::as_str)
    {
        if target.catalogue().own_triggers(t)?.fence != 3 {
            missing.push(t.to_string());
        }
    }
    let copy = copy_of(&existing, &source, &target)?;
    let breach = match &copy {
        Copy::Differs(what) => Some(what.clone()),
        _ => existing.breach(&target, spec)?,
    }
    .map(|what| {
        if missing.is_empty() {
            format!("fence breached: {what}")
        } else {
            format!(
                "fence breached: fence triggers missing on {}; {what}",
                missing.join(", ")
            )
        }
    });
    let mut rep = FenceReport::of(Action::Status, Some(existing));
    rep.intact = Some(breach.is_none());
    rep.breach = breach;
    rep.copy = Some(match copy {
        Copy::Kept => "kept in the source".to_string(),
        Copy::Differs(_) => "DIFFERS from the target's record".to_string(),
        Copy::Missing => copy_missing(spec),
    });
    Ok(rep)
}
