//! One pass of `cutover watch`: the journal entries written since the last
//! pass read in short pages (each its own read, no lock, no long snapshot
//! on the target), each checked as replay would check it on the source
//! after the entries before it ([`super::checks`]), the open findings
//! checked again, and the state file written in one transaction. A new
//! journal identity or a changed spec starts the record over.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use super::checks::{Checker, Unjudged};
use super::estimate::{Estimate, estimate};
use super::state::{self, Finding, Kind, Record};
use crate::db::watch_state::WatchState;
use crate::db::{Access, Db, JournalLogExt};
use crate::journal::{Reader, Reading, next_run};
use crate::spec::Spec;

/// Entries read per page of the journal.
const PAGE: usize = 1000;

/// What one pass found.
#[derive(Debug, Serialize)]
pub struct Pass {
    pub journal: String,
    /// The state file.
    pub state: String,
    /// Entries of this journal so far.
    pub entries: i64,
    /// Entries checked, this pass and those before.
    pub checked: i64,
    /// Entries journaled after this pass read the journal's end.
    pub unchecked: i64,
    /// Entries read by this pass.
    pub read: i64,
    /// Open findings of earlier passes checked again.
    pub rechecked: usize,
    /// Why every entry was checked again from the journal's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_over: Option<String>,
    /// The last seq checked.
    pub position: i64,
    /// Entries that cannot go back (distinct seqs among the findings).
    pub irreversible: i64,
    pub findings: Vec<Finding>,
    pub fenced: bool,
    pub at: String,
    /// When the pass ran, in seconds since the epoch.
    pub at_epoch: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_since_previous: Option<f64>,
    /// How long this pass took.
    pub seconds: f64,
    pub estimate: Estimate,
    /// What watch cannot judge without writing: the source's triggers and
    /// rules left to fire on replay's writes, and its CHECK constraints.
    pub unjudged: Vec<Unjudged>,
    /// The last `replay --rehearse`, which judges them by writing; `None`
    /// before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rehearsed: Option<Rehearsed>,
    /// The hazards the spec accepts (`source_limit = "watch"`), each with
    /// the writes so far that cross it.
    pub watched: Vec<Watched>,
}

/// A source column whose hazards the spec accepts, and the journaled
/// writes that crossed its limit: each cannot go back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Watched {
    pub table: String,
    pub column: String,
    /// The hazards' kinds, as `check` names them.
    pub kinds: Vec<crate::hazards::HazardKind>,
    /// Entries among the open findings whose value this column cannot
    /// hold.
    pub crossed: i64,
}

/// The last `replay --rehearse` of this pair of databases.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Rehearsed {
    pub at: String,
    pub verdict: String,
    /// The journal's last seq it replayed.
    pub boundary: i64,
    /// Entries journaled since, which no rehearsal has judged.
    pub entries_since: i64,
}

/// The spec's bytes, hashed: a changed spec checks everything again.
fn spec_digest(spec: &Spec) -> Result<String> {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read(&spec.path)
        .with_context(|| format!("reading spec {}", spec.path.display()))?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Runs one pass over the journal of `spec`'s target.
pub fn pass(spec: &Spec) -> Result<Pass> {
    let started = std::time::Instant::now();
    let (source, target, _) = crate::schema::open(spec, Access::Read, Access::Read)?;
    let journal = target.identity().id()?.map(|j| j.as_str().to_string()).with_context(|| {
        format!(
            "target {} has no journal; watch checks the way back from `cutover journal install --spec {}` on",
            target.location(),
            spec.path.display()
        )
    })?;
    let applied = source.applied_set().progress(journal.as_str())?.entries;
    if applied > 0 {
        bail!(
            "source {} records {applied} entries of {journal} as replayed: the rollback has begun, and watch checks the way back only before it; run cutover replay --dry-run --spec {}",
            source.location(),
            spec.path.display()
        );
    }
    let digest = spec_digest(spec)?;
    let file = state::open(spec)?;
    file.begin()?;
    match run(spec, &source, &target, &file, &journal, &digest, started) {
        Ok(p) => {
            file.commit()?;
            Ok(p)
        }
        Err(e) => {
            file.rollback();
            Err(e)
        }
    }
}

/// Where the record stands: started over (and why) when it belongs to
/// another journal or spec.
fn position(
    file: &WatchState,
    journal: &str,
    digest: &str,
    start: i64,
) -> Result<(i64, Option<String>)> {
    let why = match (file.meta("journal")?, file.meta("spec_digest")?) {
        (None, _) => Some("first pass".to_string()),
        (Some(j), _) if j != journal => {
            Some(format!("a new journal ({journal}; the record was of {j})"))
        }
        (_, Some(d)) if d != digest => Some("the spec changed".to_string()),
        _ => None,
    };
    if why.is_some() {
        file.reset()?;
        file.set_meta("journal", journal)?;
        file.set_meta("spec_digest", digest)?;
        file.set_meta("position", &start.to_string())?;
    }
    let at = file
        .meta("position")?
        .and_then(|p| p.parse().ok())
        .unwrap_or(start);
    Ok((at, why))
}

fn run(
    spec: &Spec,
    source: &Db,
    target: &Db,
    file: &WatchState,
    journal: &str,
    digest: &str,
    started: std::time::Instant,
) -> Result<Pass> {
    let start = target.identity().start()?;
    let (from, started_over) = position(file, journal, digest, start)?;
    let last = target.journal().journal_extent()?.last;
    let boundary = last.max(from);
    let record = Record { file };
    let checker = Checker::new(spec, source)?;
    let reader = Reader::new(spec, target)?;
    let open: Vec<Finding> = file
        .findings()?
        .into_iter()
        .map(Finding::of_stored)
        .collect();
    let rechecked = open.iter().map(|f| f.seq).collect::<BTreeSet<_>>().len();
    let mut fresh = Vec::new();
    let mut net = vec![0i64; spec.tables.len()];
    let mut read = 0i64;
    let mut after = from;
    loop {
        let run = next_run(spec, target, &reader, after, boundary, PAGE, Reading::Whole)?;
        if run.is_empty() {
            break;
        }
        for e in &run {
            fresh.extend(checker.check(&record, e, true)?);
            net[e.table] += match (&e.before, &e.after) {
                (None, Some(_)) => 1,
                (Some(_), None) => -1,
                _ => 0,
            };
            after = after.max(e.seq);
            read += 1;
        }
    }
    // Every finding checked again once the record holds every entry read:
    // the source as it is now, and a row the application set right since
    // (an earlier pass's finding, or one of this pass's) clears.
    let mut findings = recheck(spec, target, &reader, &checker, &record, open, fresh)?;
    findings.extend(actions(spec, source, target, from, boundary)?);
    findings.sort_by_key(|f| (f.seq, f.kind as u8));
    findings.dedup();
    let stored: Vec<_> = findings.iter().map(Finding::stored).collect();
    file.set_findings(&stored)?;
    file.set_meta("position", &boundary.to_string())?;
    let target_rows = sizes(spec, target, file, &net)?;
    let now = std::time::SystemTime::now();
    let at_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let previous: Option<f64> = file.meta("last_pass_epoch")?.and_then(|p| p.parse().ok());
    file.set_meta("last_pass_epoch", &at_epoch.to_string())?;
    let at = crate::report::timestamp(now);
    file.set_meta("last_pass_at", &at)?;
    let now_last = target.journal().journal_extent()?.last;
    let entries = target.journal().count_between(start, now_last)?;
    let checked = target.journal().count_between(start, boundary)?;
    file.set_meta("checked", &checked.to_string())?;
    let irreversible = findings
        .iter()
        .map(|f| f.seq)
        .collect::<BTreeSet<_>>()
        .len() as i64;
    file.set_meta("irreversible", &irreversible.to_string())?;
    let rate = file.latest_rate()?;
    let watched = watched(spec, source, target, &findings)?;
    Ok(Pass {
        journal: journal.to_string(),
        state: file.path().to_string(),
        entries,
        checked,
        unchecked: entries - checked,
        read,
        rechecked,
        started_over,
        position: boundary,
        irreversible,
        findings,
        fenced: crate::fence::read(target.fence_records())?.is_some(),
        at,
        at_epoch,
        seconds_since_previous: previous.map(|p| (at_epoch - p).max(0.0)),
        seconds: started.elapsed().as_secs_f64(),
        estimate: estimate(rate.as_ref(), entries, target_rows),
        unjudged: checker.unjudged()?,
        rehearsed: rehearsed(file, target, now_last)?,
        watched,
    })
}

/// The accepted hazards, by source column, with the open findings that
/// cross each.
fn watched(spec: &Spec, source: &Db, target: &Db, findings: &[Finding]) -> Result<Vec<Watched>> {
    let mut out: Vec<Watched> = Vec::new();
    for h in crate::hazards::of(spec, source, target)?
        .into_iter()
        .filter(|h| h.accepted)
    {
        let kind = h.kind;
        if let Some(w) = out
            .iter_mut()
            .find(|w| w.table == h.table && w.column == h.column)
        {
            w.kinds.push(kind);
            continue;
        }
        let crossed = findings
            .iter()
            .filter(|f| {
                f.kind == Kind::SourceColumn
                    && f.table == h.table
                    && f.column.as_deref() == Some(h.column.as_str())
            })
            .map(|f| f.seq)
            .collect::<BTreeSet<_>>()
            .len() as i64;
        out.push(Watched {
            table: h.table,
            column: h.column,
            kinds: vec![kind],
            crossed,
        });
    }
    Ok(out)
}

/// The last rehearsal, as `replay --rehearse` recorded it in the file
/// ([`crate::watch::record_rehearsal`]).
fn rehearsed(file: &WatchState, target: &Db, last: i64) -> Result<Option<Rehearsed>> {
    let (Some(at), Some(verdict), Some(boundary)) = (
        file.meta("rehearsed_at")?,
        file.meta("rehearsed_verdict")?,
        file.meta("rehearsed_boundary")?
            .and_then(|b| b.parse().ok()),
    ) else {
        return Ok(None);
    };
    Ok(Some(Rehearsed {
        at,
        verdict,
        boundary,
        entries_since: target
            .journal()
            .count_between(boundary, last.max(boundary))?,
    }))
}

/// The open findings of earlier passes and those of this pass's entries,
/// each entry checked again against the source as it is now and the
/// record as this pass leaves it; a finding of the journal itself (its
/// images do not follow on) stays as it was.
fn recheck(
    spec: &Spec,
    target: &Db,
    reader: &Reader,
    checker: &Checker<'_>,
    record: &Record<'_>,
    mut open: Vec<Finding>,
    fresh: Vec<Finding>,
) -> Result<Vec<Finding>> {
    // Of this pass's findings, only an entry whose row cannot go back can
    // clear before the pass ends (a later entry set the row right): the
    // others stand as found.
    let settle: BTreeSet<i64> = fresh
        .iter()
        .filter(|f| matches!(f.kind, Kind::Transform | Kind::SourceColumn))
        .map(|f| f.seq)
        .collect();
    let (again, stand): (Vec<Finding>, Vec<Finding>) =
        fresh.into_iter().partition(|f| settle.contains(&f.seq));
    open.extend(again);
    let mut out: Vec<Finding> = stand;
    out.extend(open.iter().filter(|f| f.kind == Kind::Chain).cloned());
    let seqs: BTreeSet<i64> = open.iter().map(|f| f.seq).collect();
    for seq in seqs {
        let Some(e) = next_run(spec, target, reader, seq - 1, seq, 1, Reading::Whole)?
            .into_iter()
            .find(|e| e.seq == seq)
        else {
            continue;
        };
        out.extend(checker.check(record, &e, false)?);
        if open.iter().any(|f| f.seq == seq && f.kind == Kind::Action) {
            out.extend(actions(
                spec,
                checker_source(checker),
                target,
                seq - 1,
                seq,
            )?);
        }
    }
    Ok(out)
}

fn checker_source<'a>(c: &Checker<'a>) -> &'a Db {
    c.source()
}

/// The entries in `(after, upto]` that would set off a foreign-key action
/// of the source its role cannot switch off (replay refuses them before
/// writing: [`crate::replay::refused_by_actions`]).
fn actions(spec: &Spec, source: &Db, target: &Db, after: i64, upto: i64) -> Result<Vec<Finding>> {
    if upto <= after {
        return Ok(Vec::new());
    }
    let policy = crate::side_effects::Policy::read(spec, source)?;
    if policy.live_actions().next().is_none() {
        return Ok(Vec::new());
    }
    let refused = crate::replay::refused_by_actions(spec, source, target, &policy, after, upto)?;
    Ok(refused
        .into_iter()
        .map(|c| Finding {
            seq: c.tag,
            kind: Kind::Action,
            table: c.table.clone(),
            key: c.key.clone(),
            column: c.column.clone(),
            value: None,
            reason: c.reason.clone(),
            fix: super::state::Fix::Source(
                "let cutover's role on the source switch the action off, or settle the referencing rows in the source".into(),
            ),
        })
        .collect())
}

/// The target's rows in the spec's tables: counted on the first pass,
/// then followed by the inserts and deletes each pass reads.
fn sizes(spec: &Spec, target: &Db, file: &WatchState, net: &[i64]) -> Result<i64> {
    let known = file.sizes()?;
    let mut total = 0;
    for (i, t) in spec.tables.iter().enumerate() {
        let rows = match known.iter().find(|(n, _)| *n == t.name) {
            Some((_, n)) => (n + net[i]).max(0),
            None => target
                .rows()
                .row_count(&target.target_sql(t), crate::db::Count::Exact)?,
        };
        file.set_size(&t.name, rows)?;
        total += rows;
    }
    Ok(total)
}
