//! The crash matrix: load, replay and apply, each killed at every crash
//! point (`CUTOVER_FAULT`: mid-batch, before-commit, after-commit) in a child
//! process of the tool. After each crash the databases are reopened and every
//! table (user and `_cutover_*`) is compared with the state before the step
//! (crash before commit) or after a clean run (crash after commit); then the
//! step is rerun without the fault and must end exactly as a clean run.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::json;

use super::{DrillVerdict, Recorder, Transcript, child, orders};
use crate::cli::Step;
use crate::db::{Access, Db};
use crate::report;
use crate::spec::Side;

const POINTS: [&str; 3] = ["mid-batch", "before-commit", "after-commit"];
const OPERATIONS: [&str; 3] = ["load", "replay", "apply"];

type Snapshot = Vec<(String, Vec<(String, Vec<String>)>)>;

/// One operation killed at one crash point, then rerun.
#[derive(Debug, Serialize)]
pub struct Cell {
    pub operation: &'static str,
    pub point: &'static str,
    pub exit: i32,
    pub rerun_exit: i32,
    /// `expected` (as before the step, or as after a clean run for a crash
    /// after commit) or `different`.
    pub state_after_crash: &'static str,
    /// `clean` (as after a clean run) or `different`.
    pub after_rerun: &'static str,
    pub pass: bool,
}

fn snapshot(dir: &Path) -> Result<Snapshot> {
    let mut out = Vec::new();
    for (db, side) in [("source.db", Side::Source), ("target.db", Side::Target)] {
        out.push((
            db.to_string(),
            Db::open_file(&dir.join(db), Access::Read, side)?.snapshot()?,
        ));
    }
    Ok(out)
}

/// A snapshot without the replay verdicts the source records at the end
/// of a replay (`_cutover_replays`).
fn without_verdict(s: &Snapshot) -> Snapshot {
    s.iter()
        .map(|(db, tables)| {
            (
                db.clone(),
                tables
                    .iter()
                    .map(|(t, rows)| {
                        let rows = if t == "_cutover_replays" {
                            Vec::new()
                        } else {
                            rows.clone()
                        };
                        (t.clone(), rows)
                    })
                    .collect(),
            )
        })
        .collect()
}

/// The folder state an operation starts from, built with the orders drill.
fn prepare(dir: &Path, op: &str) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut quiet = Recorder {
        print: false,
        steps: Vec::new(),
    };
    let last = if op == "load" {
        Step::Check
    } else {
        Step::Fence
    };
    if !orders::steps_until(dir, &mut quiet, last)? {
        anyhow::bail!(
            "setting up the {op} step failed: {}",
            quiet
                .steps
                .last()
                .map_or("no step ran", |s| s.said.as_str())
        );
    }
    if op == "apply" {
        let spec = crate::spec::load(&dir.join("spec.toml"))?;
        crate::commands::journal::export(&spec, &dir.join("feed.jsonl"), 1000)?;
    }
    Ok(())
}

/// Copies the files of a prepared folder (no subfolders) into a new one.
fn copy_folder(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn args(op: &str) -> Vec<&'static str> {
    match op {
        "load" => vec!["load", "--spec", "spec.toml"],
        "replay" => vec!["replay", "--spec", "spec.toml"],
        _ => vec![
            "apply",
            "--spec",
            "spec.toml",
            "--feed",
            "feed.jsonl",
            "--into",
            "source",
        ],
    }
}

/// Names the tables whose rows differ.
fn differ(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for ((db, ta), (_, tb)) in a.iter().zip(b) {
        let names: std::collections::BTreeSet<&String> =
            ta.iter().chain(tb).map(|(n, _)| n).collect();
        for n in names {
            let ra = ta.iter().find(|(t, _)| t == n).map(|(_, r)| r);
            let rb = tb.iter().find(|(t, _)| t == n).map(|(_, r)| r);
            if ra != rb {
                out.push(format!("{db}:{n}"));
            }
        }
    }
    out
}

pub(super) fn run(dir: &Path, rec: &mut Recorder) -> Result<(DrillVerdict, Transcript)> {
    if rec.print {
        println!(
            "cutover drill --crash-matrix: each write step killed at each crash point, then resumed\n"
        );
    }
    let mut cells = Vec::new();
    let mut all_ok = true;
    for op in OPERATIONS {
        // One prepared folder copied for every run: the copies share the
        // journal's identity, as one target restored from a backup would.
        let base = dir.join(op).join("base");
        prepare(&base, op)?;
        let clean_dir = dir.join(op).join("clean");
        copy_folder(&base, &clean_dir)?;
        let (code, _) = child(&clean_dir, &args(op), None)?;
        if code != 0 {
            anyhow::bail!(
                "a clean {op} exited {code}; the crash matrix needs a clean run to compare with"
            );
        }
        let clean = snapshot(&clean_dir)?;
        for point in POINTS {
            let d = dir.join(op).join(point);
            copy_folder(&base, &d).with_context(|| format!("preparing {op} / {point}"))?;
            let before = snapshot(&d)?;
            let (crash_code, _) = child(&d, &args(op), Some(point))?;
            let after_crash = snapshot(&d)?;
            // Killed after its batch committed, a replay has not reached its
            // end, where it records its verdict: the state is the clean
            // run's without it.
            let expected = if point == "after-commit" {
                &without_verdict(&clean)
            } else {
                &before
            };
            let crash_diff = differ(expected, &after_crash);
            let (rerun_code, _) = child(&d, &args(op), None)?;
            let final_diff = differ(&clean, &snapshot(&d)?);
            let ok = crash_code == crate::apply::FAULT_EXIT
                && crash_diff.is_empty()
                && rerun_code == 0
                && final_diff.is_empty();
            all_ok &= ok;
            let said = format!(
                "{op} killed {point}: exit {crash_code}, state {}; rerun exit {rerun_code}, {}",
                if crash_diff.is_empty() {
                    if point == "after-commit" {
                        "as after a clean run".to_string()
                    } else {
                        "as before the step".to_string()
                    }
                } else {
                    format!("DIFFERS in {}", crash_diff.join(", "))
                },
                if final_diff.is_empty() {
                    "equal to a clean run".to_string()
                } else {
                    format!("DIFFERS from a clean run in {}", final_diff.join(", "))
                }
            );
            rec.say(if ok { "pass" } else { "FAIL" }, None, ok, json!({}), said);
            cells.push(Cell {
                operation: op,
                point,
                exit: crash_code,
                rerun_exit: rerun_code,
                state_after_crash: if crash_diff.is_empty() {
                    "expected"
                } else {
                    "different"
                },
                after_rerun: if final_diff.is_empty() {
                    "clean"
                } else {
                    "different"
                },
                pass: ok,
            });
        }
    }
    Ok((DrillVerdict::of(all_ok), Transcript::CrashMatrix { cells }))
}

/// The matrix as a table: an operation per row, a crash point per column.
pub(super) fn table(cells: &[Cell]) -> String {
    report::table(
        &["operation", "mid-batch", "before-commit", "after-commit"],
        OPERATIONS.iter().map(|op| {
            let mut row = vec![op.to_string()];
            for p in POINTS {
                let pass = cells
                    .iter()
                    .any(|c| c.operation == *op && c.point == p && c.pass);
                row.push(if pass { "pass".into() } else { "FAIL".into() });
            }
            row
        }),
    )
}
