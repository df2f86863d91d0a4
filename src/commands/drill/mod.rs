//! `cutover drill`: the runbook rehearsed on built-in fixtures, in a temporary
//! folder, through the very commands an operator runs.
//!
//! - `orders` (the running example): check, load, gate and its rehearsal,
//!   journal, the application's writes, fence, replay, replay again, status;
//! - `invoices`: a change feed delivered in stages that exercise every rule
//!   of the apply contract, crashes included;
//! - `--crash-matrix`: load, replay and apply each killed at every crash
//!   point in a child process, then checked and resumed.
//!
//! Fixtures are compiled into the binary so the drill works from any folder.
//! Every drill produces a JSON transcript; `--verify FILE` compares it with a
//! stored contract and fails on any difference.

mod crash;
mod customers;
mod invoices;
mod orders;
mod render;

pub use render::render;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::cli::{Format, Scenario, Step};
use crate::report::Report;

/// What the drill was asked to do.
pub struct Options<'a> {
    pub scenario: Scenario,
    pub inject: bool,
    pub crash_matrix: bool,
    pub verify: Option<&'a Path>,
    pub keep: Option<&'a Path>,
    pub stop_after: Option<Step>,
    pub servers: Servers,
    pub format: Format,
}

/// PostgreSQL databases the orders drill puts its source or target in
/// (`--source`, `--target`); SQLite files of the folder when `None`.
#[derive(Clone, Debug, Default)]
pub struct Servers {
    pub source: Option<String>,
    pub target: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct StepRecord {
    pub step: u32,
    pub name: &'static str,
    pub command: Option<String>,
    pub ok: bool,
    /// The step's figures, as the transcript records them.
    pub figures: Json,
    pub said: String,
}

/// What a drill found: its transcript, scenario by scenario, and verdict.
#[derive(Debug, Serialize)]
pub struct DrillReport {
    #[serde(flatten)]
    pub transcript: Transcript,
    pub verdict: DrillVerdict,
    /// `--verify FILE`: how the transcript differs from the stored one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<Verification>,
    /// `--stop-after`: the step the drill stopped after.
    #[serde(skip)]
    pub stopped_after: Option<Step>,
    /// `--keep DIR`: where the spec and databases were left.
    #[serde(skip)]
    pub kept: Option<PathBuf>,
}

/// The drill passes only as the runbook says, and as the stored
/// transcript says under `--verify`.
impl Report for DrillReport {
    fn holds(&self) -> bool {
        self.verdict == DrillVerdict::Pass
            && self
                .verify
                .as_ref()
                .is_none_or(|v| v.differences.is_empty())
    }
}

/// Whether every step did what the runbook says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DrillVerdict {
    Pass,
    /// `--inject-mismatch`: the gate blocked the cutover, as intended.
    Blocked,
    Fail,
}

impl DrillVerdict {
    fn of(ok: bool) -> DrillVerdict {
        if ok {
            DrillVerdict::Pass
        } else {
            DrillVerdict::Fail
        }
    }
}

/// Each scenario's record of what happened.
#[derive(Debug, Serialize)]
#[serde(tag = "scenario", rename_all = "kebab-case")]
pub enum Transcript {
    Orders {
        steps: Vec<StepRecord>,
    },
    Customers {
        /// Rows in the target at the end (not after `--stop-after setup`).
        #[serde(skip_serializing_if = "Option::is_none")]
        customers: Option<usize>,
        steps: Vec<customers::SyncStep>,
    },
    Invoices {
        stages: Vec<invoices::StageRecord>,
    },
    CrashMatrix {
        cells: Vec<crash::Cell>,
    },
}

/// The differences `--verify` found.
#[derive(Debug, Serialize)]
pub struct Verification {
    pub file: Option<String>,
    pub differences: Vec<String>,
}

/// Records and prints the steps of a drill.
struct Recorder {
    print: bool,
    steps: Vec<StepRecord>,
}

impl Recorder {
    fn say(
        &mut self,
        name: &'static str,
        command: Option<&str>,
        ok: bool,
        figures: Json,
        said: String,
    ) {
        let n = self.steps.len() as u32 + 1;
        if self.print {
            let mut out = std::io::stdout().lock();
            let _ = match command {
                Some(c) => writeln!(out, "step {n:<2} {name:<13} $ {c}\n{:17}{said}", ""),
                None => writeln!(out, "step {n:<2} {name:<13} {said}"),
            };
        }
        self.steps.push(StepRecord {
            step: n,
            name,
            command: command.map(str::to_string),
            ok,
            figures,
            said,
        });
    }
}

/// A key for display: `101`, or the JSON of a composite key.
fn key_text(k: &Json) -> String {
    match k {
        Json::Array(a) if a.len() == 1 => match &a[0] {
            Json::String(s) => s.clone(),
            other => other.to_string(),
        },
        other => other.to_string(),
    }
}

/// The folder a drill runs in: `--keep DIR` (which must not hold a drill
/// already) or a temporary one removed afterwards.
struct Folder {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

fn folder(keep: Option<&Path>) -> Result<Folder> {
    match keep {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("creating drill folder {}", d.display()))?;
            for f in [
                "spec.toml",
                "source.db",
                "target.db",
                "load",
                "replay",
                "apply",
            ] {
                if d.join(f).exists() {
                    bail!(
                        "{} already holds {f}; give --keep an empty or new folder so nothing is overwritten",
                        d.display()
                    );
                }
            }
            Ok(Folder {
                path: d.to_path_buf(),
                _temp: None,
            })
        }
        None => {
            let t = tempfile::tempdir().context("creating a temporary folder for the drill")?;
            Ok(Folder {
                path: t.path().to_path_buf(),
                _temp: Some(t),
            })
        }
    }
}

pub fn run(o: Options<'_>) -> Result<DrillReport> {
    let customers_setup = o.scenario == Scenario::Customers && o.stop_after == Some(Step::Setup);
    if o.stop_after.is_some()
        && (o.crash_matrix || (o.scenario != Scenario::Orders && !customers_setup))
    {
        bail!("--stop-after applies to the orders drill (and `--stop-after setup` to customers)");
    }
    if (o.servers.source.is_some() || o.servers.target.is_some())
        && (o.crash_matrix || o.scenario != Scenario::Orders)
    {
        bail!(
            "--source and --target apply to the orders drill (the crash matrix compares database files)"
        );
    }
    if o.inject && (o.crash_matrix || o.scenario != Scenario::Orders) {
        bail!("--inject-mismatch applies to the orders drill only");
    }
    if std::env::var_os("CUTOVER_FAULT").is_some() {
        bail!(
            "CUTOVER_FAULT is set; the drill sets crash points itself (--crash-matrix), so unset it and run the drill again"
        );
    }
    let expected = match o.verify {
        None => None,
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading the expected transcript {}", p.display()))?;
            Some(
                serde_json::from_str::<Json>(&text)
                    .with_context(|| format!("{} is not JSON", p.display()))?,
            )
        }
    };
    let dir = folder(o.keep)?;
    let mut rec = Recorder {
        print: o.format == Format::Table,
        steps: Vec::new(),
    };
    let (verdict, transcript) = if o.crash_matrix {
        crash::run(&dir.path, &mut rec)?
    } else {
        match o.scenario {
            Scenario::Orders => orders::run(
                &dir.path,
                &mut rec,
                o.inject,
                o.stop_after,
                &o.servers,
                o.keep.is_some(),
            )?,
            Scenario::Invoices => invoices::run(&dir.path, &mut rec)?,
            Scenario::Customers => customers::run(&dir.path, &mut rec, customers_setup)?,
        }
    };
    let mut rep = DrillReport {
        transcript,
        verdict,
        verify: None,
        stopped_after: o.stop_after,
        kept: o.keep.map(|_| dir.path.clone()),
    };
    if let Some(exp) = expected {
        let mut differences = Vec::new();
        compare("", &exp, &serde_json::to_value(&rep)?, &mut differences);
        rep.verify = Some(Verification {
            file: o.verify.map(|p| p.display().to_string()),
            differences,
        });
    }
    Ok(rep)
}

/// Lists every place where `actual` differs from `expected`.
fn compare(path: &str, expected: &Json, actual: &Json, out: &mut Vec<String>) {
    match (expected, actual) {
        (Json::Object(e), Json::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => compare(&p, ev, av, out),
                    None => out.push(format!("{p}: expected {ev}, missing")),
                }
            }
            for k in a.keys().filter(|k| !e.contains_key(*k)) {
                out.push(format!("{path}.{k}: not expected, found {}", a[k]));
            }
        }
        (Json::Array(e), Json::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{path}: expected {} items, found {}",
                    e.len(),
                    a.len()
                ));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                compare(&format!("{path}[{i}]"), ev, av, out);
            }
        }
        (e, a) if e != a => out.push(format!(
            "{}: expected {e}, found {a}",
            if path.is_empty() { "." } else { path }
        )),
        _ => {}
    }
}

/// Runs the tool itself as a child process (crash points need a process to
/// kill), in `dir`, returning its exit code and what it printed (its JSON
/// report, if it got that far).
fn child(dir: &Path, args: &[&str], fault: Option<&str>) -> Result<(i32, Vec<u8>)> {
    let exe = std::env::current_exe().context("finding the cutover executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.current_dir(dir)
        .args(args)
        .arg("--format")
        .arg("json")
        .env_remove("CUTOVER_FAULT");
    if let Some(f) = fault {
        cmd.env("CUTOVER_FAULT", f);
    }
    let out = cmd
        .output()
        .context("running a drill step in a child process")?;
    let code = out.status.code().unwrap_or(-1);
    Ok((code, out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compare_names_every_changed_number() {
        let e = json!({"a": [1, {"b": 2}], "c": "x"});
        let a = json!({"a": [1, {"b": 3}], "c": "x", "d": 1});
        let mut out = Vec::new();
        compare("", &e, &a, &mut out);
        assert_eq!(
            out,
            vec![
                ".a[1].b: expected 2, found 3".to_string(),
                ".d: not expected, found 1".to_string()
            ]
        );
    }
}
