//! The running example (DESIGN.md), step by step as RUNBOOK.md tells it.

use std::path::Path;

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::{Recorder, key_text};
use crate::cli::Step;
use crate::cli::{Command, FenceAction, Format, JournalAction, SpecArg};
use crate::db::{Access, Db};
use crate::report::Outcome;

const SPEC: &str = include_str!("../../fixtures/orders/spec.toml");
const SOURCE: &str = include_str!("../../fixtures/orders/source.sql");
const TARGET: &str = include_str!("../../fixtures/orders/target.sql");
const APP_WRITES: &str = include_str!("../../fixtures/orders/app_writes.sql");

struct Drill<'a> {
    dir: &'a Path,
    rec: &'a mut Recorder,
}

impl Drill<'_> {
    fn arg(&self) -> SpecArg {
        SpecArg {
            spec: self.dir.join("spec.toml"),
        }
    }

    fn say(
        &mut self,
        name: &'static str,
        command: Option<&str>,
        ok: bool,
        figures: Json,
        said: String,
    ) {
        self.rec.say(name, command, ok, figures, said);
    }

    /// Runs a command; an error is a failed step, reported with its message.
    fn run(&mut self, name: &'static str, shown: &str, cmd: Command) -> Result<Option<Outcome>> {
        match crate::execute(&cmd, Format::Json) {
            Ok(o) => Ok(Some(o)),
            Err(e) => {
                self.say(
                    name,
                    Some(shown),
                    false,
                    Json::Null,
                    format!("FAILED: {e:#}"),
                );
                Ok(None)
            }
        }
    }
}

/// Creates the running example's spec and databases in `dir`.
pub(super) fn set_up(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("spec.toml"), SPEC)?;
    Db::create(&dir.join("source.db"), SOURCE)?;
    Db::create(&dir.join("target.db"), TARGET)?;
    Ok(())
}

/// Runs the drill in `dir`; returns whether it held, its transcript, and
/// its closing lines.
pub(super) fn run(
    dir: &Path,
    rec: &mut Recorder,
    inject: bool,
    stop_after: Option<Step>,
) -> Result<(bool, Json, String)> {
    if rec.print {
        println!(
            "cutover drill: the running example (orders: dollars and status codes → cents and words)\n"
        );
    }
    let mut d = Drill { dir, rec };
    let ok = steps(&mut d, inject, stop_after.unwrap_or(Step::Replay))?;
    let verdict = match (ok, inject) {
        (true, false) => "pass",
        (true, true) => "blocked",
        (false, _) => "fail",
    };
    let mut text = String::from("\n");
    text.push_str(match verdict {
        "pass" if stop_after.is_some() => "drill: PASS; every step run so far held\n",
        "pass" => "drill: PASS; every step of the runbook held\n",
        "blocked" => "drill: cutover BLOCKED by the gate, as the rehearsal intends (exit 1)\n",
        _ => "drill: FAIL; a step did not do what the runbook says (see above)\n",
    });
    if let Some(s) = stop_after {
        let name = clap::ValueEnum::to_possible_value(&s)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        text.push_str(&format!("drill: stopped after step '{name}' as asked\n"));
    }
    let transcript = json!({ "scenario": "orders", "verdict": verdict, "steps": rec_steps(d.rec) });
    Ok((ok && !inject, transcript, text))
}

fn rec_steps(rec: &Recorder) -> Json {
    serde_json::to_value(&rec.steps).unwrap_or(Json::Null)
}

/// The runbook, step by step. Returns whether every step held.
pub(super) fn steps_until(dir: &Path, rec: &mut Recorder, last: Step) -> Result<bool> {
    steps(&mut Drill { dir, rec }, false, last)
}

fn steps(d: &mut Drill, inject: bool, last: Step) -> Result<bool> {
    let sh = |c: &str| format!("cutover {c} --spec spec.toml");
    set_up(d.dir)?;
    d.say(
        "set up",
        None,
        true,
        json!({"source_rows": 3, "target_rows": 0}),
        "source.db holds orders 101, 102, 103; target.db is empty".into(),
    );
    if last == Step::Setup {
        return Ok(true);
    }

    let c = sh("check");
    let Some(o) = d.run(
        "check",
        &c,
        Command::Check {
            spec: d.arg(),
            strict: false,
            max_diffs: 20,
            filter: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let rows = o.json["tables"][0]["rows"].as_u64().unwrap_or(0);
    d.say(
        "check",
        Some(&c),
        o.holds,
        json!({"rows": rows}),
        format!("{rows} source rows, every one transforms and round-trips"),
    );
    if !o.holds || last == Step::Check {
        return Ok(o.holds);
    }

    let c = sh("load");
    let Some(o) = d.run(
        "load",
        &c,
        Command::Load {
            spec: d.arg(),
            batch: 1000,
            replace: false,
            filter: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let loaded = o.json["tables"][0]["loaded"].as_u64().unwrap_or(0);
    d.say(
        "load",
        Some(&c),
        o.holds,
        json!({"loaded": loaded}),
        format!("{loaded} rows loaded into the target"),
    );
    if !o.holds || last == Step::Load {
        return Ok(o.holds);
    }

    if !inject {
        let c = sh("gate");
        let Some(o) = d.run(
            "gate",
            &c,
            Command::Gate {
                spec: d.arg(),
                inject_mismatch: false,
                max_diffs: 20,
                snapshot: None,
                filter: Default::default(),
                report: Default::default(),
            },
        )?
        else {
            return Ok(false);
        };
        let summary = o.json["summary"].as_str().unwrap_or("").to_string();
        d.say(
            "gate",
            Some(&c),
            o.holds,
            json!({"summary": summary}),
            format!("initial reconciliation {summary}: PASS"),
        );
        if !o.holds {
            return Ok(false);
        }
    }
    let c = format!("{} --inject-mismatch", sh("gate"));
    let Some(o) = d.run(
        "rehearsal",
        &c,
        Command::Gate {
            spec: d.arg(),
            inject_mismatch: true,
            max_diffs: 20,
            snapshot: None,
            filter: Default::default(),
            report: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let injected = o.json["injected"].as_u64().unwrap_or(0);
    let caught = o.json["caught"].as_u64().unwrap_or(0);
    let details: Vec<String> = o.json["faults"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            format!(
                "{} {}: {}",
                f["kind"].as_str().unwrap_or(""),
                key_text(&f["key"]),
                f["detail"].as_str().unwrap_or("")
            )
        })
        .collect();
    let alive = !o.holds && injected == 3 && caught == injected;
    d.say(
        "rehearsal",
        Some(&c),
        alive,
        json!({"injected": injected, "caught": caught}),
        format!(
            "caught {caught} of {injected} injected mismatches ({}); {}",
            details.join("; "),
            if inject {
                "cutover is BLOCKED"
            } else {
                "the gate is alive; the target was rolled back unchanged"
            }
        ),
    );
    if inject || !alive || last == Step::Gate {
        return Ok(alive);
    }

    let c = sh("journal install");
    let Some(o) = d.run(
        "cut over",
        &c,
        Command::Journal {
            action: JournalAction::Install(d.arg()),
        },
    )?
    else {
        return Ok(false);
    };
    d.say(
        "cut over",
        Some(&c),
        o.holds,
        json!({"installed": o.json["installed"]}),
        "the application switches to the target; every write to it is journaled".into(),
    );
    if !o.holds || last == Step::Journal {
        return Ok(o.holds);
    }

    Db::open_file(&d.dir.join("target.db"), Access::Write, "target")?.execute_script(APP_WRITES)?;
    let Some(o) = d.run(
        "application",
        "",
        Command::Journal {
            action: JournalAction::Status(d.arg()),
        },
    )?
    else {
        return Ok(false);
    };
    let entries = o.json["entries"].as_i64().unwrap_or(0);
    d.say(
        "application",
        None,
        entries == 3,
        json!({"journal_entries": entries}),
        format!("the application writes: 101 becomes 1400 cents, 104 (900, active) is inserted, 103 is deleted; journal_entries={entries}"),
    );
    if entries != 3 || last == Step::Writes {
        return Ok(entries == 3);
    }

    let c = sh("fence on");
    let Some(o) = d.run(
        "fence",
        &c,
        Command::Fence {
            action: FenceAction::On(d.arg()),
        },
    )?
    else {
        return Ok(false);
    };
    let boundary = o.json["boundary"].as_i64().unwrap_or(-1);
    d.say(
        "fence",
        Some(&c),
        o.holds && boundary == 3,
        json!({"journal_boundary": boundary}),
        format!(
            "the cutover is declared failed; the target is fenced, journal_boundary={boundary}"
        ),
    );
    if !o.holds || boundary != 3 {
        return Ok(false);
    }
    let refused = Db::open_file(&d.dir.join("target.db"), Access::Write, "target")?
        .execute_script("UPDATE orders SET cents = cents + 1 WHERE id = 102")
        .err()
        .map(|e| format!("{:#}", e))
        .filter(|m| m.contains("cutover fence"));
    d.say(
        "fence holds",
        None,
        refused.is_some(),
        json!({"refused": refused.is_some()}),
        match &refused {
            Some(_) => "a write from another connection is refused: \"cutover fence: table orders is read-only …\"".into(),
            None => "a write from another connection went THROUGH the fence".into(),
        },
    );
    if refused.is_none() || last == Step::Fence {
        return Ok(refused.is_some());
    }

    let c = format!("{} --dry-run", sh("replay"));
    let Some(o) = d.run(
        "plan",
        &c,
        Command::Replay {
            spec: d.arg(),
            batch: 1000,
            dry_run: true,
            max_diffs: 20,
            report: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let stale = o.json["stale_keys"].as_u64().unwrap_or(0);
    let keys: Vec<String> = o.json["keys"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            format!(
                "{} {}",
                k["effect"].as_str().unwrap_or(""),
                key_text(&k["key"])
            )
        })
        .collect();
    d.say(
        "plan",
        Some(&c),
        o.holds && stale == 3,
        json!({"stale_keys": stale}),
        format!("the source is stale at {stale} keys: {}", keys.join(", ")),
    );
    if !o.holds || stale != 3 {
        return Ok(false);
    }

    let c = sh("replay");
    let Some(o) = d.run(
        "replay",
        &c,
        Command::Replay {
            spec: d.arg(),
            batch: 1000,
            dry_run: false,
            max_diffs: 20,
            report: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let applied = o.json["applied"].as_u64().unwrap_or(0);
    let summary = o.json["summary"].as_str().unwrap_or("").to_string();
    d.say(
        "replay",
        Some(&c),
        o.holds && applied == 3,
        json!({"applied": applied, "summary": summary}),
        format!("applied {applied} entries; rollback reconciliation {summary}"),
    );
    if !o.holds || applied != 3 {
        return Ok(false);
    }

    let Some(o) = d.run(
        "replay again",
        &c,
        Command::Replay {
            spec: d.arg(),
            batch: 1000,
            dry_run: false,
            max_diffs: 20,
            report: Default::default(),
        },
    )?
    else {
        return Ok(false);
    };
    let again = o.json["applied"].as_u64().unwrap_or(u64::MAX);
    d.say(
        "replay again",
        Some(&c),
        o.holds && again == 0,
        json!({"applied": again}),
        format!("applied {again} entries; the source is unchanged"),
    );
    if !o.holds || again != 0 {
        return Ok(false);
    }

    let c = sh("status");
    let Some(o) = d.run("status", &c, Command::Status { spec: d.arg() })? else {
        return Ok(false);
    };
    let phase = o.json["phase"].as_str().unwrap_or("").to_string();
    let done = phase.starts_with("rolled back");
    d.say(
        "status",
        Some(&c),
        done,
        json!({"phase": phase}),
        format!("{phase}; switch the application back to the source"),
    );
    Ok(done)
}
