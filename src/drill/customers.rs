//! The customers drill: catching a target up with CSV snapshots before the
//! cutover, through `cutover sync` itself: a full first sync, the same
//! snapshot again (changes nothing), schema drift stopping a run before any
//! write, `--evolve`, a late row reported and then picked up with
//! `--lookback`, and a snapshot that fails the quality checks and leaves
//! target and cursor as they were.

use std::path::Path;

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::Recorder;
use crate::cli::{Command, Format, SpecArg};
use crate::db::{Access, Db};

const SPEC: &str = include_str!("../../fixtures/customers/spec.toml");
const TARGET: &str = include_str!("../../fixtures/customers/target.sql");
const SNAPSHOTS: [(&str, &str); 3] = [
    (
        "snapshot-1.csv",
        include_str!("../../fixtures/customers/snapshot-1.csv"),
    ),
    (
        "snapshot-2.csv",
        include_str!("../../fixtures/customers/snapshot-2.csv"),
    ),
    (
        "snapshot-3-bad.csv",
        include_str!("../../fixtures/customers/snapshot-3-bad.csv"),
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

pub(super) fn run(
    dir: &Path,
    rec: &mut Recorder,
    setup_only: bool,
) -> Result<(bool, Json, String)> {
    std::fs::write(dir.join("spec.toml"), SPEC)?;
    Db::create(&dir.join("target.db"), TARGET)?;
    for (name, text) in SNAPSHOTS {
        std::fs::write(dir.join(name), text)?;
    }
    if setup_only {
        rec.say(
            "set up",
            None,
            true,
            json!({}),
            "spec.toml, an empty target.db and three snapshots".into(),
        );
        return Ok((
            true,
            json!({ "scenario": "customers", "verdict": "pass", "steps": [] }),
            "\ndrill: stopped after step 'setup' as asked\n".into(),
        ));
    }
    if rec.print {
        println!(
            "cutover drill: customers caught up from CSV snapshots (sync, drift, late rows, quality)\n"
        );
    }
    let mut all_ok = true;
    let mut steps = Vec::new();
    for s in &STEPS {
        let before = Db::open_file(&dir.join("target.db"), Access::Read, "target")?.snapshot()?;
        let snapshot = dir.join(s.snapshot);
        let cmd = Command::Sync {
            spec: SpecArg {
                spec: dir.join("spec.toml"),
            },
            snapshot: Some(snapshot),
            lookback: s
                .extra
                .iter()
                .position(|a| *a == "--lookback")
                .map(|i| s.extra[i + 1].to_string()),
            evolve: s.extra.contains(&"--evolve"),
            batch: 10_000,
            max_diffs: 20,
            filter: Default::default(),
        };
        let shown = format!(
            "cutover sync --spec spec.toml --snapshot {}{}",
            s.snapshot,
            s.extra.iter().map(|a| format!(" {a}")).collect::<String>()
        );
        let (holds, j) = match crate::execute(&cmd, Format::Json) {
            Ok(o) => (o.holds, o.json),
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
        let t = &j["tables"][0];
        let n = |f: &str| t[f].as_u64().unwrap_or(0);
        let (changed, unchanged, late) = (n("changed"), n("unchanged"), n("late"));
        let unchanged_db =
            Db::open_file(&dir.join("target.db"), Access::Read, "target")?.snapshot()? == before;
        let mut said = format!(
            "{}: exit {}, changed {changed}, unchanged {unchanged}, late {late}",
            s.name,
            if holds { 0 } else { 1 }
        );
        let drift: Vec<String> = t["drift"]["new"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        if !drift.is_empty() {
            said.push_str(&format!(
                "; drift: new column {} (nothing written: {unchanged_db})",
                drift.join(", ")
            ));
        }
        let evolved: Vec<String> = t["drift"]["evolved"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect();
        if !evolved.is_empty() {
            said.push_str(&format!("; evolved: added column {}", evolved.join(", ")));
        }
        if late > 0 {
            let keys: Vec<String> = t["late_keys"]
                .as_array()
                .into_iter()
                .flatten()
                .map(Json::to_string)
                .collect();
            said.push_str(&format!("; late keys {}", keys.join(", ")));
        }
        let q = &t["quality"];
        let failures = ["null_keys", "duplicate_keys", "bad_watermarks", "invalid"]
            .iter()
            .map(|f| q[f].as_u64().unwrap_or(0))
            .sum::<u64>();
        if failures > 0 {
            said.push_str(&format!(
                "; quality: duplicate keys {}, bad watermarks {} (target and cursor unchanged: {unchanged_db})",
                q["duplicate_keys"], q["bad_watermarks"]
            ));
        }
        if let Some(c) = t["cursor_after"].as_object() {
            said.push_str(&format!("; cursor ({}, {})", c["watermark"], c["key"]));
        }
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
        steps.push(json!({ "step": s.name, "snapshot": s.snapshot, "holds": holds, "changed": changed, "unchanged": unchanged, "late": late, "drift": drift, "evolved": evolved, "quality_failures": failures, "target_unchanged": unchanged_db }));
    }
    let rows = Db::open_file(&dir.join("target.db"), Access::Read, "target")?.snapshot()?;
    let customers = rows
        .iter()
        .find(|(t, _)| t == "customers")
        .map_or(0, |(_, r)| r.len());
    let text = if all_ok {
        format!(
            "\ncustomers in the target: {customers}\ndrill: PASS; every sync did what the runbook says\n"
        )
    } else {
        format!(
            "\ncustomers in the target: {customers}\ndrill: FAIL; a sync did not do what the runbook says (see above)\n"
        )
    };
    Ok((
        all_ok,
        json!({ "scenario": "customers", "verdict": if all_ok { "pass" } else { "fail" }, "customers": customers, "steps": steps }),
        text,
    ))
}
