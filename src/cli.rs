//! The command line (clap derive). Usage errors exit 2 through clap.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    name = "cutover",
    version,
    about = "Prove a database migration (SQLite, PostgreSQL, MySQL/MariaDB) exact before the switch, and roll it back exactly after.",
    after_help = "Exit codes: 0 everything checked holds; 1 the data failed a check; 2 the tool could not do its job (usage, spec, I/O, precondition)."
)]
pub struct Cli {
    /// Output format: human tables, or one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table, global = true)]
    pub format: Format,

    /// No progress bars (they only ever appear on a terminal, on stderr).
    #[arg(long, short, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// The spec every command works from.
#[derive(Clone, Debug, Args)]
pub struct SpecArg {
    /// The migration spec (TOML), whose source and target are each a SQLite
    /// file, a PostgreSQL or a MySQL/MariaDB URL; file paths in it are
    /// relative to it.
    #[arg(long, value_name = "FILE")]
    pub spec: PathBuf,
}

/// `--table NAME`: the tables of the spec a run is limited to.
#[derive(Clone, Debug, Default, Args)]
pub struct TableFilter {
    /// Limit the run to this table of the spec (its `name`); repeat for more.
    #[arg(long = "table", value_name = "NAME")]
    pub tables: Vec<String>,
}

/// `--report FILE`: the run's report for the change record.
#[derive(Clone, Debug, Default, Args)]
pub struct ReportArg {
    /// Also write the report to FILE, with its provenance (tool version,
    /// spec and database fingerprints, times): JSON for a `.json` file,
    /// Markdown otherwise.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Clone, Debug, Subcommand)]
pub enum Command {
    /// Check the spec, both databases, and that every source row transforms and round-trips. Writes nothing.
    Check {
        #[command(flatten)]
        spec: SpecArg,
        /// Fail on value-equal but non-canonical source text (`12.5` for `12.50`).
        #[arg(long)]
        strict: bool,
        /// How many findings to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        max_diffs: usize,
        #[command(flatten)]
        filter: TableFilter,
    },
    /// Copy source → target through the forward transform, in batches.
    Load {
        #[command(flatten)]
        spec: SpecArg,
        /// Rows per transaction (each commit waits for the disk, so larger
        /// batches load faster; a crash loses at most the open batch, which
        /// a rerun resumes).
        #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = at_least_one)]
        batch: usize,
        /// Delete the rows already in the target tables and load again.
        #[arg(long)]
        replace: bool,
        #[command(flatten)]
        filter: TableFilter,
    },
    /// Incremental copy source → target past each table's (watermark, key) cursor.
    Sync {
        #[command(flatten)]
        spec: SpecArg,
        /// A CSV snapshot to read instead of the spec's csv:// source.
        #[arg(long, value_name = "PATH")]
        snapshot: Option<PathBuf>,
        /// Re-read a window behind the cursor (an integer for integer
        /// watermarks, a duration like 30m, 12h, 2d for times) to pick up late rows.
        #[arg(long, value_name = "DURATION_OR_N")]
        lookback: Option<String>,
        /// Add source columns the spec does not map to the target as copy columns.
        #[arg(long)]
        evolve: bool,
        /// Rows per transaction.
        #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = at_least_one)]
        batch: usize,
        /// How many late keys and quality findings to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        max_diffs: usize,
        #[command(flatten)]
        filter: TableFilter,
    },
    /// Reconcile source against target: exit 0 when they hold the same data, 1 when not.
    Gate {
        #[command(flatten)]
        spec: SpecArg,
        /// Rehearse: inject a changed, a missing and an extra row (always rolled back) and prove the gate catches them.
        #[arg(long)]
        inject_mismatch: bool,
        /// How many differences to list (all are counted).
        #[arg(long, default_value_t = 20, value_name = "N")]
        max_diffs: usize,
        /// A CSV snapshot to reconcile instead of the spec's csv:// source.
        #[arg(long, value_name = "PATH")]
        snapshot: Option<PathBuf>,
        /// How to compare: stream every row; compare digests computed inside
        /// both databases (servers only) and stream only the key ranges that
        /// differ; or auto (digest when both databases are servers). Stream is
        /// the default: on a server next to cutover it is faster (BENCHMARKS.md).
        #[arg(long, value_enum, default_value_t = GateMode::Stream)]
        mode: GateMode,
        #[command(flatten)]
        filter: TableFilter,
        #[command(flatten)]
        report: ReportArg,
    },
    /// Record every write to the target (install at the switch).
    Journal {
        #[command(subcommand)]
        action: JournalAction,
    },
    /// Make the target read-only for every writer while the rollback runs.
    Fence {
        #[command(subcommand)]
        action: FenceAction,
    },
    /// Roll back: apply the fenced journal to the source, then reconcile.
    Replay {
        #[command(flatten)]
        spec: SpecArg,
        /// Journal entries per transaction.
        #[arg(long, default_value_t = 1000, value_name = "N", value_parser = at_least_one)]
        batch: usize,
        /// Run the replay in a transaction that is always rolled back: the
        /// plan, every conflict and the closing reconciliation; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Before any fence: replay the whole journal as it stands now into
        /// the source inside a transaction that is rolled back, the target
        /// left open; proves every write applies and measures how long the
        /// replay takes. Changes nothing in either database.
        #[arg(long, conflicts_with = "dry_run")]
        rehearse: bool,
        /// How many differences or stale keys to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        max_diffs: usize,
        /// Commit the replay although the source then differs from the
        /// target or holds rows left without their parent: those findings
        /// are listed and recorded as accepted. Never past a conflict or a
        /// breach.
        #[arg(long, conflicts_with = "rehearse")]
        accept_findings: bool,
        #[command(flatten)]
        report: ReportArg,
    },
    /// After the switch: check that every write journaled so far can go back to the source, and how long the rollback would take. Writes nothing to either database.
    Watch {
        #[command(flatten)]
        spec: SpecArg,
        /// Keep watching, a pass every --interval, until interrupted
        /// (Ctrl-C ends it between passes).
        #[arg(long)]
        follow: bool,
        /// The time between passes with --follow (`30s`, `5m`, `1h`).
        #[arg(long, default_value = "30s", value_parser = interval, requires = "follow", value_name = "TIME")]
        interval: std::time::Duration,
        /// Write each pass's figures to FILE in the Prometheus text format
        /// (for node_exporter's textfile collector), replaced atomically.
        #[arg(long, value_name = "FILE")]
        metrics: Option<PathBuf>,
        /// How many findings to list.
        #[arg(long, default_value_t = 20, value_name = "N")]
        max_diffs: usize,
        #[command(flatten)]
        report: ReportArg,
    },
    /// Apply a change feed (JSON Lines, docs/feed.md) with the delivery contract.
    Apply {
        #[command(flatten)]
        spec: SpecArg,
        /// The feed file.
        #[arg(long, value_name = "FILE")]
        feed: PathBuf,
        /// Which database to apply it to.
        #[arg(long, value_enum)]
        into: IntoSide,
    },
    /// Draft a spec from the two schemas (tables and columns matched by name); never overwrites a file.
    Init {
        /// The old database: sqlite://PATH (SQLite), postgres://USER@HOST:PORT/DB?schema=NAME
        /// (PostgreSQL) or mysql://USER@HOST:PORT/DB (MySQL/MariaDB).
        #[arg(long, value_name = "URL")]
        source: String,
        /// The new database: sqlite://PATH (SQLite), postgres://USER@HOST:PORT/DB?schema=NAME
        /// (PostgreSQL) or mysql://USER@HOST:PORT/DB (MySQL/MariaDB).
        #[arg(long, value_name = "URL")]
        target: String,
        /// Write the draft to FILE (refused if it exists) instead of printing it.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Where the migration stands and the next command to run.
    Status {
        #[command(flatten)]
        spec: SpecArg,
    },
    /// Run the runbook end to end on built-in fixtures in a temporary folder: SQLite files, or a side on a PostgreSQL or MySQL/MariaDB server.
    Drill {
        /// The built-in scenario.
        #[arg(long, value_enum, default_value_t = Scenario::Orders)]
        scenario: Scenario,
        /// Stop at the gate rehearsal: the gate must catch the injected faults (exit 1).
        #[arg(long)]
        inject_mismatch: bool,
        /// Kill load, replay and apply at every crash point and check each resumes exactly.
        #[arg(long)]
        crash_matrix: bool,
        /// Compare the drill's JSON transcript with this expected contract; exit 1 on any difference.
        #[arg(long, value_name = "FILE")]
        verify: Option<PathBuf>,
        /// Run in DIR (created; must be empty) and leave the spec and databases there.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        /// Stop after this step, leaving the folder ready for the next step by hand.
        #[arg(long, value_enum, value_name = "STEP")]
        stop_after: Option<Step>,
        /// Put the orders drill's source on this server: in a schema of its own of this PostgreSQL database, or in a database of its own beside this MySQL/MariaDB one (dropped at the end unless --keep).
        #[arg(long, value_name = "URL")]
        source: Option<String>,
        /// Put the orders drill's target on this server: in a schema of its own of this PostgreSQL database, or in a database of its own beside this MySQL/MariaDB one (dropped at the end unless --keep).
        #[arg(long, value_name = "URL")]
        target: Option<String>,
        #[command(flatten)]
        report: ReportArg,
    },
}

/// `gate --mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GateMode {
    Stream,
    Digest,
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum IntoSide {
    Source,
    Target,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// The running example: gate, journal, fence, replay.
    Orders,
    /// A change feed exercising the apply contract.
    Invoices,
    /// CSV snapshots synced incrementally: no-op rerun, late row, drift, quality gate.
    Customers,
}

#[derive(Clone, Debug, Subcommand)]
pub enum JournalAction {
    /// Install the journal triggers on every target table of the spec.
    Install(SpecArg),
    /// Remove the journal triggers (the recorded entries are kept).
    Remove(SpecArg),
    /// Entries per table and op, and whether the triggers are in place.
    Status(SpecArg),
    /// Write the fenced journal as a change feed (temporary file, synced, renamed).
    Export {
        #[command(flatten)]
        spec: SpecArg,
        /// The feed file to write.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Changes per delivery.
        #[arg(long, default_value_t = 1000, value_name = "N", value_parser = at_least_one)]
        delivery_size: usize,
    },
}

#[derive(Clone, Debug, Subcommand)]
pub enum FenceAction {
    /// Fence the target: record the journal boundary and refuse every write.
    On(SpecArg),
    /// Lift the fence (refused until a replay has reconciled clean, unless --force).
    Off {
        #[command(flatten)]
        spec: SpecArg,
        /// Lift it even though journal entries are not replayed.
        #[arg(long)]
        force: bool,
    },
    /// Whether the fence is on and intact.
    Status(SpecArg),
}

/// A count of at least 1 (`--batch`, `--delivery-size`), checked as the
/// command line is parsed.
fn interval(s: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be more than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Drill steps an operator can stop after, to carry on by hand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Fixture databases created; nothing run yet.
    Setup,
    Check,
    Load,
    /// Gate and its rehearsal.
    Gate,
    /// Journal installed (the switch).
    Journal,
    /// The application's writes after the switch.
    Writes,
    Fence,
    Replay,
}
