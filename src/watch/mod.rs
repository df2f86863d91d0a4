//! Rollback readiness, proven continuously from `journal install` on
//! (`cutover watch`, docs/watch.md): each journaled write checked, as
//! replay would check it, against the source after the writes before it
//! ([`checks`]), pass after pass ([`pass`]), over a record kept in a file
//! beside the spec ([`state`]); how long the rollback would take now
//! ([`estimate`]); the figures for the on-call ([`metrics`]).

pub mod checks;
pub mod estimate;
pub mod metrics;
pub mod pass;
pub mod state;

use anyhow::Result;
use serde::Serialize;

pub use estimate::{Estimate, estimate};
pub use pass::{Pass, pass};
pub use state::{Finding, Fix, Kind, state_path};

use crate::db::watch_state::{Rate, WatchState};
use crate::spec::Spec;

/// Records a replay's measured pace in the state file beside the spec:
/// `kind` is `rehearsal` or `replay`.
pub fn record_rate(spec: &Spec, rate: &Rate) -> Result<()> {
    state::open(spec)?.record_rate(rate)
}

/// Records in the state file beside the spec when a `replay --rehearse`
/// ran, its verdict and the journal's last seq it replayed: watch shows it
/// beside what only a write can judge.
pub fn record_rehearsal(spec: &Spec, at: &str, verdict: &str, boundary: i64) -> Result<()> {
    let file = state::open(spec)?;
    file.set_meta("rehearsed_at", at)?;
    file.set_meta("rehearsed_verdict", verdict)?;
    file.set_meta("rehearsed_boundary", &boundary.to_string())
}

/// What the last pass left in the state file, for `status`.
#[derive(Clone, Debug, Serialize)]
pub struct Readiness {
    /// When the last pass ran; `None`: no pass yet.
    pub last_pass_at: Option<String>,
    /// The journal its record belongs to.
    pub journal: Option<String>,
    pub checked: i64,
    pub irreversible: i64,
    /// The open findings, first few.
    pub findings: Vec<Finding>,
    pub estimate: Estimate,
}

/// Readiness as the state file has it, with the estimate for `pending`
/// entries (`None` when the file is not there: no pass and no rehearsal
/// yet). Reads nothing of either database.
pub fn readiness(spec: &Spec, pending: i64, target_rows: i64) -> Result<Option<Readiness>> {
    let path = state_path(spec);
    if !path.exists() {
        return Ok(None);
    }
    let file = WatchState::open(&path)?;
    let num = |name: &str| -> Result<i64> {
        Ok(file.meta(name)?.and_then(|v| v.parse().ok()).unwrap_or(0))
    };
    let findings: Vec<Finding> = file
        .findings()?
        .into_iter()
        .map(Finding::of_stored)
        .collect();
    Ok(Some(Readiness {
        last_pass_at: file.meta("last_pass_at")?,
        journal: file.meta("journal")?,
        checked: num("checked")?,
        irreversible: num("irreversible")?,
        findings,
        estimate: estimate(file.latest_rate()?.as_ref(), pending, target_rows),
    }))
}
