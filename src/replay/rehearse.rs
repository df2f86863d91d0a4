//! `replay --rehearse`: before any fence, the whole journal as it stands
//! when the rehearsal starts (its last entry then is the boundary) replayed
//! into the source through the dry run's engine — the batches savepoints
//! of one transaction rolled back at the end, the sequences put back — with
//! the target left open to the application. It proves every write applies
//! under the source's constraints and the replay's trigger and rule policy,
//! and measures how long it takes; the pace is kept beside the spec for
//! `watch` and `status` (the [`Rate`] the run returns). It is not a replay:
//! the rollback itself still runs only on a fenced target.

use anyhow::{Result, bail};

use crate::db::JournalLogExt;
use serde::Serialize;

use super::report::Replay;
use super::steps::Start;
use crate::db::Db;
use crate::db::watch_state::Rate;
use crate::reconcile::Reconciliation;
use crate::report::Verdict;
use crate::spec::Spec;

/// What the rehearsal measured.
#[derive(Debug, Serialize)]
pub struct Rehearsal {
    /// The journal's last seq when the rehearsal began.
    pub boundary: i64,
    pub entries: i64,
    /// Seconds applying the entries.
    pub apply_seconds: f64,
    /// Seconds of the closing reconcile, and the rows it read (both sides).
    pub reconcile_seconds: f64,
    pub rows_reconciled: i64,
    /// Entries the application journaled during the rehearsal, past its
    /// boundary: the reconciliation's differences are theirs, and are not
    /// counted against it.
    pub written_since: i64,
    /// How nothing stays written.
    pub rolled_back: String,
}

/// The boundary of a rehearsal: the journal's last seq now. A fenced
/// target is refused: its rollback's dry run is `replay --dry-run`.
pub(super) fn boundary(spec: &Spec, source: &Db, target: &Db) -> Result<i64> {
    if crate::fence::read(target.fence_records())?.is_some() {
        bail!(
            "target {} is fenced: rehearse before the fence; on a fenced target run cutover replay --dry-run --spec {}",
            target.location(),
            spec.path.display()
        );
    }
    spec.check_schema(source, target)?;
    Ok(target.journal().journal_extent()?.last)
}

/// The clock of a replay: applying its entries, then its reconcile.
pub(super) struct Timing {
    started: std::time::Instant,
    apply: f64,
    reconcile: f64,
    rows: i64,
}

impl Timing {
    pub(super) fn start() -> Timing {
        Timing {
            started: std::time::Instant::now(),
            apply: 0.0,
            reconcile: 0.0,
            rows: 0,
        }
    }

    /// The clock starts again: the entries are about to be applied.
    pub(super) fn restart(&mut self) {
        self.started = std::time::Instant::now();
    }

    /// The entries are applied: the clock now times the closing checks.
    pub(super) fn applied(&mut self) {
        self.apply = self.started.elapsed().as_secs_f64();
        self.started = std::time::Instant::now();
    }

    /// The closing checks are done, having read `rec`'s rows.
    pub(super) fn closed(&mut self, rec: Option<&Reconciliation>) {
        self.reconcile = self.started.elapsed().as_secs_f64();
        self.rows = rec.map_or(0, |r| {
            r.tables
                .iter()
                .map(|t| t.source_rows + t.target_rows)
                .sum::<u64>() as i64
        });
    }

    /// The pace measured (`kind`: `replay` or `rehearsal`), for `watch`
    /// and `status` to keep beside the spec; `None` when the run applied
    /// nothing, which measures no pace (and a replay run again leaves the
    /// folder as it was).
    pub(super) fn pace(&self, kind: &str, entries: i64) -> Option<Rate> {
        (entries > 0).then(|| Rate {
            at: crate::report::timestamp(std::time::SystemTime::now()),
            kind: kind.to_string(),
            entries,
            seconds: self.apply,
            rows: self.rows,
            reconcile_seconds: self.reconcile,
        })
    }
}

/// The dry run's report as the rehearsal's: what it measured, and its
/// verdict with the differences of entries written since left out.
pub(super) fn finish(
    source: &Db,
    target: &Db,
    report: Replay,
    at: &Start,
    timing: &Timing,
) -> Result<(Replay, Option<Rate>)> {
    let Replay::DryRun(mut dry) = report else {
        return Ok((report, None));
    };
    let last = target.journal().journal_extent()?.last;
    let written_since = target.journal().count_between(at.boundary, last)?;
    if let Some(tried) = dry.tried.as_mut() {
        let rec_holds =
            tried.reconciliation.as_ref().is_none_or(|r| r.clean()) || written_since > 0;
        tried.verdict = Verdict::of(
            tried.conflicts.is_empty()
                && tried.foreign_keys.is_empty()
                && tried.breach.is_none()
                && rec_holds,
        );
    }
    let entries = at.entries - at.applied_rows;
    dry.rehearsal = Some(Rehearsal {
        boundary: at.boundary,
        entries,
        apply_seconds: timing.apply,
        reconcile_seconds: timing.reconcile,
        rows_reconciled: timing.rows,
        written_since,
        rolled_back: format!(
            "one transaction on {} ({}), rolled back; its id sequences put back",
            dry.source,
            source.engine().name
        ),
    });
    // A rehearsal that met a conflict did not replay the whole journal:
    // its pace is not the replay's.
    let pace = match dry.tried.as_ref().is_some_and(|t| t.conflicts.is_empty()) {
        true => timing.pace("rehearsal", entries),
        false => None,
    };
    Ok((Replay::DryRun(dry), pace))
}
