//! The running example (README.md), step by step as RUNBOOK.md tells it.

use std::path::Path;

use anyhow::{Result, bail};
use serde_json::{Value as Json, json};

use super::{DrillVerdict, Recorder, Servers, StepRecord, Transcript, key_text};
use crate::cli::Step;
use crate::commands::replay::Replay;
use crate::commands::{check, fence, gate, journal, load, replay, status};
use crate::db::{Access, Db};
use crate::report::{self, Report};
use crate::spec::{Location, Spec};

const SPEC: &str = include_str!("../../../fixtures/orders/spec.toml");
const SOURCE: &str = include_str!("../../../fixtures/orders/source.sql");
const TARGET: &str = include_str!("../../../fixtures/orders/target.sql");
const APP_WRITES: &str = include_str!("../../../fixtures/orders/app_writes.sql");

struct Drill<'a> {
    dir: &'a Path,
    rec: &'a mut Recorder,
}

impl Drill<'_> {
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

    /// Runs a command on the drill's spec, returning its typed report; an
    /// error is a failed step, reported with its message.
    fn run<R>(
        &mut self,
        name: &'static str,
        shown: &str,
        command: impl FnOnce(&Spec) -> Result<R>,
    ) -> Result<Option<R>> {
        match crate::spec::load(&self.dir.join("spec.toml")).and_then(|s| command(&s)) {
            Ok(r) => Ok(Some(r)),
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

/// A schema the drill made on a server for one side, dropped with this
/// handle unless the folder is kept.
struct ServerSide {
    url: String,
    schema: String,
    keep: bool,
}

impl Drop for ServerSide {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let base = Location::Postgres(self.url.clone());
        if let Ok(db) = Db::open(&base, Access::Write, "drill") {
            let _ = db.execute_script(&format!("DROP SCHEMA \"{}\" CASCADE", self.schema));
        }
    }
}

/// Makes a schema of the drill's own in the PostgreSQL database at `url`
/// and the table of `script` in it; returns the url of that schema.
fn on_server(
    url: &str,
    side: &str,
    script: &str,
    keep: bool,
    made: &mut Vec<ServerSide>,
) -> Result<String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        bail!(
            "--{side} {}: give a postgres://USER@HOST:PORT/DB url",
            crate::spec::without_password(url)
        );
    }
    if url.contains("schema=") {
        bail!(
            "--{side} {}: leave out schema=; the drill makes a schema of its own and drops it afterwards",
            crate::spec::without_password(url)
        );
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let schema = format!("cutover_drill_{side}_{}_{nanos}", std::process::id());
    let base = Db::open(&Location::Postgres(url.to_string()), Access::Write, side)?;
    base.execute_script(&format!("CREATE SCHEMA \"{schema}\""))?;
    made.push(ServerSide {
        url: url.to_string(),
        schema: schema.clone(),
        keep,
    });
    let sep = if url.contains('?') { '&' } else { '?' };
    let at = format!("{url}{sep}schema={schema}");
    Db::open(&Location::Postgres(at.clone()), Access::Write, side)?.execute_script(script)?;
    Ok(at)
}

/// Creates the running example's spec and databases in `dir`: SQLite files,
/// or schemas of the drill's own on the servers given.
fn set_up_on(dir: &Path, servers: &Servers, keep: bool) -> Result<Vec<ServerSide>> {
    let mut made = Vec::new();
    let mut spec = SPEC.to_string();
    match &servers.source {
        Some(url) => {
            let at = on_server(url, "source", SOURCE, keep, &mut made)?;
            spec = spec.replace("sqlite://source.db", &at);
        }
        None => Db::create(&dir.join("source.db"), SOURCE)?,
    }
    match &servers.target {
        Some(url) => {
            let at = on_server(url, "target", TARGET, keep, &mut made)?;
            spec = spec.replace("sqlite://target.db", &at);
        }
        None => Db::create(&dir.join("target.db"), TARGET)?,
    }
    std::fs::write(dir.join("spec.toml"), spec)?;
    Ok(made)
}

/// The target of the drill's spec, opened to write as the application does.
fn application(dir: &Path) -> Result<Db> {
    let spec = crate::spec::load(&dir.join("spec.toml"))?;
    Db::open(&spec.target, Access::Write, "target")
}

/// Runs the drill in `dir`; returns its verdict and transcript.
pub(super) fn run(
    dir: &Path,
    rec: &mut Recorder,
    inject: bool,
    stop_after: Option<Step>,
    servers: &Servers,
    keep: bool,
) -> Result<(DrillVerdict, Transcript)> {
    if rec.print {
        println!(
            "cutover drill: the running example (orders: dollars and status codes → cents and words)\n"
        );
    }
    let mut d = Drill { dir, rec };
    let ok = steps(
        &mut d,
        inject,
        stop_after.unwrap_or(Step::Replay),
        servers,
        keep,
    )?;
    let verdict = match (ok, inject) {
        (true, false) => DrillVerdict::Pass,
        (true, true) => DrillVerdict::Blocked,
        (false, _) => DrillVerdict::Fail,
    };
    let steps: Vec<StepRecord> = std::mem::take(&mut d.rec.steps);
    Ok((verdict, Transcript::Orders { steps }))
}

/// The runbook, step by step. Returns whether every step held.
pub(super) fn steps_until(dir: &Path, rec: &mut Recorder, last: Step) -> Result<bool> {
    steps(
        &mut Drill { dir, rec },
        false,
        last,
        &Servers::default(),
        true,
    )
}

fn steps(d: &mut Drill, inject: bool, last: Step, servers: &Servers, keep: bool) -> Result<bool> {
    let sh = |c: &str| format!("cutover {c} --spec spec.toml");
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

    let c = sh("check");
    let Some(o) = d.run("check", &c, |s| check::run(s, false, 20))? else {
        return Ok(false);
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
        return Ok(o.holds());
    }

    let c = sh("load");
    let Some(o) = d.run("load", &c, |s| load::run(s, 1000, false))? else {
        return Ok(false);
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
        return Ok(o.holds());
    }

    if !inject {
        let c = sh("gate");
        let Some(o) = d.run("gate", &c, |s| gate::run(s, 20, None))? else {
            return Ok(false);
        };
        d.say(
            "gate",
            Some(&c),
            o.holds(),
            json!({"summary": o.summary}),
            format!("initial reconciliation {}: PASS", o.summary),
        );
        if !o.holds() {
            return Ok(false);
        }
    }
    let c = format!("{} --inject-mismatch", sh("gate"));
    let Some(o) = d.run("rehearsal", &c, |s| gate::rehearse(s, 20))? else {
        return Ok(false);
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
        return Ok(alive);
    }

    let c = sh("journal install");
    let Some(o) = d.run("cut over", &c, journal::install)? else {
        return Ok(false);
    };
    d.say(
        "cut over",
        Some(&c),
        o.holds(),
        json!({"installed": o.installed}),
        "the application switches to the target; every write to it is journaled".into(),
    );
    if !o.holds() || last == Step::Journal {
        return Ok(o.holds());
    }

    application(d.dir)?.execute_script(APP_WRITES)?;
    let Some(o) = d.run("application", "", journal::status)? else {
        return Ok(false);
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
        return Ok(entries == 3);
    }

    let c = sh("fence on");
    let Some(o) = d.run("fence", &c, fence::on)? else {
        return Ok(false);
    };
    let Some(boundary) = o.fence.as_ref().map(|f| f.boundary) else {
        d.say(
            "fence",
            Some(&c),
            false,
            Json::Null,
            "fence on reported no fence".into(),
        );
        return Ok(false);
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
        return Ok(false);
    }
    let refused = application(d.dir)?
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
    let Some(o) = d.run("plan", &c, |s| replay::run(s, 1000, true, 20))? else {
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
    match replay::run(spec, 1000, false, 20)? {
        Replay::Ran(r) => Ok(*r),
        Replay::DryRun(_) => anyhow::bail!("a replay reported as a dry run"),
    }
}
