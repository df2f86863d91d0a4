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

use crate::apply::{
    BatchOutcome, Change, Conflict, Engine, JournalCheckpoint, Rule, row_from_json,
};
use crate::db::{Access, Db};
use crate::fence::Watch;
use crate::progress::Progress;
use crate::reconcile;
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::side_effects::Policy;
use crate::spec::Spec;

/// A key of the source that the pending entries change.
#[derive(Debug, Serialize)]
pub struct StaleKey {
    pub table: String,
    pub key: serde_json::Value,
    /// The journal's ops on the key, in order, comma-separated.
    pub ops: String,
    pub effect: Effect,
}

/// What the pending entries do to a key, first op to last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Effect {
    #[serde(rename = "new")]
    New,
    #[serde(rename = "updated")]
    Updated,
    #[serde(rename = "deleted")]
    Deleted,
    #[serde(rename = "inserted and deleted")]
    InsertedAndDeleted,
}

/// What the replay would apply.
#[derive(Debug, Serialize)]
pub struct Plan {
    pub boundary: i64,
    pub already_applied: i64,
    pub pending: i64,
    pub gaps: i64,
    pub insert: i64,
    pub update: i64,
    pub delete: i64,
    pub stale_keys: u64,
    pub keys: Vec<StaleKey>,
}

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

/// Turns one journal entry into a change in canonical form, addressed by
/// the key the row had before it (a key change moves it from there), with
/// both images in the source's form: made on the journal's reading thread,
/// so the applying one only writes.
fn to_change(spec: &Spec, e: crate::journal::Entry) -> Change {
    let t = &spec.tables[e.table];
    let k = t.key_len;
    let at = e
        .before
        .as_ref()
        .or(e.after.as_ref())
        .map(|r| r[..k].to_vec())
        .unwrap_or_default();
    let form = |r: &Option<crate::value::Row>| {
        r.as_ref()
            .map(|r| crate::apply::source_form(t, r, &e.unrecorded))
            .transpose()
    };
    let source_images = match (form(&e.before), form(&e.after)) {
        (Ok(b), Ok(a)) => Some((b, a)),
        // The applying thread meets the same refusal and reports it.
        _ => None,
    };
    Change {
        table: e.table,
        key: at,
        rule: Rule::Expect {
            before: e.before,
            revision: None,
        },
        after: e.after,
        tag: e.seq,
        source_images,
        entries: 1,
        unrecorded: e.unrecorded,
    }
}

/// A batch's changes with those of records touched more than once folded
/// into their net effect: a delete and re-insert of one key in a
/// transaction, two keys swapped in one `UPDATE` under a deferrable key, a
/// key moved onto one freed in the same batch. The target passed through
/// states a source whose key, UNIQUE or foreign key is checked statement by
/// statement refuses (two rows under one key, a parent briefly gone); the
/// net effect never does: each key goes from the row it held before the
/// batch to the row it holds after, written in place where it holds one
/// before and after.
///
/// The rows each change removes and adds are followed as a set, in seq
/// order: a change removes its before-image (a row present at the start of
/// the batch, unless an earlier change added it) and adds its after-image.
/// The fold is made only where that proves one row per key at the start
/// and at the end; records touched once are left exactly as they were.
fn fold(spec: &Spec, changes: Vec<Change>) -> Vec<Change> {
    use crate::value::Row;
    use std::collections::HashMap;
    let key_of = |c: &Change, r: &Row| -> Vec<u8> {
        let k = spec.tables[c.table].key_len;
        let mut id = c.table.to_le_bytes().to_vec();
        id.extend(crate::value::key_json(&r[..k]).to_string().into_bytes());
        id
    };
    let before_of = |c: &Change| match &c.rule {
        Rule::Expect { before, .. } => before.clone(),
        _ => None,
    };
    // Most batches touch each record once: found without allocating, by a
    // hash of each key a change touches; only a repeated hash (a record
    // touched twice, or a collision) goes on to the exact comparison below.
    let hash = |table: usize, key: &[crate::value::Value]| {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        table.hash(&mut h);
        for v in key {
            match v.as_cell() {
                crate::value::CellRef::Null => 0u8.hash(&mut h),
                crate::value::CellRef::Integer(i) => (1u8, i).hash(&mut h),
                crate::value::CellRef::Real(r) => (2u8, r.to_bits()).hash(&mut h),
                crate::value::CellRef::Text(t) => (3u8, t).hash(&mut h),
                crate::value::CellRef::Blob(b) => (4u8, b).hash(&mut h),
                crate::value::CellRef::Digested(d) => (5u8, d.len, d.sha256).hash(&mut h),
            }
        }
        h.finish()
    };
    let mut seen: std::collections::HashSet<u64> =
        std::collections::HashSet::with_capacity(changes.len() * 2);
    let mut repeated = false;
    for c in &changes {
        let k = spec.tables[c.table].key_len;
        let from = hash(c.table, &c.key[..k.min(c.key.len())]);
        repeated |= !seen.insert(from);
        if let Some(a) = &c.after {
            let to = hash(c.table, &a[..k]);
            repeated |= to != from && !seen.insert(to);
        }
        if repeated {
            break;
        }
    }
    if !repeated {
        return changes;
    }
    // The keys each change touches.
    let keys: Vec<Vec<Vec<u8>>> = changes
        .iter()
        .map(|c| {
            let mut ks = vec![{
                let k = spec.tables[c.table].key_len;
                let mut id = c.table.to_le_bytes().to_vec();
                id.extend(
                    crate::value::key_json(&c.key[..k.min(c.key.len())])
                        .to_string()
                        .into_bytes(),
                );
                id
            }];
            if let Some(a) = &c.after {
                let to = key_of(c, a);
                if to != ks[0] {
                    ks.push(to);
                }
            }
            ks
        })
        .collect();
    let mut touched: HashMap<&[u8], usize> = HashMap::new();
    for k in keys.iter().flatten() {
        *touched.entry(k.as_slice()).or_default() += 1;
    }
    if touched.values().all(|&n| n == 1) {
        return changes;
    }
    // Groups of changes linked by the keys they share (union-find, each
    // group's root its first change).
    let mut parent: Vec<usize> = (0..changes.len()).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    let mut first: HashMap<&[u8], usize> = HashMap::new();
    for (i, ks) in keys.iter().enumerate() {
        for k in ks {
            match first.get(k.as_slice()) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    first.insert(k.as_slice(), i);
                }
            }
        }
    }
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..changes.len() {
        groups.entry(root(&mut parent, i)).or_default().push(i);
    }
    let mut out: Vec<Option<Vec<Change>>> = (0..changes.len()).map(|_| None).collect();
    for (lead, members) in &groups {
        if members.len() < 2 {
            continue;
        }
        // start: the rows the batch found (key → row, first change naming
        // it); now: the rows present after each change.
        let mut start: Vec<(Vec<u8>, Row, usize)> = Vec::new();
        let mut now: Vec<(Vec<u8>, Row)> = Vec::new();
        // Changes recorded with different columns (entries on both sides of
        // a `journal install` that added one) say nothing of each other's
        // missing columns: they are applied one by one.
        let unrecorded = &changes[members[0]].unrecorded;
        let mut proven = members
            .iter()
            .all(|&i| changes[i].unrecorded == *unrecorded);
        for &i in members {
            let c = &changes[i];
            if let Some(b) = before_of(c) {
                match now.iter().position(|(_, r)| *r == b) {
                    Some(p) => {
                        now.remove(p);
                    }
                    None => {
                        let k = key_of(c, &b);
                        if start.iter().any(|s| s.0 == k) {
                            proven = false;
                        }
                        start.push((k, b, i));
                    }
                }
            }
            if let Some(a) = &c.after {
                now.push((key_of(c, a), a.clone()));
            }
        }
        let mut ends: Vec<&[u8]> = now.iter().map(|(k, _)| k.as_slice()).collect();
        ends.sort();
        if !proven || ends.windows(2).any(|w| w[0] == w[1]) {
            continue;
        }
        // Every key the group touched, in the order first touched.
        let mut order: Vec<(&[u8], usize)> = Vec::new();
        for &i in members {
            for k in &keys[i] {
                if !order.iter().any(|o| o.0 == k.as_slice()) {
                    order.push((k.as_slice(), i));
                }
            }
        }
        let mut folded: Vec<Change> = Vec::new();
        for (k, i) in order {
            let pre = start.iter().find(|s| s.0 == k);
            let post = now.iter().find(|n| n.0 == k).map(|n| n.1.clone());
            let c = &changes[pre.map_or(i, |p| p.2)];
            let t = &spec.tables[c.table];
            let key = match (pre, &post) {
                (Some(p), _) => p.1[..t.key_len].to_vec(),
                (None, Some(a)) => a[..t.key_len].to_vec(),
                // Added and removed again within the batch: the source must
                // not hold it, as at the start.
                (None, None) => {
                    let x = &changes[i];
                    let r = before_of(x).or_else(|| x.after.clone()).unwrap_or_default();
                    if key_of(x, &r) == k {
                        r[..t.key_len].to_vec()
                    } else {
                        x.after
                            .as_ref()
                            .map_or_else(Vec::new, |a| a[..t.key_len].to_vec())
                    }
                }
            };
            folded.push(Change {
                table: c.table,
                key,
                rule: Rule::Expect {
                    before: pre.map(|p| p.1.clone()),
                    revision: None,
                },
                after: post,
                tag: c.tag,
                source_images: None,
                entries: 0,
                unrecorded: unrecorded.clone(),
            });
        }
        // Rows leave where the group's first change stood and arrive where
        // its last one did: a change of another record between them (the
        // delete of a row whose UNIQUE value arrives here, a child of a row
        // written here) keeps its place between the two. Deletes, then
        // rewrites in place, then inserts.
        folded.sort_by_key(|c| match (&c.rule, &c.after) {
            (_, None) => 0,
            (
                Rule::Expect {
                    before: Some(_), ..
                },
                Some(_),
            ) => 1,
            _ => 2,
        });
        if let Some(f) = folded.first_mut() {
            f.entries = members.len() as u64;
        }
        let last = members.iter().copied().max().unwrap_or(*lead);
        let arrive = folded
            .iter()
            .position(|c| c.after.is_some())
            .unwrap_or(folded.len());
        let arrivals = folded.split_off(arrive);
        for &i in members {
            out[i] = Some(Vec::new());
        }
        out[*lead] = Some(folded);
        out[last].get_or_insert_with(Vec::new).extend(arrivals);
    }
    changes
        .into_iter()
        .zip(out)
        .flat_map(|(c, f)| f.unwrap_or_else(|| vec![c]))
        .collect()
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

/// The records a change touches: its key, and the key it moves to.
fn record_keys(spec: &Spec, c: &Change) -> Vec<(usize, String)> {
    let k = spec.tables[c.table].key_len;
    let mut out = vec![(c.table, crate::value::key_json(&c.key).to_string())];
    if let Some(a) = &c.after {
        let to = crate::value::key_json(&a[..k]).to_string();
        if to != out[0].1 {
            out.push((c.table, to));
        }
    }
    out
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

/// The report as text, the rows of a conflict in both forms (`spec` gives
/// the source form).
pub fn render(spec: &Spec, rep: &Replay) -> String {
    match rep {
        Replay::Ran(r) => render_replay(spec, r),
        Replay::DryRun(d) => render_dry_run(spec, d),
    }
}

fn render_dry_run(spec: &Spec, dry: &DryRunReport) -> String {
    let mut text = render_plan(&dry.plan);
    let Some(rep) = &dry.tried else {
        text.push_str(&format!(
            "dry run: {} is read-only for this user, so only the plan was made; the before-images, reverse transforms and the closing reconciliation were not checked. Nothing was written\n",
            dry.source
        ));
        return text;
    };
    let (conflicts, would_pass) = (&rep.conflicts, rep.verdict.holds());
    for c in conflicts {
        text.push_str(&conflict_text(spec, c));
        text.push_str(&format!("\n{}\n", cause(c)));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!("\n{b}\n"));
    }
    for v in &rep.foreign_keys {
        text.push_str(&format!("foreign key: {v}\n"));
    }
    if let Some(rec) = &rep.reconciliation {
        text.push_str("\nreconciliation the replay would end with (source against target)\n");
        text.push_str(&report::reconciliation(rec));
        text.push('\n');
    }
    text.push_str(&if would_pass {
        "dry run: the replay would apply every entry and reconcile; nothing was written\n".to_string()
    } else if conflicts.is_empty() {
        "dry run: the replay would not reconcile (see above); nothing was written\n".to_string()
    } else {
        format!(
            "dry run: the replay would stop at {} conflict{} (each listed; later entries of those records left out); nothing was written\n",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" }
        )
    });
    text
}

/// Moves each source table's id generators past the target's and past
/// every id the source table now holds (`Catalogue::raise_sequence`), so
/// that the source, in use again, never hands out an id already used. Its
/// own transaction after the last batch; a rerun does it again.
fn carry_sequences(spec: &Spec, source: &Db, target: &Db) -> Result<()> {
    let marks: Vec<(&str, Option<i64>)> = spec
        .tables
        .iter()
        .map(|t| Ok((t.source_table.as_str(), target.sequence(&t.target_table)?)))
        .collect::<Result<_>>()?;
    source.write(|| {
        marks
            .iter()
            .try_for_each(|(t, n)| source.raise_sequence(t, n.unwrap_or(0)))
    })
}

/// What a conflict's evidence shows, and what to do: said only as far as
/// the three versions of the row prove it.
fn cause(c: &Conflict) -> String {
    let again = "then run `cutover replay` again";
    if c.reason.contains("changed no row") {
        return format!(
            "A trigger or rule of the source swallowed the write: give it replay_policy = {{ NAME = \"suppress\" }} in the spec's table (where the engine can switch it off), or drop or adjust it for the rollback, {again}"
        );
    }
    if c.reason.contains("refuses the row") {
        return format!(
            "The source's own constraint refuses the row ({}): settle the row that collides with it in the source by hand, {again}",
            c.reason
        );
    }
    if c.reason.contains("cannot be carried back") || c.reason.contains("cannot be read") {
        let fix = if c.reason.contains("not in the map") || c.reason.contains("map") {
            "add the value to the column's map in the spec"
        } else if c.reason.contains("integer") || c.reason.contains("real") {
            "the target holds a value of another kind than the column carries (a float where an integer belongs, say): correct it in the target before the fence, or settle the source row by hand"
        } else {
            "extend the spec (a map, a column check) or settle the value by hand in the source"
        };
        return format!(
            "The source row is as the journal expected, but the target's value cannot be written back to the source: {fix}, {again}"
        );
    }
    match (&c.expected, &c.found) {
        (Some(e), Some(f)) if e == f => format!(
            "The source row is as the journal expected, but the write cannot be made: {}; settle it by hand in the source, {again}",
            c.reason
        ),
        (None, Some(_)) => format!(
            "The journal says this key was inserted on the target after the cutover, but the source already has a row under it: it was written in the source after the cutover. Decide which version is right, fix the source row by hand, {again}"
        ),
        (Some(_), None) => format!(
            "The source no longer has the row the journal changed: it was deleted in the source after the cutover. Decide whether it should exist, restore or leave it by hand, {again}"
        ),
        (Some(_), Some(_)) => format!(
            "The source row differs from the one the journal expected: it was changed in the source after the cutover. Decide which version is right, fix the source row by hand, {again}"
        ),
        (None, None) => format!("{}; settle it by hand in the source, {again}", c.reason),
    }
}

/// Every row of the source that breaks a foreign key of a spec table or a
/// foreign key referring to one (from any table of the source, in the
/// spec or not), described with table, key and the parent table it misses.
/// Empty (and free) when no such foreign key exists.
fn foreign_key_violations(spec: &Spec, source: &Db) -> Result<Vec<String>> {
    let mut tables: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |name: &str, key: Vec<String>| {
        if !tables.iter().any(|(t, _)| t == name) {
            tables.push((name.to_string(), key));
        }
    };
    for t in &spec.tables {
        if !source.foreign_keys(&t.source_table)?.is_empty() {
            add(
                &t.source_table,
                t.source_names()[..t.key_len]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            );
        }
        for child in source.referencing_tables(&t.source_table)? {
            match spec.tables.iter().find(|s| s.source_table == child) {
                Some(s) => add(
                    &child,
                    s.source_names()[..s.key_len]
                        .iter()
                        .map(|s| s.to_string())
                        .collect(),
                ),
                None => {
                    // A table outside the spec: its own primary key names it.
                    let mut pk: Vec<_> = source
                        .table_columns(&child)?
                        .into_iter()
                        .filter(|c| c.pk > 0)
                        .collect();
                    pk.sort_by_key(|c| c.pk);
                    add(&child, pk.into_iter().map(|c| c.name).collect());
                }
            }
        }
    }
    let mut out = Vec::new();
    for (table, key) in &tables {
        let key_names: Vec<&str> = key.iter().map(String::as_str).collect();
        for (child, key, parent) in source.foreign_key_violations(table, &key_names)? {
            let key = key.map_or("(a row without a key to name it by)".to_string(), |k| {
                crate::value::display_key(&k)
            });
            let v =
                format!("table '{child}', key {key}: its parent in table '{parent}' is missing");
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

/// The pending entries that would set off a foreign-key action the role
/// cannot switch off (a delete, or a change of the referenced columns, of a
/// row other rows refer to), each a conflict naming the rows it would
/// change. Read before anything is written.
fn refused_by_actions(
    spec: &Spec,
    source: &Db,
    target: &Db,
    policy: &Policy,
    after: i64,
    boundary: i64,
) -> Result<Vec<Conflict>> {
    let reader = crate::journal::Reader::new(spec, target)?;
    let mut out = Vec::new();
    let mut from = after;
    let whole = |_: i64, _: usize, _: bool| false;
    let shape = crate::db::RunShape {
        limit: 1000,
        bytes: crate::journal::RUN_BYTES,
        digest: &whole,
    };
    loop {
        let (page, _) = target.journal_run(from, boundary, &shape)?;
        let Some(last) = page.last() else { break };
        from = last.seq;
        for e in page {
            let e = reader.entry(spec, target, e)?;
            let t = &spec.tables[e.table];
            let Some(before) = &e.before else { continue };
            for d in policy
                .live_actions()
                .filter(|d| d.effect.table == t.source_table)
            {
                let Some(a) = &d.effect.action else { continue };
                let idx: Option<Vec<usize>> = a
                    .parent_columns
                    .iter()
                    .map(|p| t.columns.iter().position(|c| c.source == *p))
                    .collect();
                let Some(idx) = idx else { continue };
                let Ok(src) = crate::apply::source_form(t, before, &e.unrecorded) else {
                    continue;
                };
                let sets_off = match &e.after {
                    None => a.on_delete,
                    Some(after) => a.on_update && idx.iter().any(|&i| after[i] != before[i]),
                };
                if !sets_off {
                    continue;
                }
                let values: Vec<crate::value::Value> =
                    idx.iter().map(|&i| src[i].clone()).collect();
                let rows = source.referencing_rows(&d.effect, &values, 5)?;
                if rows.is_empty() {
                    continue;
                }
                out.push(Conflict {
                    tag: e.seq,
                    table: t.name.clone(),
                    key: crate::value::key_json(&before[..t.key_len]),
                    column: None,
                    reason: format!(
                        "its {} would set off foreign-key action '{}' ({}) of the source, changing rows the journal does not name: {}{}; {}",
                        if e.after.is_none() { "delete" } else { "change of key" },
                        d.effect.name,
                        d.effect.when,
                        rows.join(", "),
                        if rows.len() == 5 { ", …" } else { "" },
                        d.cannot.as_deref().unwrap_or_default()
                    ),
                    expected: Some(crate::apply::row_json_of(t, before, &e.unrecorded)),
                    found: None,
                    wanted: e
                        .after
                        .as_ref()
                        .map(|a| crate::apply::row_json_of(t, a, &e.unrecorded)),
                });
            }
        }
    }
    Ok(out)
}

/// The keys whose value of a column added to the target after `journal
/// install` the journal never saw: entries recorded before the column was
/// journaled carry none (replay left the source's value, or the column's
/// default in a row it inserted), and the reconciliation found the source
/// differing there. One line per column.
fn unjournaled(spec: &Spec, target: &Db, rec: &reconcile::Reconciliation) -> Result<Vec<String>> {
    let reader = crate::journal::Reader::new(spec, target)?;
    let mut out = Vec::new();
    for (ti, col) in reader.unjournaled() {
        let t = &spec.tables[*ti];
        let keys: Vec<String> = rec
            .diffs
            .iter()
            .filter(|d| d.table == t.name && d.column.as_deref() == Some(col.as_str()))
            .map(|d| d.key.to_string())
            .collect();
        if keys.is_empty() {
            continue;
        }
        out.push(format!(
            "column '{col}' of table '{}' was added after `journal install`: its values written before the journal was installed again are not journaled, keys {}{} (the entries recorded before carry no value for it: replay left the source's own value there, or the column's default in a row it inserted). Copy them into the source by hand, then run `cutover replay` again",
            t.target_table,
            keys.join(", "),
            if rec.diffs_found as usize > rec.diffs.len() {
                " (and perhaps more, past the differences listed)"
            } else {
                ""
            }
        ));
    }
    Ok(out)
}

/// What the closing reconciliation's differences can be traced to: for each
/// differing column, the source's triggers and rules that fired on replay's
/// writes and set it. Only what cutover can see is named.
fn causes(spec: &Spec, policy: &Policy, rec: &reconcile::Reconciliation) -> Vec<String> {
    let mut out = Vec::new();
    for d in &rec.diffs {
        let Some(t) = spec.table(&d.table) else {
            continue;
        };
        let Some(col) = &d.column else { continue };
        let Some(c) = t.columns.iter().find(|c| c.target == *col) else {
            continue;
        };
        for w in policy.writers_of(&t.source_table, &c.source) {
            let line = format!(
                "column '{}' of '{}' is set by source {} '{}' ({}), which fired on replay's writes",
                c.source, t.source_table, w.effect.kind, w.effect.name, w.effect.when
            );
            if !out.contains(&line) {
                out.push(line);
            }
        }
    }
    out
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

/// A row of a report, given in target form, as the source would hold it:
/// what an operator types to fix a source row by hand.
fn source_form(spec: &Spec, table: &str, row: &serde_json::Value) -> String {
    let Some(t) = spec.table(table) else {
        return String::new();
    };
    let Ok(values) = row_from_json(t, row) else {
        return String::new();
    };
    let mut out = serde_json::Map::new();
    // A target-only column has no source column to show.
    for (c, v) in t
        .columns
        .iter()
        .zip(&values)
        .filter(|(c, _)| !c.source.is_empty())
    {
        match c.transform.reverse(v) {
            Ok(s) => {
                out.insert(c.source.clone(), s.to_json());
            }
            Err(r) => return format!("(cannot be carried back: {r})"),
        }
    }
    serde_json::Value::Object(out).to_string()
}

/// A conflict as a report shows it: where, why, and the three versions of
/// the row in target and source form.
fn conflict_text(spec: &Spec, c: &Conflict) -> String {
    let mut text = format!(
        "\nCONFLICT at seq {} in table '{}', key {}{}: {}\n",
        c.tag,
        c.table,
        c.key,
        c.column
            .as_ref()
            .map(|col| format!(", column '{col}'"))
            .unwrap_or_default(),
        c.reason
    );
    let show = |label: &str, v: &Option<serde_json::Value>| match v {
        Some(j) => vec![
            label.to_string(),
            j.to_string(),
            source_form(spec, &c.table, j),
        ],
        None => vec![label.to_string(), "(no row)".into(), "(no row)".into()],
    };
    text.push_str(&report::table(
        &["version", "row (target form)", "row (source form)"],
        [
            show("expected (journal before-image)", &c.expected),
            show("found in source now", &c.found),
            show("journal after-image", &c.wanted),
        ],
    ));
    text
}

fn render_replay(spec: &Spec, rep: &ReplayReport) -> String {
    let holds = rep.verdict.holds();
    let mut text = report::pairs(&[
        ("journal_boundary", rep.boundary.to_string()),
        ("entries", rep.entries.to_string()),
        ("previously_applied", rep.previously_applied.to_string()),
        ("applied", rep.applied.to_string()),
        ("already_in_place", rep.already_in_place.to_string()),
        ("gaps", rep.gaps.to_string()),
    ]);
    if let Some(c) = &rep.conflict {
        text.push_str(&conflict_text(spec, c));
        text.push_str(&format!(
            "\nthe batch was rolled back; entries before it stay applied. {}\n",
            cause(c)
        ));
    }
    for c in &rep.refused {
        text.push_str(&conflict_text(spec, c));
    }
    if !rep.refused.is_empty() {
        text.push_str(&format!(
            "\nreplay: REFUSED before writing anything: {} entr{} would set off a foreign-key action of the source that its role cannot switch off. Run replay as a superuser or a role granted SET on session_replication_role, or settle the referring rows in the source by hand, then run `cutover replay` again\n",
            rep.refused.len(),
            if rep.refused.len() == 1 { "y" } else { "ies" }
        ));
    }
    if let Some(b) = &rep.breach {
        text.push_str(&format!(
            "\n{b}\nreplay stopped; batches already committed stay applied\n"
        ));
    }
    if !rep.foreign_keys.is_empty() {
        text.push_str(&format!(
            "\nFOREIGN KEYS: the replay left {} source rows whose parent row is missing (cutover never lets a cascade or SET NULL change rows the journal does not name, so the source's foreign keys are checked instead):\n",
            rep.foreign_keys.len()
        ));
        for v in &rep.foreign_keys {
            text.push_str(&format!("  {v}\n"));
        }
        text.push_str("every journal entry is applied; restore the missing parents (or settle the children) by hand in the source, then run `cutover gate` again\n");
    }
    if let Some(rec) = &rep.reconciliation {
        text.push_str("\nrollback reconciliation (source against target)\n");
        text.push_str(&report::reconciliation(rec));
        text.push('\n');
        if let Some(s) = &rep.summary {
            text.push_str(&format!("{s}\n"));
        }
        for c in &rep.causes {
            text.push_str(&format!("cause: {c}\n"));
        }
        for u in &rep.unjournaled {
            text.push_str(&format!("not journaled: {u}\n"));
        }
        text.push_str(&if holds {
            "replay: done; the source holds exactly the target's data. Switch the application back to the source and keep the fence on\n".to_string()
        } else if !rep.unjournaled.is_empty() {
            "replay: FAIL; every entry is applied, but the source does not reconcile with the target: values the journal never saw (above). Copy them into the source, then run `cutover replay` again; do not switch back yet\n".to_string()
        } else if !rep.causes.is_empty() {
            "replay: FAIL; the source does not reconcile with the target after the replay: the causes above changed what replay wrote. Give them a replay_policy in the spec (suppress), correct the rows by hand, then run `cutover replay` again; do not switch back yet\n".to_string()
        } else if rec.clean() {
            "replay: FAIL; see above; do not switch back yet\n".to_string()
        } else {
            "replay: FAIL; the source does not reconcile with the target after the replay, and no trigger or rule of the source that fired sets a differing column: the journal did not see a write (one made with the journal's triggers off, or before `journal install`), or the source was written during the replay. Find the rows above in both databases; do not switch back yet\n".to_string()
        });
    }
    text
}

/// What the replay would apply: entries per op and the stale keys.
fn plan(
    spec: &Spec,
    target: &Db,
    boundary: i64,
    applied: i64,
    last_applied: i64,
    gaps: i64,
    max_keys: usize,
) -> Result<Plan> {
    let counts = target.journal_pending_counts(last_applied, boundary)?;
    let get = |op: &str| counts.iter().find(|(o, _)| o == op).map_or(0, |c| c.1);
    let mut keys = Vec::new();
    let mut stale = 0u64;
    // Every key the pending entries touch, with its ops in order, first
    // touched first. Held in memory: it grows with the keys the application
    // wrote after the cutover, not with the table.
    let reader = crate::journal::Reader::new(spec, target)?;
    let mut order: Vec<(String, serde_json::Value)> = Vec::new();
    let mut ops: std::collections::HashMap<(String, String), Vec<String>> = Default::default();
    let mut after = last_applied;
    // Only the keys are read from the entries: every other large value is
    // taken as its digest.
    let keys_only = |img: i64, col: usize, _: bool| reader.outside_key(img, col);
    let shape = crate::db::RunShape {
        limit: 1000,
        bytes: usize::MAX,
        digest: &keys_only,
    };
    loop {
        let (page, _) = target.journal_run(after, boundary, &shape)?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        for e in page {
            let e = reader.entry(spec, target, e)?;
            let t = &spec.tables[e.table];
            let mut keys = Vec::new();
            for r in [&e.before, &e.after].into_iter().flatten() {
                let k = crate::value::key_json(&r[..t.key_len]);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            for k in keys {
                let id = (t.name.clone(), k.to_string());
                let list = ops.entry(id).or_insert_with(|| {
                    order.push((t.name.clone(), k.clone()));
                    Vec::new()
                });
                list.push(e.op.clone());
            }
        }
    }
    for (tbl, key) in order {
        let list = ops[&(tbl.clone(), key.to_string())].join(",");
        stale += 1;
        if keys.len() < max_keys {
            let first = list.split(',').next().unwrap_or("");
            let last = list.rsplit(',').next().unwrap_or("");
            let effect = match (first, last) {
                ("insert", "delete") => Effect::InsertedAndDeleted,
                ("insert", _) => Effect::New,
                (_, "delete") => Effect::Deleted,
                _ => Effect::Updated,
            };
            keys.push(StaleKey {
                table: tbl,
                key,
                ops: list,
                effect,
            });
        }
    }
    Ok(Plan {
        boundary,
        already_applied: applied,
        pending: get("insert") + get("update") + get("delete"),
        gaps,
        insert: get("insert"),
        update: get("update"),
        delete: get("delete"),
        stale_keys: stale,
        keys,
    })
}

/// The plan as text: the figures, then the stale keys.
fn render_plan(p: &Plan) -> String {
    let mut text = report::pairs(&[
        ("journal_boundary", p.boundary.to_string()),
        ("already_applied", p.already_applied.to_string()),
        (
            "to_apply",
            format!(
                "{} (insert {}, update {}, delete {})",
                p.pending, p.insert, p.update, p.delete
            ),
        ),
        ("gaps", p.gaps.to_string()),
        ("stale_keys", p.stale_keys.to_string()),
    ]);
    if !p.keys.is_empty() {
        text.push_str(&format!(
            "\nthe source is stale at these keys (first {} of {}):\n",
            p.keys.len(),
            p.stale_keys
        ));
        text.push_str(&report::table(
            &["table", "key", "effect", "journal ops"],
            p.keys.iter().map(|k| {
                vec![
                    k.table.clone(),
                    k.key.to_string(),
                    report::name(&k.effect),
                    k.ops.clone(),
                ]
            }),
        ));
        text.push('\n');
    }
    text
}
