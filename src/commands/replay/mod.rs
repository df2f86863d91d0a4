//! `cutover replay`: the rollback. Applies the fenced journal, at or below
//! its boundary, to the source through the reverse transform, batch by batch
//! through the apply engine, with each entry's `seq` recorded in
//! `_cutover_applied` in the same transaction as its rows. Then reconciles the
//! source against the target; exit 0 only if they are equal.
//!
//! Applied entries are always a prefix of the journal in `seq` order (a batch
//! commits whole), so a rerun after any crash starts after the last applied
//! `seq` and applies nothing twice. Gaps in `seq` are counted, never waited for.

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::apply::{BatchOutcome, Change, Conflict, Engine, JournalCheckpoint};
use crate::db::Access;
use crate::fence::Watch;
use crate::progress::Progress;
use crate::reconcile;
use crate::replay::{
    Plan, carry_sequences, causes, fold, foreign_key_violations, plan, record_keys,
    refused_by_actions, to_change, unjournaled,
};
use crate::report::{Report, Verdict};
use crate::schema;
use crate::side_effects::Policy;
use crate::spec::Spec;

mod render;

pub use render::render;

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

pub fn run(spec: &Spec, batch: usize, dry_run: bool, max_diffs: usize) -> Result<Replay> {
    // A dry run writes too, inside one transaction it always rolls back:
    // every check the replay makes, on the state the replay would leave.
    let mut source = schema::open_source(spec, None, Access::Write)?;
    let mut target = crate::db::Db::open(&spec.target, Access::Read, "target")?;
    if let Err(e) = spec.check_schema(&source, &target) {
        // A table dropped or altered behind the fence shows as a schema
        // error; it is a breach (exit 1), not a spec to fix.
        if crate::fence::read(&target)?.is_some()
            && let Ok(Err(breach)) = Watch::start(&target, spec)
        {
            let boundary = crate::fence::read(&target)?.map_or(0, |f| f.boundary);
            let entries = target
                .journal_count_between(target.journal_start()?, boundary)
                .unwrap_or(0);
            return breached(breach, boundary, entries);
        }
        return Err(e);
    }
    let mut watch = match Watch::start(&target, spec)? {
        Ok(w) => w,
        Err(breach) => {
            let boundary = crate::fence::read(&target)?.map_or(0, |f| f.boundary);
            let entries = target
                .journal_count_between(target.journal_start()?, boundary)
                .unwrap_or(0);
            return breached(breach, boundary, entries);
        }
    };
    let boundary = watch.fence().boundary;
    let journal = crate::journal::identity(&target)?.with_context(|| {
        format!(
            "target {} has a fence but its journal has no identity; install the journal with this version of cutover",
            target.location()
        )
    })?;
    // This journal's entries are those past its start (a restored target
    // renews its identity after the entries already there).
    let start = target.journal_start()?;
    let (applied_rows, last_applied) = source.applied_progress(&journal)?;
    let last_applied = last_applied.max(start);
    let entries = target.journal_count_between(start, boundary)?;
    let consistent = target.journal_count_between(start, last_applied)?;
    if consistent != applied_rows || last_applied > boundary.max(start) {
        bail!(
            "source {} records {applied_rows} applied entries up to seq {last_applied}, but the journal holds {consistent} entries up to that seq (boundary {boundary}); this source was replayed from another journal. Stop and investigate",
            source.location()
        );
    }
    let gaps = (boundary - last_applied) - (entries - applied_rows);
    let planned = if dry_run {
        Some(plan(
            spec,
            &target,
            boundary,
            applied_rows,
            last_applied,
            gaps,
            max_diffs,
        )?)
    } else {
        None
    };

    let fk_before = foreign_key_violations(spec, &source)?;
    if dry_run && source.is_read_only()? {
        // A source this process may not write cannot host the rolled-back
        // replay: the plan alone, and say so.
        return Ok(Replay::DryRun(Box::new(DryRunReport {
            plan: planned.context("a dry run has its plan")?,
            tried: None,
            source: source.location().to_string(),
        })));
    }
    // A dry run goes on past a conflict, leaving out every later entry of
    // that record, so that it lists every conflict the replay would meet.
    let mut poisoned: std::collections::HashSet<(usize, String)> = Default::default();
    let mut conflicts: Vec<Conflict> = Vec::new();
    let mut rep = ReplayReport {
        verdict: Verdict::Fail,
        boundary,
        entries,
        previously_applied: applied_rows,
        applied: 0,
        already_in_place: 0,
        batches: 0,
        gaps,
        raced: false,
        conflict: None,
        breach: None,
        foreign_keys: Vec::new(),
        refused: Vec::new(),
        reconciliation: None,
        causes: Vec::new(),
        unjournaled: Vec::new(),
        summary: None,
    };
    // The source's triggers, rules and foreign-key actions: what the role
    // cannot hold is refused before anything is written.
    let policy = Policy::read(spec, &source)?;
    let unheld: Vec<String> = policy
        .unheld_triggers()
        .map(|d| {
            format!(
                "source {} '{}' on '{}': {}",
                d.effect.kind,
                d.effect.name,
                d.effect.table,
                d.cannot.as_deref().unwrap_or_default()
            )
        })
        .collect();
    if !unheld.is_empty() {
        bail!(
            "replay cannot keep its promise on source {} and wrote nothing:\n  {}",
            source.location(),
            unheld.join("\n  ")
        );
    }
    if policy.live_actions().next().is_some() {
        let refused = refused_by_actions(spec, &source, &target, &policy, last_applied, boundary)?;
        if !refused.is_empty() {
            if let Some(plan) = planned {
                return Ok(Replay::DryRun(Box::new(DryRunReport {
                    plan,
                    tried: Some(DryRunTried {
                        verdict: Verdict::Fail,
                        conflicts: refused,
                        breach: None,
                        foreign_keys: Vec::new(),
                        reconciliation: None,
                    }),
                    source: source.location().to_string(),
                })));
            }
            rep.refused = refused;
            return Ok(Replay::Ran(Box::new(rep)));
        }
    }
    policy.hold(&source)?;
    let mut engine =
        Engine::for_journal(&spec.tables, &source, &journal).acting(policy.acting(spec));
    let sequences =
        crate::apply::Sequences::mark(&source, &spec.tables, crate::spec::Side::Source)?;
    if dry_run {
        source.begin_write()?;
        engine = engine.dry();
    }
    let mut after = last_applied;
    let bar = Progress::new("replay", Some((entries - applied_rows).max(0) as u64));
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
            let changes: Vec<Change> = run
                .into_iter()
                .map(|(_, c)| c)
                .filter(|c| {
                    poisoned.is_empty()
                        || record_keys(spec, c).iter().all(|k| !poisoned.contains(k))
                })
                .collect();
            let changes = fold(spec, changes);
            if let Some(b) = watch.recheck(&target, spec)? {
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
                    journal: &journal,
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
                    after = source.applied_last(&journal)?.max(start);
                    rep.raced = true;
                    runs.give_back(changes);
                    continue;
                }
                other => bail!("unexpected outcome of a replay batch: {other:?}"),
            }
            runs.give_back(changes);
            after = last_seq;
        }
        Ok(())
    })?;
    drop(engine);
    if rep.breach.is_none() && rep.conflict.is_none() && !dry_run {
        carry_sequences(spec, &source, &target)?;
    }
    if rep.breach.is_none() && rep.conflict.is_none() {
        let fk_after = foreign_key_violations(spec, &source)?;
        let new: Vec<String> = fk_after
            .into_iter()
            .filter(|v| !fk_before.contains(v))
            .collect();
        if !new.is_empty() {
            rep.foreign_keys = new;
        }
    }
    if rep.breach.is_none() && rep.conflict.is_none() {
        // One read of the target serves both the rollback reconciliation
        // and the final check of a fence of format 1 or 2; a later fence is
        // checked by reading the tables as they are, so the reconcile need
        // not hash every target row for it.
        let mut rec = match watch.fence().format {
            f if f < 3 => {
                reconcile::reconcile_digesting(spec, &mut source, &mut target, max_diffs)?
            }
            _ => reconcile::reconcile(spec, &mut source, &mut target, max_diffs)?,
        };
        rep.breach = watch.verify(&target, spec, std::mem::take(&mut rec.target_digests))?;
        rep.summary = Some(reconcile::summary(spec, &rec));
        rep.causes = causes(spec, &policy, &rec);
        rep.unjournaled = unjournaled(spec, &target, &rec)?;
        if rec.clean() && rep.breach.is_none() && rep.foreign_keys.is_empty() {
            rep.verdict = Verdict::Pass;
        }
        rep.reconciliation = Some(rec);
    }
    match planned {
        Some(plan) => {
            source.rollback();
            sequences.restore(&source)?;
            let would_pass = conflicts.is_empty() && rep.verdict == Verdict::Pass;
            Ok(Replay::DryRun(Box::new(DryRunReport {
                plan,
                tried: Some(DryRunTried {
                    verdict: Verdict::of(would_pass),
                    conflicts,
                    breach: rep.breach,
                    foreign_keys: rep.foreign_keys,
                    reconciliation: rep.reconciliation,
                }),
                source: source.location().to_string(),
            })))
        }
        None => {
            crate::fence::record_replay(
                &source,
                &journal,
                crate::fence::ReplayEnd {
                    boundary: rep.boundary,
                    passed: rep.verdict.holds(),
                    conflict: rep.conflict.as_ref(),
                    breach: rep.breach.as_deref(),
                    foreign_keys: &rep.foreign_keys,
                    summary: rep.summary.as_deref(),
                },
            )?;
            Ok(Replay::Ran(Box::new(rep)))
        }
    }
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

fn breached(breach: String, boundary: i64, entries: i64) -> Result<Replay> {
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
