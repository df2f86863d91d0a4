//! The invoices drill: a change feed delivered in stages, each through the
//! real `cutover apply` in a child process, that exercises every rule of the
//! apply contract: retries, duplicates, newer and older revisions, a
//! tombstone and an attempted resurrection, a conflict that rolls back a
//! whole delivery, crashes at each point, and a second currency whose total
//! stays separate. After each stage it reads the totals per currency and the
//! feed's checkpoint back from the target.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::{Recorder, child};
use crate::db::{Access, Db};
use crate::reconcile;
use crate::spec;

const SPEC: &str = include_str!("../../fixtures/invoices/spec.toml");
const SOURCE: &str = include_str!("../../fixtures/invoices/source.sql");
const TARGET: &str = include_str!("../../fixtures/invoices/target.sql");
const FEEDS: [(&str, &str); 7] = [
    ("d1.jsonl", include_str!("../../fixtures/invoices/d1.jsonl")),
    ("d2.jsonl", include_str!("../../fixtures/invoices/d2.jsonl")),
    ("d3.jsonl", include_str!("../../fixtures/invoices/d3.jsonl")),
    ("d4.jsonl", include_str!("../../fixtures/invoices/d4.jsonl")),
    ("d5.jsonl", include_str!("../../fixtures/invoices/d5.jsonl")),
    ("d6.jsonl", include_str!("../../fixtures/invoices/d6.jsonl")),
    ("d7.jsonl", include_str!("../../fixtures/invoices/d7.jsonl")),
];

/// One stage: what is sent, with which crash point, and what must happen.
struct Stage {
    name: &'static str,
    feed: &'static str,
    fault: Option<&'static str>,
    exit: i32,
    status: &'static str,
}

const STAGES: [Stage; 11] = [
    Stage {
        name: "initial records",
        feed: "d1.jsonl",
        fault: None,
        exit: 0,
        status: "applied",
    },
    Stage {
        name: "delivery retried",
        feed: "d1.jsonl",
        fault: None,
        exit: 0,
        status: "replayed",
    },
    Stage {
        name: "duplicate record",
        feed: "d2.jsonl",
        fault: None,
        exit: 0,
        status: "applied",
    },
    Stage {
        name: "newer update, then tombstone",
        feed: "d3.jsonl",
        fault: None,
        exit: 0,
        status: "applied",
    },
    Stage {
        name: "late, older, stale resurrection",
        feed: "d4.jsonl",
        fault: None,
        exit: 0,
        status: "applied",
    },
    Stage {
        name: "conflict after a valid row",
        feed: "d5.jsonl",
        fault: None,
        exit: 1,
        status: "rejected",
    },
    Stage {
        name: "crash mid-delivery",
        feed: "d6.jsonl",
        fault: Some("mid-batch"),
        exit: 73,
        status: "-",
    },
    Stage {
        name: "crash after the checkpoint row",
        feed: "d6.jsonl",
        fault: Some("before-commit"),
        exit: 73,
        status: "-",
    },
    Stage {
        name: "crash after commit",
        feed: "d6.jsonl",
        fault: Some("after-commit"),
        exit: 73,
        status: "-",
    },
    Stage {
        name: "retry after the crash",
        feed: "d6.jsonl",
        fault: None,
        exit: 0,
        status: "replayed",
    },
    Stage {
        name: "second currency, other scope",
        feed: "d7.jsonl",
        fault: None,
        exit: 0,
        status: "applied",
    },
];

pub(super) fn run(dir: &Path, rec: &mut Recorder) -> Result<(bool, Json, String)> {
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
        let (code, report) = child(
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
        let deliveries: Vec<Json> = report["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                json!({
                    "delivery": d["delivery"], "status": d["status"], "applied": d["applied"],
                    "duplicate": d["duplicate"], "stale": d["stale"],
                })
            })
            .collect();
        let status = deliveries
            .first()
            .and_then(|d| d["status"].as_str())
            .unwrap_or("-")
            .to_string();
        let (totals, checkpoint) = state(&spec, dir)?;
        let ok = code == s.exit && status == s.status;
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
                    d["applied"], d["duplicate"], d["stale"]
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
        stages.push(json!({
            "stage": s.name, "feed": s.feed, "fault": s.fault, "exit": code,
            "deliveries": deliveries, "totals": totals, "checkpoint": checkpoint,
        }));
    }
    let text = if all_ok {
        "\ndrill: PASS; every delivery did what the apply contract says\n".to_string()
    } else {
        "\ndrill: FAIL; a delivery did not do what the apply contract says (see above)\n"
            .to_string()
    };
    let transcript = json!({ "scenario": "invoices", "verdict": if all_ok { "pass" } else { "fail" }, "stages": stages });
    Ok((all_ok, transcript, text))
}

/// Target totals per currency and the feed's checkpoint, read back from the
/// database after a stage.
fn state(spec: &spec::Spec, dir: &Path) -> Result<(BTreeMap<String, i64>, i64)> {
    let mut source = Db::open_file(&dir.join("source.db"), Access::Read, "source")?;
    let mut target = Db::open_file(&dir.join("target.db"), Access::Read, "target")?;
    let rec = reconcile::reconcile(spec, &mut source, &mut target, 0)?;
    let mut totals = BTreeMap::new();
    for t in rec.tables.iter().flat_map(|t| &t.totals) {
        if let Some(c) = &t.currency {
            totals.insert(c.clone(), i64::try_from(t.target).unwrap_or(i64::MAX));
        }
    }
    Ok((totals, target.feed_checkpoint("billing")?))
}
