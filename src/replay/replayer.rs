//! The rollback's run: a [`Replayer`] applies the fenced journal, at or
//! below its boundary, to the source through the reverse transform, batch by
//! batch through the apply engine, with each entry's `seq` recorded in
//! `_cutover_applied` in the same transaction as its rows; then reconciles
//! the source against the target. It knows its [`Mode`]: the replay itself,
//! a dry run, or a rehearsal before any fence.
//!
//! Applied entries are always a prefix of the journal in `seq` order (a batch
//! commits whole), so a rerun after any crash starts after the last applied
//! `seq` and applies nothing twice. Gaps in `seq` are counted, never waited for.

use anyhow::{Context, Result};

use super::rehearse::{self, Timing};
use super::report::ReplayReport;
use super::report::{DryRunReport, Replay};
use super::steps::{
    Applying, Fenced, Start, dry_run_report, record, refused_before_writing, watch,
};
use crate::apply::{Fault, crash_at};
use crate::db::{Access, Db};
use crate::fence::Sentry;
use crate::progress::Bar;
use crate::replay::{
    Plan, carry_sequences, foreign_key_violations, refuse_unheld, refused_by_actions,
};
use crate::schema;
use crate::side_effects::Policy;
use crate::spec::{Side, Spec};

/// How a replay runs.
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

impl Mode {
    /// Whether this mode's writes are always rolled back.
    pub fn rolls_back(self) -> bool {
        self != Mode::Replay
    }
}

/// What a run reports, and the pace it measured (entries applied per
/// second, for `watch` and `status` to keep beside the spec).
pub struct Ran {
    pub report: Replay,
    pub pace: Option<crate::db::watch_state::Rate>,
}

/// One run of the rollback, as `cutover replay` asks it.
pub struct Replayer<'a> {
    pub spec: &'a Spec,
    pub mode: Mode,
    /// Journal entries per batch.
    pub batch: usize,
    /// How many differences or stale keys to list.
    pub max_diffs: usize,
    /// `--accept-findings`: commit past closing differences and rows left
    /// without their parent (never past a conflict or a breach), listed in
    /// the verdict.
    pub accept_findings: bool,
}

impl Replayer<'_> {
    /// Runs the replay in its mode, to its report.
    pub fn run(&self) -> Result<Ran> {
        let (spec, mode) = (self.spec, self.mode);
        // A dry run writes too, inside one transaction it always rolls back:
        // every check the replay makes, on the state the replay would leave.
        let dry_run = mode.rolls_back();
        let source = schema::open_source(spec, None, Access::Write)?;
        let target = Db::open(&spec.target, Access::Read, Side::Target)?;
        let (watch, boundary) = match self.fenced(&source, &target)? {
            Fenced::Watched(w, b) => (w, b),
            Fenced::Breached(report) => return Ok(Ran { report, pace: None }),
        };
        ready(spec, &source)?;
        // A damaged page reads as other rows: named before anything is
        // written, never met half-way.
        if let Some(damage) = source.connection().damage()? {
            anyhow::bail!("{damage}");
        }
        let at = Start::read(&source, &target, boundary)?;
        let planned = match dry_run {
            true => Some(self.plan_of(&target, &at)?),
            false => None,
        };
        let fk_before = foreign_key_violations(spec, &source)?;
        if dry_run && source.connection().facts()?.read_only {
            // A source this process may not write cannot host the rolled-back
            // replay: the plan alone, and say so.
            let report = Replay::DryRun(Box::new(DryRunReport {
                plan: planned.context("a dry run has its plan")?,
                tried: None,
                rehearsal: None,
                source: source.location().to_string(),
            }));
            return Ok(Ran { report, pace: None });
        }
        let rep = at.report();
        // The source's triggers, rules and foreign-key actions: what the role
        // cannot hold is refused before anything is written.
        let policy = Policy::read(spec, &source)?;
        // A trigger created again once every entry is in (RUNBOOK.md, "A
        // MySQL source") acts on no write of a replay with nothing left.
        if at.last_applied < at.boundary {
            refuse_unheld(&policy, &source)?;
        }
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
                let report = refused_before_writing(planned, rep, refused, &source);
                return Ok(Ran { report, pace: None });
            }
        }
        policy.hold(&source)?;
        self.apply(
            Prepared {
                source,
                target,
                watch,
                at,
                fk_before,
                policy,
            },
            rep,
            planned,
        )
    }

    /// Applies the journal in one transaction of the source, with the
    /// closing checks inside it, and commits it only when the replay
    /// reconciles (or, under `--accept-findings`, goes past findings it may
    /// accept): otherwise it is rolled back and every id generator put back,
    /// so a replay that will not reconcile leaves the source as it found it
    /// but for its verdict. A dry run and a rehearsal always roll back.
    fn apply(&self, p: Prepared, mut rep: ReplayReport, planned: Option<Plan>) -> Result<Ran> {
        let (spec, mode) = (self.spec, self.mode);
        let Prepared {
            mut source,
            mut target,
            mut watch,
            at,
            fk_before,
            policy,
        } = p;
        let sequences =
            crate::apply::Sequences::mark(source.catalogue(), &spec.tables, Side::Source)?;
        let bar = Bar::new("replay", Some((at.entries - at.applied_rows).max(0) as u64));
        let mut timing = Timing::start();
        let mut applying = Applying {
            spec,
            target: &mut target,
            at: &at,
            policy: &policy,
            fk_before: &fk_before,
            batch: self.batch,
            max_diffs: self.max_diffs,
            dry_run: mode.rolls_back(),
            accept_findings: self.accept_findings,
            bar: &bar,
            watch: watch.as_deref_mut(),
            rep: &mut rep,
            timing: &mut timing,
        };
        let made = control_tables_ahead(&source)?;
        let tried = source.all_or_nothing(|source| {
            let conflicts = applying.run(source)?;
            let commit = !mode.rolls_back() && applying.rep.verdict.holds();
            if commit && applying.rep.batches > 0 {
                crash_at(Fault::BeforeCommit);
            }
            Ok((conflicts, commit))
        });
        let committed = matches!(tried, Ok((_, true)));
        if committed {
            // The drills' crash points are those of a commit that wrote.
            if rep.batches > 0 {
                crash_at(Fault::AfterCommit);
            }
            carry_sequences(spec, &source, target.catalogue())?;
        } else {
            // Nothing the run wrote stays: the generators it moved go back,
            // and control tables it made outside the transaction go too.
            sequences.restore(source.catalogue())?;
            if made {
                source.applied_set().drop_if_empty()?;
            }
        }
        let (conflicts, _) = tried?;
        let Some(plan) = planned else {
            if !committed {
                rep.rolled_back = rep.applied + rep.already_in_place;
                (rep.applied, rep.already_in_place, rep.batches) = (0, 0, 0);
            }
            record(&source, &at.journal, &rep)?;
            // Only a replay that went through measures the pace.
            let paced = (at.entries - at.applied_rows) * i64::from(rep.verdict.holds());
            return Ok(Ran {
                pace: timing.pace("replay", paced),
                report: Replay::Ran(Box::new(rep)),
            });
        };
        let report = dry_run_report(plan, &source, conflicts, rep);
        if mode != Mode::Rehearse {
            return Ok(Ran { report, pace: None });
        }
        let (report, pace) = rehearse::finish(&source, &target, report, &at, &timing)?;
        Ok(Ran { report, pace })
    }

    /// The fence watched from the target's connection and its boundary; a
    /// rehearsal has no fence, and its boundary is the journal's end now. Or,
    /// when the fence is found breached before anything is planned, the
    /// replay's report of that.
    fn fenced(&self, source: &Db, target: &Db) -> Result<Fenced> {
        if self.mode == Mode::Rehearse {
            let boundary = rehearse::boundary(self.spec, source, target)?;
            return Ok(Fenced::Watched(None, boundary));
        }
        watch(self.spec, source, target)
    }

    /// What a dry run from `at` would apply.
    fn plan_of(&self, target: &Db, at: &Start) -> Result<Plan> {
        crate::replay::plan(
            self.spec,
            target,
            at.boundary,
            at.applied_rows,
            at.last_applied,
            at.gaps,
            self.max_diffs,
        )
    }
}

/// The source made ready for a run: a killed run's session may still be
/// ending on its server, and what it applied is read once it has.
fn ready(spec: &Spec, source: &Db) -> Result<()> {
    let tables: Vec<&str> = spec
        .tables
        .iter()
        .map(|t| t.source_table.as_str())
        .collect();
    source
        .connection()
        .await_other_runs(&tables, &mut |m| eprintln!("replay: {m}"))
}

/// Where a schema change commits at once (MySQL): the applied set's
/// tables made before the replay's transaction opens (inside it, they would
/// commit it), after every refusal; `true` when this made them, to be
/// dropped again, empty, when that transaction is rolled back.
fn control_tables_ahead(source: &Db) -> Result<bool> {
    if !source.engine().capabilities.transactional_ddl {
        return source.applied_set().make();
    }
    Ok(false)
}

/// What a replay has read and decided before it writes.
struct Prepared {
    source: Db,
    target: Db,
    watch: Option<Box<Sentry>>,
    at: Start,
    /// The source's foreign-key violations before anything was written.
    fk_before: Vec<String>,
    policy: Policy,
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn only_the_replay_itself_may_commit() {
        assert!(!Mode::Replay.rolls_back());
        assert!(Mode::DryRun.rolls_back());
        assert!(Mode::Rehearse.rolls_back());
    }
}
