//! `cutover` proves a database migration exact before the switch, and rolls
//! it back exactly after.
//!
//! Architecture, one module per concept (docs/architecture.md draws it):
//!
//! - [`commands`] — one module per command: check, load, sync, gate, journal,
//!   fence, replay, feed (export and apply), status, init and the drill. A
//!   command opens what it needs, calls the layers below and renders its
//!   typed report; none imports another;
//! - the rollback's and the migration's own concepts, which the commands
//!   share: [`journal`] (identity, drift, install and its proof, entries
//!   read as rows, runs in replay order), [`fence`] (fingerprint, the record
//!   and its copy, breach, replay's watch, the replay verdict, set and taken
//!   off), [`replay`] (changes and their fold, the dry run's plan,
//!   foreign-key checks, causes, conflict texts), [`feed`] (a feed line
//!   parsed and validated, a feed file validated whole), [`survey`] (sync's
//!   checks of a source table) and [`provenance`] (a synced table's batches
//!   and cursor);
//! - [`spec`] — the TOML migration spec and its load-time checks, parsed
//!   without touching a database; [`schema`] — opening its databases and
//!   checking the spec against their catalogues;
//! - [`value`] and [`transform`] — typed values and the reversible column
//!   transforms (exact decimal arithmetic, bijective maps);
//! - [`canonical`] — a source row in target form (forward transform and
//!   checks), the one conversion every command uses; [`watermark`] — the
//!   typed values sync's cursor is made of;
//! - [`reconcile`] — the streaming merge of canonical views and the
//!   reconciliation it gives (its summary line included), which the gate
//!   turns into a verdict and check into a reversibility proof; [`digest`] —
//!   the gate's digest mode over it; [`side_effects`] — the source's
//!   triggers, rules and foreign-key actions, decided;
//! - [`apply`] — the one engine that writes rows, batch and checkpoint in one
//!   transaction, used by load, sync, replay and feed apply;
//! - [`db`] — every SQL statement, behind the engine interfaces (SQLite,
//!   PostgreSQL; `sql/` holds DDL and trigger templates); [`report`] — typed
//!   reports rendered as tables and JSON; [`cli`] and [`progress`] — the edge.

#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod apply;
pub mod canonical;
pub mod cli;
pub mod commands;
pub mod db;
pub mod digest;
pub mod feed;
pub mod fence;
pub mod hazards;
pub mod journal;
pub mod progress;
pub mod provenance;
pub mod reconcile;
pub mod replay;
pub mod report;
pub mod schema;
pub mod side_effects;
pub mod spec;
pub mod survey;
pub mod target_casts;
pub mod transform;
pub mod value;
pub mod watch;
pub mod watermark;

use anyhow::Result;

use cli::{Cli, Command, FenceAction, JournalAction};
use commands::{check, drill, gate, init, load, status, sync};
use report::Outcome;

/// Runs the command line.
pub fn run(cli: &Cli) -> Result<Outcome> {
    progress::set_quiet(cli.quiet);
    let started = std::time::SystemTime::now();
    let wanted = reported(&cli.command);
    // The databases' fingerprints before the run, for the report.
    let before = match &wanted {
        Some((_, Some(spec), _, _)) => report::fingerprints(spec, "before")?,
        _ => Vec::new(),
    };
    let out = execute(&cli.command, cli.format).map_err(|e| match db::damage_behind(&e) {
        // A damaged page surfaces as whatever the read met (a malformed
        // image, keys out of order, which blames a collation): the damage,
        // with what the engine's check found, is what to report.
        Some(damage) => anyhow::Error::new(db::Damaged(damage)),
        None => e,
    })?;
    if let Some((name, spec, path, rehearsal)) = wanted {
        let run = report::Run {
            command: name,
            args: std::env::args().collect(),
            spec,
            started,
            before,
            rehearsal,
        };
        report::write_report(path, &run, &out)?;
    }
    Ok(out)
}

/// The command's name, spec, `--report` file and whether it rehearses,
/// when it was asked for a report.
fn reported(
    command: &Command,
) -> Option<(
    &'static str,
    Option<&std::path::Path>,
    &std::path::Path,
    bool,
)> {
    let (name, spec, report, rehearsal) = match command {
        Command::Gate {
            spec,
            report,
            inject_mismatch,
            ..
        } => ("gate", Some(spec), report, *inject_mismatch),
        Command::Replay {
            spec,
            report,
            rehearse,
            ..
        } => ("replay", Some(spec), report, *rehearse),
        Command::Watch { spec, report, .. } => ("watch", Some(spec), report, false),
        Command::Drill {
            report,
            inject_mismatch,
            ..
        } => ("drill", None, report, *inject_mismatch),
        _ => return None,
    };
    let path = report.report.as_deref()?;
    Some((name, spec.map(|s| s.spec.as_path()), path, rehearsal))
}

/// The spec limited to the tables `--table` names (all of them without it).
fn only(mut spec: spec::Spec, filter: &cli::TableFilter) -> Result<spec::Spec> {
    if filter.tables.is_empty() {
        return Ok(spec);
    }
    for name in &filter.tables {
        if spec.table(name).is_none() {
            anyhow::bail!(
                "--table {name}: spec {} has no table '{name}' (it has: {})",
                spec.path.display(),
                spec.tables
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    spec.tables.retain(|t| filter.tables.contains(&t.name));
    Ok(spec)
}

/// Runs one command: its typed report, rendered as JSON and text.
pub fn execute(command: &Command, format: cli::Format) -> Result<Outcome> {
    let load = |a: &cli::SpecArg| spec::load(&a.spec);
    match command {
        Command::Check { .. }
        | Command::Load { .. }
        | Command::Sync { .. }
        | Command::Gate { .. } => before_cutover(command),
        Command::Journal { .. }
        | Command::Fence { .. }
        | Command::Replay { .. }
        | Command::Apply { .. } => rollback(command),
        Command::Watch {
            spec,
            follow,
            interval,
            metrics,
            max_diffs,
            report: _,
        } => {
            let opts = commands::watch::Options {
                follow: *follow,
                interval: *interval,
                metrics: metrics.as_deref(),
                max_shown: *max_diffs,
            };
            let mut shown = |rep: &commands::watch::WatchReport| -> Result<()> {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                match format {
                    cli::Format::Json => writeln!(out, "{}", serde_json::to_string(rep)?)?,
                    cli::Format::Table => writeln!(out, "{}", commands::watch::render(rep))?,
                }
                Ok(out.flush()?)
            };
            let rep = commands::watch::run(&load(spec)?, &opts, &mut shown)?;
            Outcome::of(&rep, commands::watch::render(&rep))
        }
        Command::Status { spec } => {
            let rep = status::run(&load(spec)?)?;
            Outcome::of(&rep, status::render(&rep))
        }
        Command::Init {
            source,
            target,
            out,
        } => {
            let rep = init::run(source, target, out.as_deref())?;
            Outcome::of(&rep, init::render(&rep))
        }
        Command::Drill {
            scenario,
            inject_mismatch,
            crash_matrix,
            verify,
            keep,
            stop_after,
            source,
            target,
            report: _,
        } => {
            let rep = drill::run(drill::Options {
                scenario: *scenario,
                inject: *inject_mismatch,
                crash_matrix: *crash_matrix,
                verify: verify.as_deref(),
                keep: keep.as_deref(),
                stop_after: *stop_after,
                servers: drill::Servers {
                    source: source.clone(),
                    target: target.clone(),
                },
                format,
            })?;
            Outcome::of(&rep, drill::render(&rep))
        }
    }
}

/// The commands that carry the data across and prove it before the
/// cutover: check, load, sync and the gate.
fn before_cutover(command: &Command) -> Result<Outcome> {
    let load = |a: &cli::SpecArg| spec::load(&a.spec);
    match command {
        Command::Check {
            spec,
            strict,
            max_diffs,
            filter,
        } => {
            let rep = check::run(&only(load(spec)?, filter)?, *strict, *max_diffs)?;
            Outcome::of(&rep, check::render(&rep))
        }
        Command::Load {
            spec,
            batch,
            replace,
            filter,
        } => {
            let rep = load::run(&only(load(spec)?, filter)?, *batch, *replace)?;
            Outcome::of(&rep, load::render(&rep))
        }
        Command::Sync {
            spec,
            snapshot,
            lookback,
            evolve,
            batch,
            max_diffs,
            filter,
        } => {
            let rep = sync::run(
                &only(load(spec)?, filter)?,
                &sync::Options {
                    snapshot: snapshot.as_deref(),
                    lookback: lookback.as_deref(),
                    evolve: *evolve,
                    batch: *batch,
                    max_keys: *max_diffs,
                },
            )?;
            Outcome::of(&rep, sync::render(&rep))
        }
        Command::Gate {
            spec,
            inject_mismatch,
            max_diffs,
            snapshot,
            mode,
            filter,
            report: _,
        } => {
            let spec = only(load(spec)?, filter)?;
            let mode = match mode {
                cli::GateMode::Stream => digest::Mode::Stream,
                cli::GateMode::Digest => digest::Mode::Digest,
                cli::GateMode::Auto => digest::Mode::Auto,
            };
            if *inject_mismatch {
                let rep = gate::rehearse(&spec, *max_diffs)?;
                Outcome::of(&rep, gate::render_rehearsal(&rep))
            } else {
                let rep = gate::run_in(&spec, *max_diffs, snapshot.as_deref(), mode)?;
                Outcome::of(&rep, gate::render(&rep))
            }
        }
        _ => unreachable!("execute hands only the commands before the cutover here"),
    }
}

/// The commands of the rollback: the journal, the fence, the replay, and a
/// feed exported or applied.
fn rollback(command: &Command) -> Result<Outcome> {
    let load = |a: &cli::SpecArg| spec::load(&a.spec);
    match command {
        Command::Journal { action } => {
            let rep = match action {
                JournalAction::Install(s) => commands::journal::install(&load(s)?)?,
                JournalAction::Remove(s) => commands::journal::remove(&load(s)?)?,
                JournalAction::Status(s) => commands::journal::status(&load(s)?)?,
                JournalAction::Export {
                    spec,
                    out,
                    delivery_size,
                } => {
                    let rep = commands::journal::export(&load(spec)?, out, *delivery_size)?;
                    return Outcome::of(&rep, commands::journal::render_export(&rep));
                }
            };
            Outcome::of(&rep, commands::journal::render(&rep))
        }
        Command::Fence { action } => {
            let rep = match action {
                FenceAction::On(s) => commands::fence::on(&load(s)?)?,
                FenceAction::Off { spec, force } => commands::fence::off(&load(spec)?, *force)?,
                FenceAction::Status(s) => commands::fence::status(&load(s)?)?,
            };
            Outcome::of(&rep, commands::fence::render(&rep))
        }
        Command::Replay {
            spec,
            batch,
            dry_run,
            rehearse,
            max_diffs,
            accept_findings,
            report: _,
        } => {
            let spec = load(spec)?;
            let mode = match (dry_run, rehearse) {
                (_, true) => commands::replay::Mode::Rehearse,
                (true, _) => commands::replay::Mode::DryRun,
                _ => commands::replay::Mode::Replay,
            };
            let opts = commands::replay::Options {
                mode,
                batch: *batch,
                max_diffs: *max_diffs,
                accept_findings: *accept_findings,
            };
            let rep = commands::replay::run(&spec, opts)?;
            Outcome::of(&rep, commands::replay::render(&spec, &rep))
        }
        Command::Apply {
            spec,
            feed: file,
            into,
        } => {
            let side = match into {
                cli::IntoSide::Source => spec::Side::Source,
                cli::IntoSide::Target => spec::Side::Target,
            };
            let rep = commands::apply::apply(&load(spec)?, file, side)?;
            Outcome::of(&rep, commands::apply::render(&rep))
        }
        _ => unreachable!("execute hands only the rollback's commands here"),
    }
}
