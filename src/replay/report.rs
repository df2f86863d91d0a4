//! What a replay reports: the report of a replay that ran, and a dry run's
//! plan with what its rolled-back replay met.

use anyhow::Result;
use serde::Serialize;

use crate::apply::Conflict;
use crate::journal::Drift;
use crate::reconcile;
use crate::replay::Plan;
use crate::report::{Report, Verdict};

/// What the replay did.
#[derive(Debug, Serialize)]
pub struct ReplayReport {
    pub verdict: Verdict,
    pub boundary: i64,
    pub entries: i64,
    pub previously_applied: i64,
    /// Entries this run committed (none when it was rolled back).
    pub applied: u64,
    pub already_in_place: u64,
    pub batches: u64,
    /// Entries the run had applied inside its transaction before it was
    /// rolled back whole, the replay not reconciling: none of them stays.
    #[serde(skip_serializing_if = "is_zero")]
    pub rolled_back: u64,
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
    /// `--accept-findings`: the closing differences and rows left without
    /// their parent the replay went past, as the verdict records them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accepted: Vec<String>,
    /// How the target drifted from what the journal expects, found when
    /// the source would not reconcile: the differences' likely cause.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
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
    pub rehearsal: Option<super::rehearse::Rehearsal>,
    /// The source's path, for the text.
    #[serde(skip)]
    pub source: String,
}

/// What the rolled-back replay of a dry run met.
#[derive(Debug, Serialize)]
pub struct DryRunTried {
    /// `pass` when the replay would apply every entry and reconcile.
    pub verdict: Verdict,
    /// The entries the rolled-back replay wrote, as a replay's `applied`
    /// counts them (before it stopped, where it stopped).
    pub applied: u64,
    pub conflicts: Vec<Conflict>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breach: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub foreign_keys: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciliation: Option<reconcile::Reconciliation>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
}

pub(crate) fn breached(breach: String, boundary: i64, entries: i64) -> Result<Replay> {
    Ok(Replay::Ran(Box::new(ReplayReport {
        verdict: Verdict::Fail,
        boundary,
        entries,
        previously_applied: 0,
        applied: 0,
        already_in_place: 0,
        batches: 0,
        rolled_back: 0,
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
        accepted: Vec::new(),
        drift: Vec::new(),
    })))
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
