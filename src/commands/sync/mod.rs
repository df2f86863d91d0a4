//! `cutover sync`: incremental copy source → target before the cutover, so
//! that one full load and then cheap repeated syncs keep the target caught
//! up with a source that still takes writes (a table, or CSV snapshots).
//!
//! Each table names a watermark column. A sync reads the source in
//! `(watermark, key)` order and applies, through the apply engine, the rows
//! past the table's cursor; each batch commits with the cursor row
//! (`_cutover_cursor`: batch digest, rows, watermark range), so a crash
//! never loses or doubles a row and a rerun over the same input changes
//! nothing. Before any write it checks:
//!
//! - **drift**: a source column the spec does not map, a mapped column that
//!   is gone, a column whose declared type changed since the last sync
//!   (`--evolve` adds a new column to the target as a copy column instead);
//! - **quality**: a NULL key, a duplicate key, a watermark that is NULL,
//!   empty or not a typed value (an integer, a date or time of a column of
//!   that type, or ISO-8601 text of one shape), a row the forward transform
//!   refuses.
//!
//! Rows at or below the cursor that the target does not hold as they are
//! now are **late**: reported (exit 1), never silently skipped;
//! `--lookback` re-reads a window behind the cursor to pick them up.
//!
//! The checks and the late rows come from one key-ordered pass over the
//! source, the target read beside it ([`crate::survey`]). The carrying pass then
//! reads, in watermark order, only the rows from the least watermark the
//! survey wanted (a range the engine can seek when the watermark is
//! indexed), and nothing when it wanted none: a sync with little to carry
//! costs one pass and those rows.

use crate::db::control::progress::Evolved;
use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::apply::Conflict;
use crate::db::{Access, Db};
use crate::provenance::Cursor;
use crate::report::{BatchStatus, Report, Verdict};
use crate::schema;
use crate::spec::{Column, Spec, Table};
use crate::survey::{Drift, Position, Quality, Survey, WatermarkColumn, drift};
use crate::transform::Transform;
use crate::watermark::lower_bound;

mod carry;
mod render;

use carry::{Planned, sync_table};
pub use render::render;

/// What `cutover sync` was asked to do.
pub struct Options<'a> {
    pub snapshot: Option<&'a std::path::Path>,
    pub lookback: Option<&'a str>,
    pub evolve: bool,
    pub batch: usize,
    pub max_keys: usize,
}

#[derive(Debug, Serialize)]
pub struct BatchReport {
    pub rows: u64,
    pub changed: u64,
    pub first_watermark: Json,
    pub last_watermark: Json,
    pub status: BatchStatus,
}

#[derive(Debug, Default, Serialize)]
pub struct TableSync {
    pub name: String,
    pub rows_read: u64,
    pub candidates: u64,
    pub changed: u64,
    pub unchanged: u64,
    pub stale: u64,
    /// Rows at or below the cursor the target does not hold as the source
    /// has them now: `late_missing` not in the target at all,
    /// `late_changed` there but different.
    pub late: u64,
    pub late_missing: u64,
    pub late_changed: u64,
    pub late_keys: Vec<Json>,
    pub cursor_before: Option<Cursor>,
    pub cursor_after: Option<Cursor>,
    pub batches: Vec<BatchReport>,
    pub quality: Quality,
    pub drift: Drift,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<Conflict>,
}

/// What `cutover sync` did, table by table.
#[derive(Debug, Serialize)]
pub struct SyncReport {
    pub verdict: Verdict,
    pub tables: Vec<TableSync>,
    /// Whether the sync got past its checks (drift, quality) to the
    /// tables; when not, nothing was written.
    #[serde(skip)]
    pub ran: bool,
}

impl Report for SyncReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// The table as sync carries it: the spec's columns and those `--evolve`
/// added, as copy.
fn plan(table: &Table, evolved: &[Evolved]) -> Table {
    let mut t = table.clone();
    for e in evolved {
        t.columns.push(Column {
            source: e.source_column.clone(),
            target: e.target_column.clone(),
            was: Vec::new(),
            transform: Transform::Copy,
            checks: Default::default(),
        });
    }
    t
}

pub fn run(spec: &Spec, o: &Options<'_>) -> Result<SyncReport> {
    let mut target = crate::schema::open_target(spec, Access::Write)?;
    crate::schema::refuse_if_fenced(
        &target,
        "sync is for before the cutover. Nothing was written",
    )?;
    // Snapshot problems (missing, unreadable, malformed) stop here: nothing
    // was written and the cursor is unchanged.
    let mut source = schema::open_source(spec, o.snapshot, Access::Read)?;
    let mut rep = SyncReport {
        verdict: Verdict::Pass,
        tables: Vec::new(),
        ran: false,
    };
    // Every table is checked before any is written.
    let mut plans = Vec::new();
    let mut fits = false;
    for t in &spec.tables {
        let (planned, ts) = check_table(
            spec,
            t,
            &mut source,
            &mut target,
            o,
            &mut rep.verdict,
            &mut fits,
        )?;
        plans.push(planned);
        rep.tables.push(ts);
    }
    if rep.verdict == Verdict::Fail {
        return Ok(rep);
    }
    if let Some(flag) = o.lookback
        && !fits
    {
        bail!(
            "--lookback {flag} fits the watermark of none of the tables ({}); give a number for integer watermarks, a duration (30m, 12h, 2d) for times. Nothing was written",
            spec.tables
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    rep.ran = true;
    for (i, planned) in plans.iter_mut().enumerate() {
        let ts = &mut rep.tables[i];
        if planned.evolving {
            evolve(&target, planned, ts)?;
        }
        if planned.whole {
            planned.plan.on_change = crate::spec::OnChange::Update;
        }
        sync_table(planned, &source, &target, o, ts)?;
        if ts.conflict.is_some() || ts.late > 0 {
            rep.verdict = Verdict::Fail;
        }
    }
    Ok(rep)
}

/// The source table's columns sync surveys for drift: a generated column
/// belongs to its database, so one the spec does not map is left out (as
/// `check` has it, docs/spec.md).
fn surveyed_columns(source: &Db, t: &Table) -> Result<Vec<crate::db::ColumnInfo>> {
    let generated = source.catalogue().generated_columns(&t.source_table)?;
    Ok(source
        .catalogue()
        .table_columns(&t.source_table)?
        .into_iter()
        .filter(|c| {
            !generated.iter().any(|g| g.name == c.name)
                || t.columns.iter().any(|m| m.source == c.name)
        })
        .collect())
}

/// Checks one table before anything is written: journaled or missing,
/// drift, the lookback that fits, and the survey (quality, late rows). The
/// table as checked, and its report so far; a finding fails `verdict`.
fn check_table<'a>(
    spec: &Spec,
    t: &'a Table,
    source: &mut Db,
    target: &mut Db,
    o: &Options<'_>,
    verdict: &mut Verdict,
    fits: &mut bool,
) -> Result<(Planned<'a>, TableSync)> {
    // A table without a watermark (a small lookup table) is compared in
    // full on each sync.
    let wm = t.watermark;
    if target.catalogue().own_triggers(&t.target_table)?.journal > 0 {
        bail!(
            "table '{}' in target {} is journaled; sync is for before the cutover. Nothing was written",
            t.name,
            target.location()
        );
    }
    let source_cols = surveyed_columns(source, t)?;
    if source_cols.is_empty() {
        bail!(
            "source {} has no table '{}'; fix the table name in the spec",
            source.location(),
            t.source_table
        );
    }
    let mut ts = TableSync {
        name: t.name.clone(),
        ..Default::default()
    };
    ts.drift = drift(t, &source_cols, &target.progress())?;
    let evolving = o.evolve
        && !ts.drift.new.is_empty()
        && ts.drift.missing.is_empty()
        && ts.drift.retyped.is_empty();
    if ts.drift.any() && !evolving {
        *verdict = Verdict::Fail;
    }
    let mut evolved = target.progress().evolved_columns(&t.name)?;
    // The table as the target holds it before this run.
    let before = plan(t, &evolved);
    if evolving {
        evolved.extend(ts.drift.new.iter().map(|c| Evolved {
            source_column: c.clone(),
            target_column: c.clone(),
        }));
    }
    let p = plan(t, &evolved);
    // The lookback of the table: --lookback where it fits the table's
    // watermark kind, else the table's own. A flag that fits no table is
    // refused before anything is written.
    let cursor = target.progress().sync_cursor(&t.name)?;
    let lookback = lookback(t, o.lookback, &cursor, fits);
    // After --evolve added columns, every row already in the target
    // lacks them: this run carries the whole table again (the source's
    // row wins), so that the next one is clean. A table without a
    // watermark is always carried whole.
    let whole = evolving || wm.is_none();
    let pos = match wm {
        Some(_) => Position::of(t, &cursor, lookback.as_deref())?,
        None => None,
    };
    let mut found = Survey::default();
    if *verdict == Verdict::Pass {
        spec.check_target_columns(target, &[t])?;
        // One key-ordered pass: the quality checks and, behind the
        // cursor, the late rows, judged on the columns the target had
        // before this run (a column --evolve adds is empty in every row).
        found = Survey::run(
            &p,
            WatermarkColumn::of(t, source, &source_cols).as_ref(),
            pos.as_ref(),
            whole,
            source,
            Some((target, &before)),
            o.max_keys,
        )?;
        if !surveyed(&mut found, &mut ts) {
            *verdict = Verdict::Fail;
        }
    }
    Ok((
        Planned {
            spec: t,
            plan: p,
            wm,
            whole,
            cursor,
            pos,
            found,
            source_cols,
            evolving,
        },
        ts,
    ))
}

/// `--evolve`: the new source columns added to the target as copy columns,
/// in one transaction, and the report told so.
fn evolve(target: &Db, planned: &Planned<'_>, ts: &mut TableSync) -> Result<()> {
    let t = planned.spec;
    target.schema_change(|| {
        target.progress().ensure_sync_tables()?;
        for c in &ts.drift.new {
            let from = planned
                .source_cols
                .iter()
                .find(|s| s.name == *c)
                .with_context(|| {
                    format!("new source column '{c}' is not in the source's catalogue")
                })?;
            target.catalogue().add_column(&t.target_table, from)?;
            target.progress().record_evolved(&t.name, c)?;
        }
        Ok(())
    })?;
    ts.drift.evolved = std::mem::take(&mut ts.drift.new);
    ts.drift.spec_lines.clear();
    Ok(())
}

/// The lookback of table `t`: `--lookback` (`flag`) where it fits the
/// table's watermark kind, else the table's own; `fits` is set when the
/// flag fits.
fn lookback(
    t: &Table,
    flag: Option<&str>,
    cursor: &Option<crate::db::control::progress::Cursor>,
    fits: &mut bool,
) -> Option<String> {
    let wm = t.watermark;
    match (flag, cursor) {
        (Some(flag), Some(c)) if wm.is_some() && lower_bound(&c.last_watermark, flag).is_ok() => {
            *fits = true;
            Some(flag.to_string())
        }
        // No cursor yet: nothing is behind it, any flag is moot.
        (Some(_), None) if wm.is_some() => {
            *fits = true;
            None
        }
        _ => t.lookback.clone(),
    }
}

/// What the survey found, taken into the table's report: whether its
/// quality checks passed.
fn surveyed(found: &mut Survey, ts: &mut TableSync) -> bool {
    ts.quality = std::mem::take(&mut found.quality);
    if ts.quality.failures() > 0 {
        return false;
    }
    ts.rows_read = ts.quality.rows;
    ts.late = found.late;
    ts.late_missing = found.late_missing;
    ts.late_changed = found.late_changed;
    ts.late_keys = std::mem::take(&mut found.late_keys);
    true
}
