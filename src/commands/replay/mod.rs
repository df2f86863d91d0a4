//! `cutover replay`: the rollback, its dry run and its rehearsal
//! ([`crate::replay::Replayer`]), rendered for the operator.

use anyhow::Result;

use crate::spec::Spec;

mod render;

pub use crate::replay::{Mode, Replay, ReplayReport};
pub use render::render;

/// What `cutover replay` is asked.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    pub mode: Mode,
    pub batch: usize,
    pub max_diffs: usize,
    pub accept_findings: bool,
}

impl Options {
    /// The replay itself, as the drill runs it.
    pub fn replay(mode: Mode) -> Options {
        Options {
            mode,
            batch: 1000,
            max_diffs: 20,
            accept_findings: false,
        }
    }
}

/// Runs the replay as `opts` say, to its report. The pace it measured is
/// kept beside the spec for `watch` and `status`.
pub fn run(spec: &Spec, opts: Options) -> Result<Replay> {
    let ran = crate::replay::Replayer {
        spec,
        mode: opts.mode,
        batch: opts.batch,
        max_diffs: opts.max_diffs,
        accept_findings: opts.accept_findings,
    }
    .run()?;
    if let Some(pace) = &ran.pace {
        crate::watch::record_rate(spec, pace)?;
    }
    if let Replay::DryRun(dry) = &ran.report
        && let (Some(r), Some(tried)) = (&dry.rehearsal, &dry.tried)
    {
        crate::watch::record_rehearsal(
            spec,
            &crate::report::timestamp(std::time::SystemTime::now()),
            if tried.verdict.holds() {
                "pass"
            } else {
                "fail"
            },
            r.boundary,
        )?;
    }
    Ok(ran.report)
}
