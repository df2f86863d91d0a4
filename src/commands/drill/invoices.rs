//! The invoices drill: a change feed delivered in stages, each through the
//! real `cutover apply` in a child process, that exercises every rule of the
//! apply contract: retries, duplicates, newer and older revisions, a
//! tombstone and an attempted resurrection, a conflict that rolls back a
//! whole delivery, crashes at each point, and a second currency whose total
//! stays separate. After each stage it reads the totals per currency and the
//! feed's checkpoint back from the target.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;

use super::{DrillVerdict, Recorder, Transcript, child};
use crate::commands::apply::ApplyReport;
use crate::db::{Access, Db};
use crate::reconcile;
use crate::report::{self, BatchStatus};
use crate::spec;
use crate::spec::Side;

const SPEC: &str = include_str!("../../../fixtures/invoices/spec.toml");
const SOURCE: &str = include_str!("../../../fixtures/invoices/source.sql");
const TARGET: &str = include_str!("../../../fixtures/invoices/target.sql");
const FEEDS: [(&str, &str); 7] = [
    (
        "d1.jsonl",
        include_str!("../../../fixtures/invoices/d1.jsonl"),
    ),
    (
        "d2.jsonl",
        include_str!("../../../fixtures/invoices/d2.jsonl"),
    ),
    (
        "d3.jsonl",
        include_str!("../../../fixtures/invoices/d3.jsonl"),
    ),
    (
        "d4.jsonl",
        include_str!("../../../fixtures/invoices/d4.jsonl"),
    ),
    (
        "d5.jsonl",
        include_str!("../../../fixtures/invoices/d5.jsonl"),
    ),
    (
        "d6.jsonl",
        include_str!("../../../fixtures/invoices/d6.jsonl"),
    ),
    (
        "d7.jsonl",
        include_str!("../../../fixtures/invoices/d7.jsonl"),
    ),
];

/// One stage: what is sent, with which crash point, and what must happen
/// (the status of the first delivery; none when the process is killed).
struct Stage {
    name: &'static str,
    feed: &'static str,
    fault: Option<&'static str>,
    exit: i32,
    status: Option<BatchStatus>,
}

/// One stage, as the transcript records it.
#[derive(Debug, Serialize)]
pub struct StageRecord {
    pub stage: &'static str,
    pub feed: &'static str,
    pub fault: Option<&'static str>,
    pub exit: i32,
    pub deliveries: Vec<Delivery>,
    pub totals: BTreeMap<String, i64>,
    pub checkpoint: i64,
}

/// A delivery of a stage and what became of it.
#[derive(Debug, Serialize)]
pub struct Delivery {
    pub delivery: String,
    pub status: BatchStatus,
    pub applied: u64,
    pub duplicate: u64,
    pub stale: u64,
}

const STAGES: [Stage; 11] = [
    Stage {
        name: "initial records",
        feed: "d1.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Applied),
    },
    Stage {
        name: "delivery retried",
        feed: "d1.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Replayed),
    },
    Stage {
        name: "duplicate record",
        feed: "d2.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Applied),
    },
    Stage {
        name: "newer update, then tombstone",
        feed: "d3.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Applied),
    },
    Stage {
        name: "late, older, stale resurrection",
        feed: "d4.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Applied),
    },
    Stage {
        name: "conflict after a valid row",
        feed: "d5.jsonl",
        fault: None,
        exit: 1,
        status: Some(BatchStatus::Rejected),
    },
    Stage {
        name: "crash mid-delivery",
        feed: "d6.jsonl",
        fault: Some("mid-batch"),
        exit: 73,
        status: None,
    },
    Stage {
        name: "crash after the checkpoint row",
        feed: "d6.jsonl",
        fault: Some("before-commit"),
        exit: 73,
        status: None,
    },
    Stage {
        name: "crash after commit",
        feed: "d6.jsonl",
        fault: Some("after-commit"),
        exit: 73,
        status: None,
    },
    Stage {
        name: "retry after the crash",
        feed: "d6.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Replayed),
    },
    Stage {
        name: "second currency, other scope",
        feed: "d7.jsonl",
        fault: None,
        exit: 0,
        status: Some(BatchStatus::Applied),
    },
];

pub(super) fn run(dir: &Path, rec: &mut Recorder) -> Result<(DrillVerdict, Transcript)> {
    std::fs::write(dir.join("spec.toml"), SPEC)?;
    Db::create(&dir.join("source.db"), SOURCE)?;
    Db::create(&dir.join("target.db"), TARGET)?;
    for (name, text) in FEEDS {
        std::fs::write(dir.join(name), text)?;
    }
    if rec.print {
        println!(
            "cutover drill: invoices arriving as a change feed (revisions, tombstones, retries, crashes)\n"
        );
    }
    let spec = spec::load(&dir.join("spec.toml"))?;
    let mut all_ok = true;
    let mut stages = Vec::new();
    for s in &STAGES {
        let command = format!(
            "cutover apply --spec spec.toml --feed {} --into target",
            s.feed
        );
        let (code, out) = child(
            dir,
            &[
                "apply",
                "--spec",
                "spec.toml",
                "--feed",
                s.feed,
                "--into",
                "target",
            ],
            s.fault,
        )?;
        // Exit 0 or 1: apply printed its report. Otherwise it was killed
        // (or stopped on an error) and reported nothing to read.
        let report: Option<ApplyReport> = match code {
            0 | 1 => Some(serde_json::from_slice(&out).with_context(|| {
                format!(
                    "stage '{}': the report of `{command}` does not read as an apply report",
                    s.name
                )
            })?),
            _ => None,
        };
        let deliveries: Vec<Delivery> = report
            .into_iter()
            .flat_map(|r| r.deliveries)
            .map(|d| Delivery {
                delivery: d.delivery,
                status: d.status,
                applied: d.applied,
                duplicate: d.duplicate,
                stale: d.stale,
            })
            .collect();
        let status = deliveries.first().map(|d| d.status);
        let (totals, checkpoint) = state(&spec, dir)?;
        let ok = code == s.exit && status == s.status;
        let status = status.map_or("-".to_string(), |st| report::name(&st));
        all_ok &= ok;
        let totals_text = totals
            .iter()
            .map(|(c, t)| format!("{c}={t}"))
            .collect::<Vec<_>>()
            .join(", ");
        let counts = deliveries
            .first()
            .map(|d| {
                format!(
                    " (applied {}, duplicate {}, stale {})",
                    d.applied, d.duplicate, d.stale
                )
            })
            .unwrap_or_default();
        let fault = s
            .fault
            .map(|f| format!(" with CUTOVER_FAULT={f}"))
            .unwrap_or_default();
        let said = format!(
            "{}{fault}: exit {code}, {status}{counts}; totals {totals_text}; checkpoint {checkpoint}{}",
            s.name,
            if ok {
                ""
            } else {
                "  <-- NOT AS THE CONTRACT SAYS"
            }
        );
        rec.say("apply", Some(&command), ok, json!({}), said);
        stages.push(StageRecord {
            stage: s.name,
            feed: s.feed,
            fault: s.fault,
            exit: code,
            deliveries,
            totals,
            checkpoint,
        });
    }
    Ok((DrillVerdict::of(all_ok), Transcript::Invoices { stages }))
}

/// Target totals per currency and the feed's checkpoint, read back from the
/// database after a stage.
fn state(spec: &spec::Spec, dir: &Path) -> Result<(BTreeMap<String, i64>, i64)> {
    let mut source = Db::open_file(&dir.join("source.db"), Access::Read, Side::Source)?;
    let mut target = Db::open_file(&dir.join("target.db"), Access::Read, Side::Target)?;
    let rec = reconcile::reconcile(spec, &mut source, &mut target, 0)?;
    let mut totals = BTreeMap::new();
    for t in rec.tables.iter().flat_map(|t| &t.totals) {
        if let Some(c) = &t.currency {
            totals.insert(c.clone(), i64::try_from(t.target).unwrap_or(i64::MAX));
        }
    }
    Ok((totals, target.receipts().checkpoint("billing")?))
}
