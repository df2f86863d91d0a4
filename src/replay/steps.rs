//! The steps of a replay, in the order `run` takes them: the fence
//! watched, where the journal starts, the refusals before writing, the
//! runs applied, the closing checks, and the verdict recorded.

use anyhow::{Context, Result, bail};

use super::report::{DryRunReport, DryRunTried, Replay, ReplayReport, breached};
use crate::apply::{Applier, BatchOutcome, Change, Conflict, JournalCheckpoint};
use crate::db::{Db, JournalId, JournalLogExt};
use crate::fence::{Posted, Sentry};
use crate::progress::Bar;
use crate::reconcile::{self, DiffKind};
use crate::replay::{
    Plan, bridge, causes, fold, record_keys, to_change, unjournaled, violations_since,
};
use crate::report::Verdict;
use crate::side_effects::Policy;
use crate::spec::Spec;

/// Where the fence stands as a replay begins.
pub(super) enum Fenced {
    /// Watched from the target's connection (none for a rehearsal, which
    /// has no fence), with the boundary the replay goes to.
    Watched(Option<Box<Sentry>>, i64),
    /// Found breached before anything is planned: the replay's report of it.
    Breached(Replay),
}

/// The fence watched from the target's connection; or, when it is found
/// breached before anything is planned, the replay's report of that.
pub(super) fn watch(spec: &Spec, source: &Db, target: &Db) -> Result<Fenced> {
    if let Err(e) = spec.check_schema(source, target) {
        // A table dropped or altered behind the fence shows as a schema
        // error; it is a breach (exit 1), not a spec to fix.
        if crate::fence::read(target.fence_records())?.is_some()
            && let Ok(Posted::Breached(breach)) = Sentry::post(target, spec)
        {
            return breached_report(target, breach);
        }
        return Err(e);
    }
    match Sentry::post(target, spec)? {
        Posted::Standing(w) => {
            let b = w.fence().boundary;
            Ok(Fenced::Watched(Some(w), b))
        }
        Posted::Breached(breach) => breached_report(target, breach),
    }
}

/// The report of a fence found breached before anything was planned.
fn breached_report(target: &Db, breach: String) -> Result<Fenced> {
    let boundary = crate::fence::read(target.fence_records())?.map_or(0, |f| f.boundary);
    let entries = target
        .journal()
        .count_between(target.identity().start()?, boundary)
        .unwrap_or(0);
    breached(breach, boundary, entries).map(Fenced::Breached)
}

/// Where a replay starts: the journal's identity and extent up to the
/// fence's boundary, and what the source's applied set records of it.
pub(super) struct Start {
    pub(super) journal: JournalId,
    pub(super) boundary: i64,
    /// The journal's first seq: this journal's entries are those past it (a
    /// restored target renews its identity after the entries already there).
    pub(super) start: i64,
    pub(super) applied_rows: i64,
    pub(super) last_applied: i64,
    pub(super) entries: i64,
    pub(super) gaps: i64,
}

impl Start {
    pub(super) fn read(source: &Db, target: &Db, boundary: i64) -> Result<Start> {
        let journal = target.identity().id()?.with_context(|| {
            format!(
                "target {} has a fence but its journal has no identity; install the journal with this version of cutover",
                target.location()
            )
        })?;
        // This journal's entries are those past its start (a restored target
        // renews its identity after the entries already there).
        let start = target.identity().start()?;
        let applied = source.applied_set().progress(journal.as_str())?;
        let (applied_rows, last_applied) = (applied.entries, applied.last.max(start));
        let entries = target.journal().count_between(start, boundary)?;
        let consistent = target.journal().count_between(start, last_applied)?;
        if consistent != applied_rows || last_applied > boundary.max(start) {
            bail!(
                "source {} records {applied_rows} applied entries up to seq {last_applied}, but the journal holds {consistent} entries up to that seq (boundary {boundary}); this source was replayed from another journal. Stop and investigate",
                source.location()
            );
        }
        let gaps = (boundary - last_applied) - (entries - applied_rows);
        Ok(Start {
            journal,
            boundary,
            start,
            applied_rows,
            last_applied,
            entries,
            gaps,
        })
    }

    /// The report of a replay from here, before it has applied anything.
    pub(super) fn report(&self) -> ReplayReport {
        ReplayReport {
            verdict: Verdict::Fail,
            boundary: self.boundary,
            entries: self.entries,
            previously_applied: self.applied_rows,
            applied: 0,
            already_in_place: 0,
            batches: 0,
            rolled_back: 0,
            gaps: self.gaps,
            raced: false,
            conflict: None,
            breach: None,
            foreign_keys: Vec::new(),
            refused: Vec::new(),
            reconciliation: None,
            causes: Vec::new(),
            unjournaled: Vec::new(),
            summary: None,
            accepted: Vec::new(),
            drift: Vec::new(),
        }
    }
}

/// Entries that would set off a foreign-key action the role cannot switch
/// off: the report, found before anything was written.
pub(super) fn refused_before_writing(
    planned: Option<Plan>,
    mut rep: ReplayReport,
    refused: Vec<Conflict>,
    source: &Db,
) -> Replay {
    if let Some(plan) = planned {
        return Replay::DryRun(Box::new(DryRunReport {
            plan,
            tried: Some(DryRunTried {
                verdict: Verdict::Fail,
                applied: 0,
                conflicts: refused,
                breach: None,
                foreign_keys: Vec::new(),
                reconciliation: None,
                drift: Vec::new(),
            }),
            rehearsal: None,
            source: source.location().to_string(),
        }));
    }
    rep.refused = refused;
    Replay::Ran(Box::new(rep))
}

/// The most entries a run is widened to, to reach the next write of a
/// record whose row cannot go back ([`bridge`]).
const WIDEST_RUN: usize = 1 << 20;

/// How many entries to read the run again with when the change of
/// `conflict` leaves a row that cannot go back and the run was cut short
/// of the boundary (`full`): the record's next write, which may set the
/// row right ([`bridge`]), may lie past it. `None`: the conflict stands.
fn wider_run(
    engine: &Applier<'_>,
    changes: &[Change],
    conflict: &Conflict,
    full: bool,
    limit: usize,
) -> Result<Option<usize>> {
    let stuck = match changes.iter().find(|x| x.tag == conflict.tag) {
        Some(x) if full => engine.stuck(x)?,
        _ => false,
    };
    let wider = limit.saturating_mul(8).min(WIDEST_RUN);
    Ok((stuck && wider > limit).then_some(wider))
}

/// A replay under way: what applying its runs reads.
struct Replaying<'a> {
    pub(super) spec: &'a Spec,
    pub(super) source: &'a Db,
    pub(super) target: &'a Db,
    pub(super) at: &'a Start,
    pub(super) dry_run: bool,
    /// Per spec table, whether a trigger or rule of the source acts on
    /// replay's writes ([`fold`] keeps each of its writes).
    pub(super) fires: Vec<bool>,
}

/// A replay's batches and closing checks, with what they need: the
/// source is handed to [`Applying::run`] inside the one transaction the
/// replay commits whole or rolls back.
pub(super) struct Applying<'a> {
    pub(super) spec: &'a Spec,
    pub(super) target: &'a mut Db,
    pub(super) at: &'a Start,
    pub(super) policy: &'a Policy,
    /// The source's foreign-key violations before anything was written.
    pub(super) fk_before: &'a [String],
    pub(super) batch: usize,
    pub(super) max_diffs: usize,
    /// The run is rolled back whatever it meets (a dry run, a rehearsal):
    /// it goes on past a conflict to list every one.
    pub(super) dry_run: bool,
    /// `--accept-findings`: closing differences and rows left without
    /// their parent are accepted, listed, instead of failing the replay.
    pub(super) accept_findings: bool,
    pub(super) bar: &'a Bar,
    /// The fence watched; none for a rehearsal.
    pub(super) watch: Option<&'a mut Sentry>,
    pub(super) rep: &'a mut ReplayReport,
    /// How long applying and closing took.
    pub(super) timing: &'a mut super::rehearse::Timing,
}

impl Applying<'_> {
    /// Applies the journal's runs to `source`, each batch a savepoint of
    /// the caller's transaction; when none stopped on a breach or a
    /// conflict, checks the foreign keys and closes with the
    /// reconciliation, all inside that transaction, on the state the
    /// replay would commit. The conflicts a dry run went on past.
    pub(super) fn run(&mut self, source: &mut Db) -> Result<Vec<Conflict>> {
        let (spec, at) = (self.spec, self.at);
        let acting = self.policy.acting(spec);
        let fires = acting.iter().map(|a| !a.is_empty()).collect();
        let engine = Applier::for_journal(&spec.tables, source, at.journal.as_str())
            .acting(acting)
            .clocks(self.policy.clocks(spec))
            .within();
        let replaying = Replaying {
            spec,
            source,
            target: self.target,
            at,
            dry_run: self.dry_run,
            fires,
        };
        self.timing.restart();
        let conflicts = replaying.apply_runs(
            &engine,
            self.watch.as_deref_mut(),
            self.batch,
            self.bar,
            self.rep,
        )?;
        drop(engine);
        self.timing.applied();
        let stopped = self.rep.breach.is_some() || self.rep.conflict.is_some();
        if !stopped {
            self.rep.foreign_keys = violations_since(spec, source, self.fk_before)?;
            self.close(source)?;
            self.timing.closed(self.rep.reconciliation.as_ref());
        }
        Ok(conflicts)
    }
}

impl Replaying<'_> {
    /// A run's changes as the batch writes them: those of a record a dry
    /// run met a conflict on left out, rows set right by the record's next
    /// write merged into it ([`bridge`]), swapped keys folded ([`fold`]).
    fn changes(
        &self,
        engine: &Applier<'_>,
        run: Vec<(i64, Change)>,
        poisoned: &std::collections::HashSet<(usize, String)>,
    ) -> Result<Vec<Change>> {
        let spec = self.spec;
        let changes: Vec<Change> = run
            .into_iter()
            .map(|(_, c)| c)
            .filter(|c| {
                poisoned.is_empty() || record_keys(spec, c).iter().all(|k| !poisoned.contains(k))
            })
            .collect();
        let changes = bridge(spec, changes, &self.fires, &mut |c| engine.stuck(c))?;
        Ok(fold(spec, changes, &self.fires))
    }

    /// Applies the journal's runs, batch by batch, until the boundary, a
    /// conflict or a breach; the conflicts a dry run went on past.
    pub(super) fn apply_runs(
        &self,
        engine: &Applier<'_>,
        mut watch: Option<&mut Sentry>,
        batch: usize,
        bar: &Bar,
        rep: &mut ReplayReport,
    ) -> Result<Vec<Conflict>> {
        let (spec, source, target) = (self.spec, self.source, self.target);
        let (journal, start, boundary) =
            (self.at.journal.as_str(), self.at.start, self.at.boundary);
        let dry_run = self.dry_run;
        // A dry run goes on past a conflict, leaving out every later entry of
        // that record, so that it lists every conflict the replay would meet.
        let mut poisoned: std::collections::HashSet<(usize, String)> = Default::default();
        let mut conflicts: Vec<Conflict> = Vec::new();
        let mut after = self.at.last_applied;
        let mut widened = false;
        std::thread::scope(|scope| -> Result<()> {
            let mut runs =
                crate::journal::RunsAhead::start(scope, spec, after, boundary, batch, to_change);
            loop {
                let run = runs.next(after)?;
                if run.is_empty() {
                    break;
                }
                let seqs: Vec<i64> = run.iter().map(|(seq, _)| *seq).collect();
                let last_seq = seqs.iter().copied().max().unwrap_or(after);
                let n = run.len() as u64;
                let changes = self.changes(engine, run, &poisoned)?;
                if let Some(w) = watch.as_deref_mut()
                    && let Some(b) = w.recheck(target, spec)?
                {
                    rep.breach = Some(b);
                    break;
                }
                let delivery = format!(
                    "journal:{}-{last_seq}",
                    seqs.iter().copied().min().unwrap_or(last_seq)
                );
                match engine.apply_batch(
                    &changes,
                    &JournalCheckpoint {
                        journal,
                        floor: start,
                        after,
                        seqs: &seqs,
                        delivery: &delivery,
                    },
                )? {
                    BatchOutcome::Committed(a) => {
                        bar.add(n);
                        rep.applied += a.written;
                        rep.already_in_place += a.duplicate;
                        rep.batches += 1;
                    }
                    BatchOutcome::Conflict(c) => {
                        // A row that cannot go back, whose record's next
                        // write lies past the run: the run read again,
                        // longer, to reach it (the batch's savepoint is
                        // rolled back).
                        let full = last_seq < boundary && n as usize >= runs.limit();
                        if let Some(wider) = wider_run(engine, &changes, &c, full, runs.limit())? {
                            widened = true;
                            runs.resize(after, wider);
                            runs.give_back(changes);
                            continue;
                        }
                        if dry_run && let Some(ch) = changes.iter().find(|x| x.tag == c.tag) {
                            poisoned.extend(record_keys(spec, ch));
                            conflicts.push(*c);
                            runs.give_back(changes);
                            continue;
                        }
                        rep.conflict = Some(*c);
                        break;
                    }
                    BatchOutcome::Raced => {
                        // Another replay committed first: carry on after what it did.
                        after = source.applied_set().last(journal)?.max(start);
                        rep.raced = true;
                        runs.give_back(changes);
                        continue;
                    }
                    other => bail!("unexpected outcome of a replay batch: {other}"),
                }
                runs.give_back(changes);
                after = last_seq;
                if widened {
                    widened = false;
                    runs.resize(after, batch);
                }
            }
            Ok(())
        })?;
        Ok(conflicts)
    }
}

impl Applying<'_> {
    /// The closing checks once every entry is applied: one read of the
    /// target serves both the rollback reconciliation and the final check
    /// of a fence of format 1 or 2; a later fence is checked by reading the
    /// tables as they are, so the reconcile need not hash every target row
    /// for it. The verdict: a pass when the source reconciles clean, with
    /// no breach and no row left without its parent; under
    /// `--accept-findings`, differences and such rows are listed as
    /// accepted instead (never a breach or a conflict).
    fn close(&mut self, source: &mut Db) -> Result<()> {
        let (spec, target, max_diffs) = (self.spec, &mut *self.target, self.max_diffs);
        let watch = self.watch.as_deref();
        // A rehearsal has no fence to check.
        let mut rec = match watch.map(|w| w.fence().format) {
            Some(f) if f < 3 => reconcile::reconcile_digesting(spec, source, target, max_diffs)?,
            _ => reconcile::reconcile(spec, source, target, max_diffs)?,
        };
        let rep = &mut *self.rep;
        rep.breach = match watch {
            Some(w) => w.verify(target, spec, std::mem::take(&mut rec.target_digests))?,
            None => None,
        };
        rep.summary = Some(reconcile::summary(spec, &rec));
        rep.causes = causes(spec, self.policy, &rec);
        rep.unjournaled = unjournaled(spec, target, &rec)?;
        // Differences with the target drifted behind the journal (a
        // TRUNCATE, a rebuilt table, triggers gone): named as their cause.
        if !rec.clean() {
            rep.drift = crate::journal::drift::drift(spec, target)?;
        }
        let findings = !rec.clean() || !rep.foreign_keys.is_empty();
        match judged(findings, rep.breach.is_some(), self.accept_findings) {
            Judged::Pass => rep.verdict = Verdict::Pass,
            Judged::Accepted => {
                rep.verdict = Verdict::Pass;
                rep.accepted = accepted(spec, &rec, &rep.foreign_keys);
            }
            Judged::Fail => rep.verdict = Verdict::Fail,
        }
        rep.reconciliation = Some(rec);
        Ok(())
    }
}

/// How a replay that applied every entry is judged.
#[derive(Debug, PartialEq, Eq)]
enum Judged {
    /// Reconciled clean, no breach, no row left without its parent.
    Pass,
    /// Findings (closing differences, rows without their parent), accepted
    /// under `--accept-findings`.
    Accepted,
    Fail,
}

/// The verdict of a replay that applied every entry: `findings` are
/// closing differences or rows left without their parent, which only
/// `--accept-findings` lets through; a breach is never accepted.
fn judged(findings: bool, breach: bool, accept_findings: bool) -> Judged {
    match (breach, findings, accept_findings) {
        (true, _, _) => Judged::Fail,
        (false, false, _) => Judged::Pass,
        (false, true, true) => Judged::Accepted,
        (false, true, false) => Judged::Fail,
    }
}

/// The findings a replay under `--accept-findings` went past, each in one
/// line: every closing difference kept (up to `--max-diffs`) and how many
/// there were, and every row left without its parent.
fn accepted(spec: &Spec, rec: &reconcile::Reconciliation, orphans: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if !rec.clean() {
        out.push(format!(
            "the source does not reconcile with the target: {}",
            reconcile::summary(spec, rec)
        ));
    }
    for d in &rec.diffs {
        let what = match d.kind {
            DiffKind::Changed => "differs",
            DiffKind::Missing => "is in the source only",
            DiffKind::Extra => "is in the target only",
            DiffKind::Invalid => "cannot be carried across",
            DiffKind::NonCanonical => "is not in the form the replay writes",
        };
        let column = d.column.as_ref().map(|c| format!(", column '{c}'"));
        out.push(format!(
            "table '{}', key {}{}: {what}",
            d.table,
            d.key,
            column.unwrap_or_default()
        ));
    }
    out.extend(orphans.iter().map(|o| format!("foreign key: {o}")));
    out
}

/// The dry run's report, its replay rolled back.
pub(super) fn dry_run_report(
    plan: Plan,
    source: &Db,
    conflicts: Vec<Conflict>,
    rep: ReplayReport,
) -> Replay {
    let would_pass = conflicts.is_empty() && rep.verdict == Verdict::Pass;
    Replay::DryRun(Box::new(DryRunReport {
        plan,
        tried: Some(DryRunTried {
            verdict: Verdict::of(would_pass),
            applied: rep.applied,
            conflicts,
            breach: rep.breach,
            foreign_keys: rep.foreign_keys,
            reconciliation: rep.reconciliation,
            drift: rep.drift,
        }),
        rehearsal: None,
        source: source.location().to_string(),
    }))
}

/// Records in the source how the replay ended, which `fence off` and
/// `status` go by.
pub(super) fn record(source: &Db, journal: &JournalId, rep: &ReplayReport) -> Result<()> {
    crate::fence::record_replay(
        source,
        journal,
        crate::fence::ReplayEnd {
            boundary: rep.boundary,
            passed: rep.verdict.holds(),
            conflict: rep.conflict.as_ref(),
            breach: rep.breach.as_deref(),
            foreign_keys: &rep.foreign_keys,
            summary: rep.summary.as_deref(),
            accepted: &rep.accepted,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::{Judged, judged};

    #[test]
    fn a_replay_passes_only_clean_or_with_findings_accepted() {
        assert_eq!(judged(false, false, false), Judged::Pass);
        assert_eq!(judged(false, false, true), Judged::Pass);
        assert_eq!(judged(true, false, false), Judged::Fail);
        assert_eq!(judged(true, false, true), Judged::Accepted);
    }

    #[test]
    fn a_breach_is_never_accepted() {
        for (findings, accept) in [(false, false), (false, true), (true, false), (true, true)] {
            assert_eq!(judged(findings, true, accept), Judged::Fail);
        }
    }
}
