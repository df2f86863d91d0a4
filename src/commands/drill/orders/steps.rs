//! The drill's runbook, part by part: proven before the cutover (check,
//! load, gate and rehearsal), cut over, fenced, rolled back.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::{APP_WRITES, Drill, application, set_up_on};
use crate::cli::Step;
use crate::commands::drill::{Servers, key_text};
use crate::commands::replay::Replay;
use crate::commands::{check, fence, gate, journal, load, replay, status};
use crate::report::{self, Report};
use crate::spec::Spec;

pub(super) fn steps(
    d: &mut Drill,
    inject: bool,
    last: Step,
    servers: &Servers,
    keep: bool,
) -> Result<bool> {
    // The schemas made on servers go when this returns, unless kept.
    let _made = set_up_on(d.dir, servers, keep)?;
    let name = |server: &Option<String>, side: &str, file: &str| match server {
        Some(_) => format!("the {side} (a schema of its own on the server)"),
        None => file.to_string(),
    };
    d.say(
        "set up",
        None,
        true,
        json!({"source_rows": 3, "target_rows": 0}),
        format!(
            "{} holds orders 101, 102, 103; {} is empty",
            name(&servers.source, "source", "source.db"),
            name(&servers.target, "target", "target.db")
        ),
    );
    if last == Step::Setup {
        return Ok(true);
    }
    if let Err(held) = prove(d, last)? {
        return Ok(held);
    }
    if let Err(held) = gate(d, inject, last)? {
        return Ok(held);
    }
    let last_seq = match cut_over(d, last)? {
        Ok(seq) => seq,
        Err(held) => return Ok(held),
    };
    if let Err(held) = fence_up(d, last, last_seq)? {
        return Ok(held);
    }
    roll_back(d)
}

/// The command line a step shows.
fn sh(c: &str) -> String {
    format!("cutover {c} --spec spec.toml")
}

/// A part of the runbook: `Ok` to go on, `Err` to stop there with whether
/// every step so far held.
type Part<T = ()> = Result<std::result::Result<T, bool>>;

/// Check and load.
fn prove(d: &mut Drill, last: Step) -> Part {
    let c = sh("check");
    let Some(o) = d.run("check", &c, |s| check::run(s, false, 20))? else {
        return Ok(Err(false));
    };
    let rows: u64 = o.tables.iter().map(|t| t.rows).sum();
    d.say(
        "check",
        Some(&c),
        o.holds(),
        json!({"rows": rows}),
        format!("{rows} source rows, every one transforms and round-trips"),
    );
    if !o.holds() || last == Step::Check {
        return Ok(Err(o.holds()));
    }

    let c = sh("load");
    let Some(o) = d.run("load", &c, |s| load::run(s, 1000, false))? else {
        return Ok(Err(false));
    };
    let loaded: u64 = o.tables.iter().map(|t| t.loaded).sum();
    d.say(
        "load",
        Some(&c),
        o.holds(),
        json!({"loaded": loaded}),
        format!("{loaded} rows loaded into the target"),
    );
    if !o.holds() || last == Step::Load {
        return Ok(Err(o.holds()));
    }
    Ok(Ok(()))
}

/// The gate, and the rehearsal that proves it alive (with `inject`, the
/// mismatch that blocks the cutover).
fn gate(d: &mut Drill, inject: bool, last: Step) -> Part {
    if !inject {
        let c = sh("gate");
        let Some(o) = d.run("gate", &c, |s| gate::run(s, 20, None))? else {
            return Ok(Err(false));
        };
        d.say(
            "gate",
            Some(&c),
            o.holds(),
            json!({"summary": o.summary}),
            format!("initial reconciliation {}: PASS", o.summary),
        );
        if !o.holds() {
            return Ok(Err(false));
        }
    }
    let c = format!("{} --inject-mismatch", sh("gate"));
    let Some(o) = d.run("rehearsal", &c, |s| gate::rehearse(s, 20))? else {
        return Ok(Err(false));
    };
    let (injected, caught) = (o.injected, o.caught);
    let details: Vec<String> = o
        .faults
        .iter()
        .map(|f| {
            format!(
                "{} {}: {}",
                report::name(&f.kind),
                key_text(&f.key),
                f.detail
            )
        })
        .collect();
    let alive = !o.holds() && injected == 3 && caught == injected;
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
        return Ok(Err(alive));
    }
    Ok(Ok(()))
}

/// The cutover: the journal installed and the application's writes
/// journaled. The last seq journaled.
fn cut_over(d: &mut Drill, last: Step) -> Part<i64> {
    let c = sh("journal install");
    let Some(o) = d.run("cut over", &c, journal::install)? else {
        return Ok(Err(false));
    };
    d.say(
        "cut over",
        Some(&c),
        o.holds(),
        json!({"installed": o.installed}),
        "the application switches to the target; every write to it is journaled".into(),
    );
    if !o.holds() || last == Step::Journal {
        return Ok(Err(o.holds()));
    }

    application(d.dir)?.fixtures().execute_script(APP_WRITES)?;
    let Some(o) = d.run("application", "", journal::status)? else {
        return Ok(Err(false));
    };
    let entries = o.entries;
    // The boundary is the last seq journaled: 3 on SQLite; a server's
    // sequence also counted the journal's proof, rolled back.
    let last_seq = o.last_seq;
    d.say(
        "application",
        None,
        entries == 3,
        json!({"journal_entries": entries}),
        format!("the application writes: 101 becomes 1400 cents, 104 (900, active) is inserted, 103 is deleted; journal_entries={entries}"),
    );
    if entries != 3 || last == Step::Writes {
        return Ok(Err(entries == 3));
    }
    Ok(Ok(last_seq))
}

/// The cutover declared failed: the target fenced at `last_seq`, and a
/// write refused.
fn fence_up(d: &mut Drill, last: Step, last_seq: i64) -> Part {
    let c = sh("fence on");
    let Some(o) = d.run("fence", &c, fence::on)? else {
        return Ok(Err(false));
    };
    let Some(boundary) = o.fence.as_ref().map(|f| f.boundary) else {
        d.say(
            "fence",
            Some(&c),
            false,
            Json::Null,
            "fence on reported no fence".into(),
        );
        return Ok(Err(false));
    };
    d.say(
        "fence",
        Some(&c),
        o.holds() && boundary == last_seq,
        json!({"journal_boundary": boundary}),
        format!(
            "the cutover is declared failed; the target is fenced, journal_boundary={boundary}"
        ),
    );
    if !o.holds() || boundary != last_seq {
        return Ok(Err(false));
    }
    let refused = application(d.dir)?
        .fixtures()
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
        return Ok(Err(refused.is_some()));
    }
    Ok(Ok(()))
}

/// The rollback: the plan, the replay, a replay again that changes nothing,
/// and the status that says it is done.
fn roll_back(d: &mut Drill) -> Result<bool> {
    let c = format!("{} --dry-run", sh("replay"));
    let Some(o) = d.run("plan", &c, |s| {
        replay::run(s, replay::Options::replay(replay::Mode::DryRun))
    })?
    else {
        return Ok(false);
    };
    let holds = o.holds();
    let plan = match o {
        Replay::DryRun(dry) => dry.plan,
        Replay::Ran(r) => {
            d.say(
                "plan",
                Some(&c),
                false,
                Json::Null,
                format!("no plan: {}", r.breach.unwrap_or_default()),
            );
            return Ok(false);
        }
    };
    let stale = plan.stale_keys;
    let keys: Vec<String> = plan
        .keys
        .iter()
        .map(|k| format!("{} {}", report::name(&k.effect), key_text(&k.key)))
        .collect();
    d.say(
        "plan",
        Some(&c),
        holds && stale == 3,
        json!({"stale_keys": stale}),
        format!("the source is stale at {stale} keys: {}", keys.join(", ")),
    );
    if !holds || stale != 3 {
        return Ok(false);
    }

    let c = sh("replay");
    let Some(o) = d.run("replay", &c, replay_now)? else {
        return Ok(false);
    };
    let applied = o.applied;
    let summary = o.summary.clone().unwrap_or_default();
    let holds = o.verdict.holds();
    d.say(
        "replay",
        Some(&c),
        holds && applied == 3,
        json!({"applied": applied, "summary": summary}),
        format!("applied {applied} entries; rollback reconciliation {summary}"),
    );
    if !holds || applied != 3 {
        return Ok(false);
    }

    let Some(o) = d.run("replay again", &c, replay_now)? else {
        return Ok(false);
    };
    let again = o.applied;
    let holds = o.verdict.holds();
    d.say(
        "replay again",
        Some(&c),
        holds && again == 0,
        json!({"applied": again}),
        format!("applied {again} entries; the source is unchanged"),
    );
    if !holds || again != 0 {
        return Ok(false);
    }

    let c = sh("status");
    let Some(o) = d.run("status", &c, status::run)? else {
        return Ok(false);
    };
    let done = o.rolled_back();
    d.say(
        "status",
        Some(&c),
        done,
        json!({"phase": o.phase}),
        format!("{}; switch the application back to the source", o.phase),
    );
    Ok(done)
}

/// `cutover replay`, which reports as the replay it is (a dry run is the
/// other kind).
fn replay_now(spec: &Spec) -> Result<crate::commands::replay::ReplayReport> {
    match replay::run(spec, replay::Options::replay(replay::Mode::Replay))? {
        Replay::Ran(r) => Ok(*r),
        Replay::DryRun(_) => anyhow::bail!("a replay reported as a dry run"),
    }
}
