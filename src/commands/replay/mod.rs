//! `cutover replay`: the rollback. Applies the fenced journal, at or below
//! its boundary, to the source through the reverse transform, batch by batch
//! through the apply engine, with each entry's `seq` recorded in
//! `_cutover_applied` in the same transaction as its rows. Then reconciles the
//! source against the target; exit 0 only if they are equal.
//!
//! Applied entries are always a prefix of the journal in `seq` order (a batch
//! commits whole), so a rerun after any crash starts after the last applied
//! `seq` and applies nothing twice. Gaps in `seq` are counted, never waited for.

use anyhow::{Context, Result};
use serde::Serialize;

use crate::apply::Conflict;
use crate::db::Access;
use crate::progress::Progress;
use crate::reconcile;
use crate::replay::{Plan, foreign_key_violations, refuse_unheld, refused_by_actions};
use crate::report::{Report, Verdict};
use crate::schema;
use crate::side_effects::Policy;
use crate::spec::Spec;

mod rehearse;
mod render;
mod steps;

use rehearse::Timing;
pub use render::render;
use steps::{Applying, Start, dry_run_report, record, refused_before_writing, watch};

/// What the replay did.
#[derive(Debug, Serialize)]
pub struct ReplayReport {
    pub verdict: Verdict,
    pub boundary: i64,
    pub entries: i64,
    pub previously_applied: i64,
    pub applied: u64,
    pub already_in_place: u64,
    pub batches: u64,
    pub gaps: i64,
    /// Another replay ran at the same time; this one skipped what it applied.
    pub raced: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<Conflict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
    /// Rows of the source that break a foreign key after the replay and did
    /// not before it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub foreign_keys: Vec<String>,
    /// Entries that would set off a foreign-key action of the source that
    /// its role cannot switch off: found before anything was written, and
    /// nothing was.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Conflict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciliation: Option<reconcile::Reconciliation>,
    /// What the closing reconciliation's differences can be traced to: the
    /// source's triggers and rules that fired and set a differing column.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<String>,
    /// Columns added to a target table after `journal install`, mapped
    /// since: the keys whose value the journal never saw, as the closing
    /// reconciliation found them differing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unjournaled: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// What `cutover replay` reports.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Replay {
    /// The replay's report; a dry run gives it too when the fence is found
    /// breached before anything is planned.
    Ran(Box<ReplayReport>),
    /// `--dry-run`: the plan, and what the rolled-back replay met.
    DryRun(Box<DryRunReport>),
}

impl Report for Replay {
    fn holds(&self) -> bool {
        match self {
            Replay::Ran(r) => r.verdict.holds(),
            Replay::DryRun(d) => d.tried.as_ref().is_none_or(|t| t.verdict.holds()),
        }
    }
}

/// How `cutover replay` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The rollback, on the fenced target.
    Replay,
    /// `--dry-run`: the fenced replay in a transaction rolled back.
    DryRun,
    /// `--rehearse`: before any fence, the journal as it stands replayed
    /// in a transaction rolled back, and timed.
    Rehearse,
}

pub fn run(spec: &Spec, batch: usize, mode: Mode, max_diffs: usize) -> Result<Replay> {
    // A dry run writes too, inside one transaction it always rolls back:
    // every check the replay makes, on the state the replay would leave.
    let dry_run = mode != Mode::Replay;
    let mut source = schema::open_source(spec, None, Access::Write)?;
    let mut target = crate::db::Db::open(&spec.target, Access::Read, "target")?;
    let (mut watch, boundary) = match watched(spec, mode, &source, &target)? {
        Ok(w) => w,
        Err(breached) => return Ok(breached),
    };
    ready(spec, &source)?;
    let at = Start::read(&source, &target, boundary)?;
    let planned = match dry_run {
        true => Some(plan_of(spec, &target, &at, max_diffs)?),
        false => None,
    };
    let fk_before = foreign_key_violations(spec, &source)?;
    if dry_run && source.connection().facts()?.read_only {
        // A source this process may not write cannot host the rolled-back
        // replay: the plan alone, and say so.
        return Ok(Replay::DryRun(Box::new(DryRunReport {
            plan: planned.context("a dry run has its plan")?,
            tried: None,
            rehearsal: None,
            source: source.location().to_string(),
        })));
    }
    let mut rep = at.report();
    // The source's triggers, rules and foreign-key actions: what the role
    // cannot hold is refused before anything is written.
    let policy = Policy::read(spec, &source)?;
    refuse_unheld(&policy, &source)?;
    if policy.live_actions().next().is_some() {
        let refused = refused_by_actions(
            spec,
            &source,
            &target,
            &policy,
            at.last_applied,
            at.boundary,
        )?;
        if !refused.is_empty() {
            return Ok(refused_before_writing(planned, rep, refused, &source));
        }
    }
    policy.hold(&source)?;
    let sequences =
        crate::apply::Sequences::mark(source.catalogue(), &spec.tables, crate::spec::Side::Source)?;
    let bar = Progress::new("replay", Some((at.entries - at.applied_rows).max(0) as u64));
    let mut timing = Timing::start();
    let mut applying = Applying {
        spec,
        target: &mut target,
        at: &at,
        policy: &policy,
        fk_before: &fk_before,
        batch,
        max_diffs,
        dry_run,
        bar: &bar,
        watch: watch.as_mut(),
        rep: &mut rep,
        timing: &mut timing,
    };
    // A dry run: the same batches, as savepoints of one transaction that is
    // rolled back at the end.
    let made = dry_tables(&source, dry_run)?;
    let conflicts = match dry_run {
        true => {
            let tried = source.rolled_back(|source| applying.run(source));
            if made {
                source.applied_set().drop_if_empty()?;
            }
            tried?
        }
        false => applying.run(&mut source)?,
    };
    match planned {
        Some(plan) => {
            sequences.restore(source.catalogue())?;
            let report = dry_run_report(plan, &source, conflicts, rep);
            match mode {
                Mode::Rehearse => rehearse::finish(spec, &source, &target, report, &at, &timing),
                _ => Ok(report),
            }
        }
        None => {
            record(&source, &at.journal, &rep)?;
            // Only a replay that went through measures the pace.
            let paced = (at.entries - at.applied_rows) * i64::from(rep.verdict.holds());
            timing.record(spec, "replay", paced)?;
            Ok(Replay::Ran(Box::new(rep)))
        }
    }
}

/// The source made ready for a run: a killed run's session may still be
/// ending on its server, and what it applied is read once it has.
fn ready(spec: &Spec, source: &crate::db::Db) -> Result<()> {
    let tables: Vec<&str> = spec
        .tables
        .iter()
        .map(|t| t.source_table.as_str())
        .collect();
    source
        .connection()
        .await_other_runs(&tables, &mut |m| eprintln!("replay: {m}"))
}

/// For a dry run where a schema change commits at once (MySQL): the
/// applied set's tables made before the dry run's transaction opens (inside
/// it, they would commit it), after every refusal; `true` when this made
/// them, to be dropped again, empty, once that transaction is rolled back.
fn dry_tables(source: &crate::db::Db, dry_run: bool) -> Result<bool> {
    if dry_run && !source.engine().capabilities.transactional_ddl {
        return source.applied_set().make();
    }
    Ok(false)
}

/// The dry run's report: the plan, every conflict the replay would stop
/// at, and the reconciliation it would end with.
#[derive(Debug, Serialize)]
pub struct DryRunReport {
    #[serde(flatten)]
    pub plan: Plan,
    /// What the rolled-back replay met; `None` when the source is read-only
    /// for this user, so that only the plan was made.
    #[serde(flatten)]
    pub tried: Option<DryRunTried>,
    /// `--rehearse`: what the rehearsal measured; `None` for a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rehearsal: Option<rehearse::Rehearsal>,
    /// The source's path, for the text.
    #[serde(skip)]
    pub source: String,
}

/// What the rolled-back replay of a dry run met.
#[derive(Debug, Serialize)]
pub struct DryRunTried {
    /// `pass` when the replay would apply every entry and reconcile.
    pub verdict: Verdict,
    pub conflicts: Vec<Conflict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub foreign_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciliation: Option<reconcile::Reconciliation>,
}

pub(super) fn breached(breach: String, boundary: i64, entries: i64) -> Result<Replay> {
    Ok(Replay::Ran(Box::new(ReplayReport {
        verdict: Verdict::Fail,
        boundary,
        entries,
        previously_applied: 0,
        applied: 0,
        already_in_place: 0,
        batches: 0,
        gaps: 0,
        raced: false,
        conflict: None,
        breach: Some(breach),
        foreign_keys: Vec::new(),
        refused: Vec::new(),
        reconciliation: None,
        causes: Vec::new(),
        unjournaled: Vec::new(),
        summary: None,
    })))
}

/// The fence watched from the target's connection and its boundary; a
/// rehearsal has no fence, and its boundary is the journal's end now. Or,
/// when the fence is found breached before anything is planned, the
/// replay's report of that.
fn watched(
    spec: &Spec,
    mode: Mode,
    source: &crate::db::Db,
    target: &crate::db::Db,
) -> Result<Result<(Option<crate::fence::Watch>, i64), Replay>> {
    if mode == Mode::Rehearse {
        return Ok(Ok((None, rehearse::boundary(spec, source, target)?)));
    }
    Ok(watch(spec, source, target)?.map(|w| {
        let b = w.fence().boundary;
        (Some(w), b)
    }))
}

/// What a dry run from `at` would apply.
fn plan_of(spec: &Spec, target: &crate::db::Db, at: &Start, max_keys: usize) -> Result<Plan> {
    crate::replay::plan(
        spec,
        target,
        at.boundary,
        at.applied_rows,
        at.last_applied,
        at.gaps,
        max_keys,
    )
}
