//! The customers drill: catching a target up with CSV snapshots before the
//! cutover, through `cutover sync` itself: a full first sync, the same
//! snapshot again (changes nothing), schema drift stopping a run before any
//! write, `--evolve`, a late row reported and then picked up with
//! `--lookback`, and a snapshot that fails the quality checks and leaves
//! target and cursor as they were.

use std::path::Path;

use anyhow::Result;
use serde::Serialize;
use serde_json::{Value as Json, json};

use super::{DrillVerdict, Recorder, Transcript};
use crate::commands::sync;
use crate::db::{Access, Db};
use crate::report::Report;
use crate::spec::Side;

const SPEC: &str = include_str!("../../../fixtures/customers/spec.toml");
const TARGET: &str = include_str!("../../../fixtures/customers/target.sql");
const SNAPSHOTS: [(&str, &str); 3] = [
    (
        "snapshot-1.csv",
        include_str!("../../../fixtures/customers/snapshot-1.csv"),
    ),
    (
        "snapshot-2.csv",
        include_str!("../../../fixtures/customers/snapshot-2.csv"),
    ),
    (
        "snapshot-3-bad.csv",
        include_str!("../../../fixtures/customers/snapshot-3-bad.csv"),
    ),
];

struct Step {
    name: &'static str,
    snapshot: &'static str,
    extra: &'static [&'static str],
    /// Whether the step must hold (exit 0) or must refuse (exit 1).
    holds: bool,
    changed: u64,
    late: u64,
}

const STEPS: [Step; 6] = [
    Step {
        name: "full sync",
        snapshot: "snapshot-1.csv",
        extra: &[],
        holds: true,
        changed: 20,
        late: 0,
    },
    Step {
        name: "same snapshot",
        snapshot: "snapshot-1.csv",
        extra: &[],
        holds: true,
        changed: 0,
        late: 0,
    },
    Step {
        name: "drift",
        snapshot: "snapshot-2.csv",
        extra: &[],
        holds: false,
        changed: 0,
        late: 0,
    },
    Step {
        name: "incremental",
        snapshot: "snapshot-2.csv",
        extra: &["--evolve"],
        holds: false,
        changed: 5,
        late: 1,
    },
    Step {
        name: "lookback",
        snapshot: "snapshot-2.csv",
        extra: &["--lookback", "30d"],
        holds: true,
        changed: 1,
        late: 0,
    },
    Step {
        name: "quality gate",
        snapshot: "snapshot-3-bad.csv",
        extra: &[],
        holds: false,
        changed: 0,
        late: 0,
    },
];

/// One sync of the drill, as the transcript records it.
#[derive(Debug, Serialize)]
pub struct SyncStep {
    pub step: &'static str,
    pub snapshot: &'static str,
    pub holds: bool,
    pub changed: u64,
    pub unchanged: u64,
    pub late: u64,
    pub drift: Vec<String>,
    pub evolved: Vec<String>,
    pub quality_failures: u64,
    pub target_unchanged: bool,
}

pub(super) fn run(
    dir: &Path,
    rec: &mut Recorder,
    setup_only: bool,
) -> Result<(DrillVerdict, Transcript)> {
    std::fs::write(dir.join("spec.toml"), SPEC)?;
    Db::create(&dir.join("target.db"), TARGET)?;
    for (name, text) in SNAPSHOTS {
        std::fs::write(dir.join(name), text)?;
    }
    if setup_only {
        return Ok(set_up(rec));
    }
    if rec.print {
        println!(
            "cutover drill: customers caught up from CSV snapshots (sync, drift, late rows, quality)\n"
        );
    }
    let mut all_ok = true;
    let mut steps = Vec::new();
    for s in &STEPS {
        let before = target_rows(dir)?;
        let snapshot = dir.join(s.snapshot);
        let options = options(s, &snapshot);
        let shown = format!(
            "cutover sync --spec spec.toml --snapshot {}{}",
            s.snapshot,
            s.extra.iter().map(|a| format!(" {a}")).collect::<String>()
        );
        let ran =
            crate::spec::load(&dir.join("spec.toml")).and_then(|spec| sync::run(&spec, &options));
        let rep = match ran {
            Ok(rep) => rep,
            Err(e) => {
                rec.say(
                    "sync",
                    Some(&shown),
                    false,
                    Json::Null,
                    format!("{}: FAILED: {e:#}", s.name),
                );
                all_ok = false;
                continue;
            }
        };
        let holds = rep.holds();
        let Some(t) = rep.tables.iter().find(|t| t.name == "customers") else {
            anyhow::bail!("sync reported no table 'customers'");
        };
        let (changed, unchanged, late) = (t.changed, t.unchanged, t.late);
        let unchanged_db = target_rows(dir)? == before;
        let drift = t.drift.new.clone();
        let evolved = t.drift.evolved.clone();
        let failures = t.quality.failures();
        let mut said = said(s, t, holds, unchanged_db);
        // A refusal must leave the target as it was; a no-op too.
        let nothing_written_when_refused = holds || s.changed > 0 || unchanged_db;
        let ok = holds == s.holds
            && changed == s.changed
            && late == s.late
            && nothing_written_when_refused;
        all_ok &= ok;
        if !ok {
            said.push_str("  <-- NOT AS THE RUNBOOK SAYS");
        }
        rec.say("sync", Some(&shown), ok, json!({}), said);
        steps.push(SyncStep {
            step: s.name,
            snapshot: s.snapshot,
            holds,
            changed,
            unchanged,
            late,
            drift,
            evolved,
            quality_failures: failures,
            target_unchanged: unchanged_db,
        });
    }
    let rows = target_rows(dir)?;
    let customers = rows
        .iter()
        .find(|(t, _)| t == "customers")
        .map_or(0, |(_, r)| r.len());
    Ok((
        DrillVerdict::of(all_ok),
        Transcript::Customers {
            customers: Some(customers),
            steps,
        },
    ))
}

/// Every table of the drill's target with its rows.
fn target_rows(dir: &Path) -> Result<Vec<(String, Vec<String>)>> {
    Db::open_file(&dir.join("target.db"), Access::Read, Side::Target)?.snapshot()
}

/// What a sync step reports, in the transcript's words.
fn said(s: &Step, t: &sync::TableSync, holds: bool, unchanged_db: bool) -> String {
    let (changed, unchanged, late) = (t.changed, t.unchanged, t.late);
    let mut said = format!(
        "{}: exit {}, changed {changed}, unchanged {unchanged}, late {late}",
        s.name,
        if holds { 0 } else { 1 }
    );
    let drift = t.drift.new.clone();
    if !drift.is_empty() {
        said.push_str(&format!(
            "; drift: new column {} (nothing written: {unchanged_db})",
            drift.join(", ")
        ));
    }
    let evolved = t.drift.evolved.clone();
    if !evolved.is_empty() {
        said.push_str(&format!("; evolved: added column {}", evolved.join(", ")));
    }
    if late > 0 {
        let keys: Vec<String> = t.late_keys.iter().map(Json::to_string).collect();
        said.push_str(&format!("; late keys {}", keys.join(", ")));
    }
    let failures = t.quality.failures();
    if failures > 0 {
        said.push_str(&format!(
            "; quality: duplicate keys {}, bad watermarks {} (target and cursor unchanged: {unchanged_db})",
            t.quality.duplicate_keys, t.quality.bad_watermarks
        ));
    }
    if let Some(c) = &t.cursor_after {
        said.push_str(&format!("; cursor ({}, {})", c.watermark, c.key));
    }
    said
}

/// The options a step runs `cutover sync` with.
fn options<'a>(s: &Step, snapshot: &'a Path) -> sync::Options<'a> {
    sync::Options {
        snapshot: Some(snapshot),
        lookback: s
            .extra
            .iter()
            .position(|a| *a == "--lookback")
            .map(|i| s.extra[i + 1]),
        evolve: s.extra.contains(&"--evolve"),
        batch: 10_000,
        max_keys: 20,
    }
}

/// `--stop-after setup`: the files in place, nothing synced.
fn set_up(rec: &mut Recorder) -> (DrillVerdict, Transcript) {
    rec.say(
        "set up",
        None,
        true,
        json!({}),
        "spec.toml, an empty target.db and three snapshots".into(),
    );
    (
        DrillVerdict::Pass,
        Transcript::Customers {
            customers: None,
            steps: Vec::new(),
        },
    )
}
