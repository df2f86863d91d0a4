//! The running example (README.md), step by step as RUNBOOK.md tells it.

use std::path::Path;

use anyhow::{Result, bail};
use serde_json::Value as Json;

use super::{DrillVerdict, Recorder, Servers, StepRecord, Transcript};
use crate::cli::Step;
use crate::db::{Access, Db};
use crate::spec::{Location, Side, Spec};

mod steps;

use steps::steps;

const SPEC: &str = include_str!("../../../../fixtures/orders/spec.toml");
const SOURCE: &str = include_str!("../../../../fixtures/orders/source.sql");
const TARGET: &str = include_str!("../../../../fixtures/orders/target.sql");
const APP_WRITES: &str = include_str!("../../../../fixtures/orders/app_writes.sql");

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

/// A schema (or, on a server whose URL names a database, a database) the
/// drill made for one side, dropped with this handle unless the folder is
/// kept.
struct ServerSide {
    url: String,
    /// The side it was made for, whose credentials drop it.
    side: Side,
    /// What drops it, run on `url`.
    drop: String,
    keep: bool,
}

impl Drop for ServerSide {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let base = Location::Server(self.url.clone());
        if let Ok(db) = Db::open(&base, Access::Write, self.side) {
            let _ = db.fixtures().execute_script(&self.drop);
        }
    }
}

/// Makes a place of the drill's own on the server at `url` and the table
/// of `script` in it; returns its url: a schema of the PostgreSQL database
/// `url` names, or, where a URL names no schema (MySQL), a database of the
/// server beside the one `url` names.
fn on_server(
    url: &str,
    side: Side,
    script: &str,
    keep: bool,
    made: &mut Vec<ServerSide>,
) -> Result<String> {
    let Some(engine) = crate::db::engines::for_url(url) else {
        bail!(
            "--{side} {}: give a postgres://USER@HOST:PORT/DB or mysql://USER@HOST:PORT/DB url",
            crate::spec::without_password(url)
        );
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("cutover_drill_{side}_{}_{nanos}", std::process::id());
    if !engine.capabilities.schemas {
        // Both engines read a double-quoted name as a name (MySQL's
        // sessions run with ANSI_QUOTES).
        let base = Db::open(&Location::Server(url.to_string()), Access::Write, side)?;
        base.fixtures()
            .execute_script(&format!("CREATE DATABASE \"{name}\""))?;
        made.push(ServerSide {
            url: url.to_string(),
            side,
            drop: format!("DROP DATABASE IF EXISTS \"{name}\""),
            keep,
        });
        let at = with_database(url, &name)?;
        Db::open(&Location::Server(at.clone()), Access::Write, side)?
            .fixtures()
            .execute_script(script)?;
        return Ok(at);
    }
    if url.contains("schema=") {
        bail!(
            "--{side} {}: leave out schema=; the drill makes a schema of its own and drops it afterwards",
            crate::spec::without_password(url)
        );
    }
    let schema = name;
    let base = Db::open(&Location::Server(url.to_string()), Access::Write, side)?;
    base.fixtures()
        .execute_script(&format!("CREATE SCHEMA \"{schema}\""))?;
    made.push(ServerSide {
        url: url.to_string(),
        side,
        drop: format!("DROP SCHEMA \"{schema}\" CASCADE"),
        keep,
    });
    let sep = if url.contains('?') { '&' } else { '?' };
    let at = format!("{url}{sep}schema={schema}");
    Db::open(&Location::Server(at.clone()), Access::Write, side)?
        .fixtures()
        .execute_script(script)?;
    Ok(at)
}

/// `url` naming database `name` instead of its own: the path after the
/// host, up to the query, replaced.
fn with_database(url: &str, name: &str) -> Result<String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| anyhow::anyhow!("{} is not a URL", crate::spec::without_password(url)))?;
    let (before, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let Some((authority, _)) = before.split_once('/') else {
        bail!(
            "{}: name a database after the host (HOST:PORT/DB)",
            crate::spec::without_password(url)
        );
    };
    Ok(match query {
        Some(q) => format!("{scheme}://{authority}/{name}?{q}"),
        None => format!("{scheme}://{authority}/{name}"),
    })
}

/// Creates the running example's spec and databases in `dir`: SQLite files,
/// or schemas of the drill's own on the servers given.
fn set_up_on(dir: &Path, servers: &Servers, keep: bool) -> Result<Vec<ServerSide>> {
    let mut made = Vec::new();
    let mut spec = SPEC.to_string();
    match &servers.source {
        Some(url) => {
            // A server's INTEGER holds 32 bits, SQLite's 64: keyed on
            // BIGINT, the source holds every key a target can, and `check`
            // names no hazard.
            let source = SOURCE.replace("INTEGER PRIMARY KEY", "BIGINT PRIMARY KEY");
            let at = on_server(url, Side::Source, &source, keep, &mut made)?;
            spec = spec.replace("sqlite://source.db", &at);
        }
        None => Db::create(&dir.join("source.db"), SOURCE)?,
    }
    match &servers.target {
        Some(url) => {
            let at = on_server(url, Side::Target, TARGET, keep, &mut made)?;
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
    Db::open(&spec.target, Access::Write, Side::Target)
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
