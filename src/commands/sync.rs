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
//!   empty or not a typed value (an integer, or ISO-8601 text of one shape),
//!   a row the forward transform refuses.
//!
//! Rows at or below the cursor that the target does not hold as they are
//! now are **late**: reported (exit 1), never silently skipped;
//! `--lookback` re-reads a window behind the cursor to pick them up.
//!
//! The checks and the late rows come from one key-ordered pass over the
//! source, the target read beside it ([`Survey`]). The carrying pass then
//! reads, in watermark order, only the rows from the least watermark the
//! survey wanted (a range the engine can seek when the watermark is
//! indexed), and nothing when it wanted none: a sync with little to carry
//! costs one pass and those rows.

use std::cmp::Ordering;

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::apply::{BatchOutcome, Change, Conflict, Engine, Rule, SyncCheckpoint};
use crate::canonical::{self, Note};
use crate::db::{Access, ColumnInfo, Db};
use crate::provenance::Cursor;
use crate::reconcile;
use crate::report::{self, BatchStatus, Report, Verdict};
use crate::schema;
use crate::spec::{Column, Side, Spec, Table};
use crate::survey::{Drift, Position, Quality, Survey, drift};
use crate::transform::Transform;
use crate::value::{Block, CellRef, Row, Value, display_key, key_json};
use crate::watermark::{lower_bound, mark};

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
fn plan(table: &Table, evolved: &[(String, String)]) -> Table {
    let mut t = table.clone();
    for (s, tc) in evolved {
        t.columns.push(Column {
            source: s.clone(),
            target: tc.clone(),
            was: Vec::new(),
            transform: Transform::Copy,
            checks: Default::default(),
        });
    }
    t
}

pub fn run(spec: &Spec, o: &Options<'_>) -> Result<SyncReport> {
    let mut target = Db::open(&spec.target, Access::Write, "target")?;
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
        // A table without a watermark (a small lookup table) is compared in
        // full on each sync.
        let wm = t.watermark;
        if target.journal_triggers(&t.target_table)? > 0 {
            bail!(
                "table '{}' in target {} is journaled; sync is for before the cutover. Nothing was written",
                t.name,
                target.location()
            );
        }
        let source_cols = source.table_columns(&t.source_table)?;
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
        ts.drift = drift(t, &source_cols, &target)?;
        let evolving = o.evolve
            && !ts.drift.new.is_empty()
            && ts.drift.missing.is_empty()
            && ts.drift.retyped.is_empty();
        if ts.drift.any() && !evolving {
            rep.verdict = Verdict::Fail;
        }
        let mut evolved = target.evolved_columns(&t.name)?;
        // The table as the target holds it before this run.
        let before = plan(t, &evolved);
        if evolving {
            evolved.extend(ts.drift.new.iter().map(|c| (c.clone(), c.clone())));
        }
        let p = plan(t, &evolved);
        // The lookback of the table: --lookback where it fits the table's
        // watermark kind, else the table's own. A flag that fits no table is
        // refused before anything is written.
        let cursor = target.sync_cursor(&t.name)?;
        let lookback = match (o.lookback, &cursor) {
            (Some(flag), Some((w, _))) if wm.is_some() && lower_bound(w, flag).is_ok() => {
                fits = true;
                Some(flag.to_string())
            }
            // No cursor yet: nothing is behind it, any flag is moot.
            (Some(_), None) if wm.is_some() => {
                fits = true;
                None
            }
            _ => t.lookback.clone(),
        };
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
        if rep.verdict == Verdict::Pass {
            spec.check_target_columns(&target, &[t])?;
            // One key-ordered pass: the quality checks and, behind the
            // cursor, the late rows, judged on the columns the target had
            // before this run (a column --evolve adds is empty in every row).
            found = Survey::run(
                &p,
                wm,
                pos.as_ref(),
                whole,
                &mut source,
                Some((&mut target, &before)),
                o.max_keys,
            )?;
            ts.quality = std::mem::take(&mut found.quality);
            if ts.quality.failures() > 0 {
                rep.verdict = Verdict::Fail;
            } else {
                ts.rows_read = ts.quality.rows;
                ts.late = found.late;
                ts.late_missing = found.late_missing;
                ts.late_changed = found.late_changed;
                ts.late_keys = std::mem::take(&mut found.late_keys);
            }
        }
        plans.push(Planned {
            spec: t,
            plan: p,
            wm,
            whole,
            cursor,
            pos,
            found,
            source_cols,
            evolving,
        });
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
            let t = planned.spec;
            target.write(|| {
                target.ensure_sync_tables()?;
                for c in &ts.drift.new {
                    let ty = planned
                        .source_cols
                        .iter()
                        .find(|s| s.name == *c)
                        .map_or("", |s| s.decl_type.as_str());
                    target.evolve_column(&t.name, &t.target_table, c, ty)?;
                }
                Ok(())
            })?;
            ts.drift.evolved = std::mem::take(&mut ts.drift.new);
            ts.drift.spec_lines.clear();
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

/// A table as checked, ready to be synced.
struct Planned<'a> {
    spec: &'a Table,
    /// The table as sync carries it (evolved columns included).
    plan: Table,
    wm: Option<usize>,
    /// Whether every row is carried, not only those past the cursor.
    whole: bool,
    cursor: Option<(Value, String)>,
    pos: Option<Position>,
    found: Survey,
    source_cols: Vec<ColumnInfo>,
    evolving: bool,
}

/// Carries the rows of one table past its cursor (or, `whole`, every row
/// but the late ones) through the apply engine, batch by batch.
fn sync_table(
    planned: &Planned<'_>,
    source: &Db,
    target: &Db,
    o: &Options<'_>,
    ts: &mut TableSync,
) -> Result<()> {
    let p = &planned.plan;
    let wm = planned.wm;
    let k = p.key_len;
    let cursor = &planned.cursor;
    ts.cursor_before = Cursor::of(cursor.clone());
    let found = &planned.found;
    // Past a cursor, only the rows from the least watermark the survey
    // wanted are read again; none wanted, none read. The cursor's own
    // watermark lowers that bound when it has the table's shape, so that a
    // row written since the survey, past the cursor, is carried too.
    let from = match &planned.pos {
        Some(_) if !planned.whole => {
            if found.wanted == 0 {
                ts.cursor_after = ts.cursor_before.clone();
                return Ok(());
            }
            let mut from = found.from.clone();
            if let (Some((cw, _)), Some(f)) = (cursor, from.as_ref())
                && found.shape.as_ref().is_some_and(|s| s.fits(cw.as_cell()))
                && cw.as_cell().sql_cmp(&f.as_cell()) == Ordering::Less
            {
                from = Some(cw.clone());
            }
            from
        }
        _ => None,
    };
    let engine = Engine::new(std::slice::from_ref(p), target, Side::Target);
    let s_sql = match wm {
        Some(w) => source.table_sql(&p.source_table, &p.source_names(), k, Some(w)),
        None => source.source_sql(p),
    };
    let source_cols = &planned.source_cols;
    let mut pending: Vec<Change> = Vec::new();
    let mut failure: Option<anyhow::Error> = None;
    let flush = |pending: &mut Vec<Change>, ts: &mut TableSync| -> Result<bool> {
        if pending.is_empty() {
            return Ok(true);
        }
        let mut digest = Sha256::new();
        let mut block = Block::new(p.columns.len(), pending.len());
        for c in pending.iter() {
            for v in c.after.iter().flatten() {
                block.push(v.as_cell());
            }
        }
        block.hash_into(&mut digest);
        let batch = hex::encode(digest.finalize());
        let first = pending[0]
            .after
            .as_ref()
            .and_then(|r| wm.map(|w| r[w].clone()))
            .unwrap_or(Value::Null);
        let last_row = pending
            .last()
            .and_then(|c| c.after.clone())
            .unwrap_or_default();
        let mut last = wm
            .and_then(|w| last_row.get(w).cloned())
            .unwrap_or(Value::Null);
        let mut last_key = key_json(&last_row[..k.min(last_row.len())]).to_string();
        // A lookback re-reads rows behind the cursor; the cursor never moves
        // back.
        if let (Some((cw, ck)), Some(pos)) = (cursor, &planned.pos)
            && let Ok(m) = mark(last.as_cell())
            && pos.cmp(m, &|| last_row[..k.min(last_row.len())].to_vec()) == Ordering::Less
        {
            last = cw.clone();
            last_key = ck.clone();
        }
        let cp = SyncCheckpoint {
            table: &p.name,
            batch: &batch,
            first: &first,
            last: &last,
            last_key: &last_key,
            schema: source_cols,
        };
        let mut br = BatchReport {
            rows: pending.len() as u64,
            changed: 0,
            first_watermark: first.to_json(),
            last_watermark: last.to_json(),
            status: BatchStatus::Applied,
        };
        let go_on = match engine.apply_batch(pending, &cp)? {
            BatchOutcome::Committed(a) => {
                ts.changed += a.written;
                ts.unchanged += a.duplicate;
                ts.stale += a.stale;
                br.changed = a.written;
                true
            }
            BatchOutcome::Replayed => {
                ts.unchanged += pending.len() as u64;
                br.status = BatchStatus::Replayed;
                true
            }
            BatchOutcome::Conflict(c) => {
                ts.conflict = Some(*c);
                br.status = BatchStatus::Rejected;
                false
            }
            other => bail!("unexpected outcome of a sync batch: {other:?}"),
        };
        ts.batches.push(br);
        pending.clear();
        Ok(go_on)
    };
    let mut read = 0i64;
    let after = from.map(|f| vec![f]);
    source.scan_blocks(&s_sql, after.as_deref(), reconcile::BLOCK_ROWS, |b| {
        let mut fwd = vec![CellRef::Null; p.columns.len()];
        for r in 0..b.rows() {
            read += 1;
            let take = match (&found.all_late, &planned.pos, wm) {
                // A whole pass (after --evolve): every row but the late ones,
                // which stay reported, not carried.
                (Some(late), ..) => !late.contains(&key_json(&b.values(r, k)).to_string()),
                (None, Some(pos), Some(w)) => {
                    mark(b.get(r, w)).is_ok_and(|m| pos.wants(m, &|| b.values(r, k)))
                }
                (None, ..) => true,
            };
            if !take {
                continue;
            }
            let key = b.values(r, k);
            if let canonical::Forwarded::Invalid(Note::Invalid(column, value, reason)) =
                canonical::forward_row(p, &b, r, &mut fwd)
            {
                failure = Some(anyhow::anyhow!("table '{}', key {}, column '{column}': {value} ({reason}); the source changed during the sync", p.name, display_key(&key)));
                return Ok(false);
            }
            let row: Row = fwd.iter().map(CellRef::to_value).collect();
            ts.candidates += 1;
            let rule = match wm {
                Some(w) => Rule::Watermark(w),
                None => Rule::Plain,
            };
            pending.push(Change {
                table: 0,
                key,
                rule,
                after: Some(row),
                tag: read,
                source_images: None,
                entries: 1,
                unrecorded: Vec::new(),
            });
            if pending.len() >= o.batch && !flush(&mut pending, ts)? {
                return Ok(false);
            }
        }
        Ok(true)
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    if ts.conflict.is_none() {
        flush(&mut pending, ts)?;
    }
    ts.cursor_after = Cursor::of(target.sync_cursor(&p.name)?);
    Ok(())
}

/// The report as text: counts per table, then drift, quality, late rows,
/// conflicts, batches and cursors.
pub fn render(rep: &SyncReport) -> String {
    let mut text = String::new();
    if rep.ran {
        text.push_str(&report::table(
            &[
                "table",
                "rows read",
                "past cursor",
                "changed",
                "unchanged",
                "stale",
                "late",
            ],
            rep.tables.iter().map(|t| {
                vec![
                    t.name.clone(),
                    t.rows_read.to_string(),
                    t.candidates.to_string(),
                    t.changed.to_string(),
                    t.unchanged.to_string(),
                    t.stale.to_string(),
                    t.late.to_string(),
                ]
            }),
        ));
        text.push('\n');
    }
    for t in &rep.tables {
        if t.drift.any() {
            text.push_str(&format!(
                "table '{}': schema drift in the source; nothing was written\n",
                t.name
            ));
            for c in &t.drift.new {
                text.push_str(&format!("  new column '{c}' is not in the spec\n"));
            }
            for c in &t.drift.missing {
                text.push_str(&format!("  mapped column '{c}' is gone from the source\n"));
            }
            for c in &t.drift.retyped {
                text.push_str(&format!("  column type changed: {c}\n"));
            }
            if !t.drift.spec_lines.is_empty() {
                text.push_str("  to carry the new columns, add to the spec:\n");
                for l in &t.drift.spec_lines {
                    for line in l.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
                text.push_str("  or run sync --evolve to add them to the target as copy columns\n");
            }
        }
        for c in &t.drift.evolved {
            text.push_str(&format!(
                "table '{}': added column '{c}' to the target as a copy column (--evolve); map it in the spec to keep the migration reversible\n",
                t.name
            ));
        }
        if t.quality.failures() > 0 {
            text.push_str(&format!(
                "table '{}': quality checks failed; nothing was written, the cursor is unchanged\n  NULL keys {}, duplicate keys {}, bad watermarks {}, invalid rows {}\n",
                t.name, t.quality.null_keys, t.quality.duplicate_keys, t.quality.bad_watermarks, t.quality.invalid
            ));
            for e in &t.quality.examples {
                text.push_str(&format!("  {e}\n"));
            }
        }
        if t.late > 0 {
            let keys: Vec<String> = t.late_keys.iter().map(Json::to_string).collect();
            text.push_str(&format!(
                "table '{}': {} late rows at or below the cursor: {} not in the target, {} different there (first keys {}); rerun with --lookback (or the table's lookback) to pick them up\n",
                t.name,
                t.late,
                t.late_missing,
                t.late_changed,
                keys.join(", ")
            ));
        }
        if let Some(c) = &t.conflict {
            text.push_str(&format!(
                "table '{}': CONFLICT at key {}: {}; the batch was rolled back\n",
                t.name, c.key, c.reason
            ));
        }
        for (i, b) in t.batches.iter().enumerate() {
            text.push_str(&format!(
                "table '{}': batch {}: {} rows, {} changed, watermarks {} .. {} ({})\n",
                t.name,
                i + 1,
                b.rows,
                b.changed,
                b.first_watermark,
                b.last_watermark,
                report::name(&b.status)
            ));
        }
        if rep.ran
            && let Some(c) = &t.cursor_after
        {
            text.push_str(&format!("table '{}': cursor {}\n", t.name, c));
        }
    }
    text.push_str(if rep.holds() {
        "sync: done\n"
    } else {
        "sync: FAIL\n"
    });
    text
}
