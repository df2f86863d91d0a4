//! `cutover replay`: the rollback, its dry run and its rehearsal
//! ([`crate::replay::Replayer`]), rendered for the operator.

use anyhow::Result;

use crate::spec::Spec;

mod render;

pub use crate::replay::{Mode, Replay, ReplayReport};
pub use render::render;

/// Runs the replay in `mode`, to its report.
/// The pace it measured is kept beside the spec for `watch` and `status`.
pub fn run(spec: &Spec, batch: usize, mode: Mode, max_diffs: usize) -> Result<Replay> {
    let ran = crate::replay::Replayer {
        spec,
        mode,
        batch,
        max_diffs,
    }
    .run()?;
    if let Some(pace) = &ran.pace {
        crate::watch::record_rate(spec, pace)?;
    }
    Ok(ran.report)
}
