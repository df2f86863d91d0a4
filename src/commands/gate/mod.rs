//! `cutover gate`: the acceptance gate. Reconciles source against target and
//! gives the verdict that allows or blocks the cutover.

use anyhow::Result;
use serde::Serialize;

use crate::db::Access;
use crate::digest::{self, Mode};
use crate::reconcile::{self, Reconciliation};
use crate::report::{self, Report, Verdict};
use crate::schema;
use crate::spec::Spec;

mod rehearse;

pub use rehearse::{Injected, RehearsalReport, rehearse, render_rehearsal};

/// The gate's verdict on source against target.
#[derive(Debug, Serialize)]
pub struct GateReport {
    pub verdict: Verdict,
    pub summary: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<crate::provenance::Provenance>,
    #[serde(flatten)]
    pub rec: Reconciliation,
}

impl Report for GateReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// Reconciles source against target (the source read from `snapshot` if
/// given), with the sync provenance of the tables that have a watermark.
pub fn run(
    spec: &Spec,
    max_diffs: usize,
    snapshot: Option<&std::path::Path>,
) -> Result<GateReport> {
    run_in(spec, max_diffs, snapshot, Mode::Stream)
}

/// [`run`], comparing the databases in `mode` (`gate --mode`).
pub fn run_in(
    spec: &Spec,
    max_diffs: usize,
    snapshot: Option<&std::path::Path>,
    mode: Mode,
) -> Result<GateReport> {
    let (mut source, mut target, _) =
        schema::open_with_snapshot(spec, snapshot, Access::Read, Access::Read)?;
    let rec = digest::reconcile(spec, &mut source, &mut target, max_diffs, mode)?;
    // Tables kept up by sync: the quality of the source now, and where every
    // synced row came from.
    let provenance = crate::provenance::provenance(spec, &mut source, &target, max_diffs)?;
    let holds = rec.clean() && provenance.iter().all(|p| p.quality_failures == 0);
    Ok(GateReport {
        verdict: Verdict::of(holds),
        summary: reconcile::summary(spec, &rec),
        provenance,
        rec,
    })
}

/// The gate's report as text: the reconciliation, the provenance of synced
/// tables, the summary line and the verdict.
pub fn render(rep: &GateReport) -> String {
    let mut text = report::reconciliation(&rep.rec);
    text.push_str(&render_modes(&rep.rec));
    for p in &rep.provenance {
        text.push_str(&format!(
            "\nsync provenance of '{}': {} batches\n",
            p.table,
            p.batches.len()
        ));
        text.push_str(&report::table(
            &[
                "batch",
                "rows",
                "changed",
                "first watermark",
                "last watermark",
            ],
            p.batches.iter().map(|b| {
                vec![
                    b.batch.to_string(),
                    b.rows.to_string(),
                    b.changed.to_string(),
                    b.first_watermark.to_string(),
                    b.last_watermark.to_string(),
                ]
            }),
        ));
        text.push('\n');
        if p.quality_failures > 0 {
            text.push_str(&format!(
                "quality checks of '{}' FAILED ({} findings):\n",
                p.table, p.quality_failures
            ));
            for e in &p.examples {
                text.push_str(&format!("  {e}\n"));
            }
        }
    }
    text.push_str(&format!("\n{}\n", rep.summary));
    text.push_str(if rep.holds() {
        "verdict: PASS; source and target hold exactly the same data\n"
    } else {
        "verdict: FAIL; cutover is blocked until source and target reconcile\n"
    });
    text
}

/// How digest mode compared each table (nothing in stream mode).
pub fn render_modes(rec: &Reconciliation) -> String {
    let mut text = String::new();
    for m in &rec.modes {
        match &m.reason {
            None => text.push_str(&format!(
                "\n'{}' compared by digests inside both databases: {} key ranges, {} differed and were streamed ({} rows read)",
                m.table, m.segments, m.segments_streamed, m.rows_streamed
            )),
            Some(why) => text.push_str(&format!(
                "\n'{}' streamed whole ({} rows read): {why}",
                m.table, m.rows_streamed
            )),
        }
    }
    if !text.is_empty() {
        text.push('\n');
    }
    text
}
