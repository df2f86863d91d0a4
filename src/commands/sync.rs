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

use std::cmp::Ordering;
use std::collections::BTreeSet;

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

use crate::apply::{BatchOutcome, Change, Conflict, Engine, Rule, SyncCheckpoint};
use crate::canonical::{self, Note};
use crate::db::{Access, ColumnInfo, Db};
use crate::reconcile;
use crate::report::{self, BatchStatus, Report, Verdict};
use crate::schema;
use crate::spec::{Column, Side, Spec, Table};
use crate::transform::Transform;
use crate::value::{Block, CellRef, Row, Value, display_key, key_cmp, key_from_json, key_json};
use crate::watermark::{Shape, lower_bound, mark, shape, watermark_cmp};

/// What `cutover sync` was asked to do.
pub struct Options<'a> {
    pub snapshot: Option<&'a std::path::Path>,
    pub lookback: Option<&'a str>,
    pub evolve: bool,
    pub batch: usize,
    pub max_keys: usize,
}

// --- drift and quality ---------------------------------------------------------

/// How a source table differs from what the spec and the last sync knew.
#[derive(Debug, Default, Serialize)]
pub struct Drift {
    pub new: Vec<String>,
    pub missing: Vec<String>,
    pub retyped: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spec_lines: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evolved: Vec<String>,
}

impl Drift {
    pub fn any(&self) -> bool {
        !self.new.is_empty() || !self.missing.is_empty() || !self.retyped.is_empty()
    }
}

fn drift(table: &Table, source_cols: &[ColumnInfo], target: &Db) -> Result<Drift> {
    let evolved: BTreeSet<String> = target
        .evolved_columns(&table.name)?
        .into_iter()
        .map(|e| e.0)
        .collect();
    let mapped: BTreeSet<&str> = table.columns.iter().map(|c| c.source.as_str()).collect();
    let present: BTreeSet<&str> = source_cols.iter().map(|c| c.name.as_str()).collect();
    let mut d = Drift::default();
    for c in source_cols {
        if !mapped.contains(c.name.as_str())
            && !table.ignore.contains(&c.name)
            && !evolved.contains(&c.name)
        {
            d.new.push(c.name.clone());
            d.spec_lines.push(format!("[[tables.columns]]\nsource = \"{}\"   # carried as copy; or list it in ignore = [...]", c.name));
        }
    }
    for c in &table.columns {
        // A target-only constant has no source column to miss.
        if !c.source.is_empty() && !present.contains(c.source.as_str()) {
            d.missing.push(c.source.clone());
        }
    }
    for (name, was) in target.recorded_source_schema(&table.name)? {
        if let Some(now) = source_cols.iter().find(|c| c.name == name)
            && !now.decl_type.eq_ignore_ascii_case(&was)
        {
            d.retyped.push(format!("{name}: {was} → {}", now.decl_type));
        }
    }
    Ok(d)
}

/// The quality checks of a source table: what failed, with examples.
#[derive(Debug, Default, Serialize)]
pub struct Quality {
    pub rows: u64,
    pub null_keys: u64,
    pub duplicate_keys: u64,
    pub bad_watermarks: u64,
    pub invalid: u64,
    pub examples: Vec<String>,
}

impl Quality {
    /// Every finding, of any kind.
    pub fn failures(&self) -> u64 {
        self.null_keys + self.duplicate_keys + self.bad_watermarks + self.invalid
    }

    fn note(&mut self, max: usize, what: String) {
        if self.examples.len() < max {
            self.examples.push(what);
        }
    }
}

/// Reads the whole source once in key order: keys present and unique,
/// every watermark typed and of one shape, every row carried by the forward
/// transform. Also used by the gate.
fn quality(table: &Table, wm: Option<usize>, source: &Db, max: usize) -> Result<Quality> {
    let sql = source.source_sql(table);
    let k = table.key_len;
    let mut q = Quality::default();
    let mut shape0: Option<Shape> = None;
    let mut prev: Option<Row> = None;
    source.scan_blocks(&sql, None, reconcile::BLOCK_ROWS, |b| {
        let canon = canonical::canonical_block(table, &b);
        for r in 0..b.rows() {
            q.rows += 1;
            // Keys are built only for a finding, never per row.
            let key = || display_key(&b.values(r, k));
            let dup = if r > 0 {
                b.cmp_prefix(r - 1, &b, r, k) == Ordering::Equal
            } else {
                prev.as_ref().is_some_and(|p| (0..k).all(|c| p[c].as_cell().sql_cmp(&b.get(r, c)) == Ordering::Equal))
            };
            if (0..k).any(|c| b.get(r, c) == CellRef::Null) {
                q.null_keys += 1;
                q.note(max, format!("key {}: a key column is NULL", key()));
            } else if dup {
                q.duplicate_keys += 1;
                q.note(max, format!("key {}: appears twice in the snapshot", key()));
            }
            let Some(wm) = wm else { continue };
            let w = b.get(r, wm);
            match mark(w) {
                Err(e) => {
                    q.bad_watermarks += 1;
                    q.note(max, format!("key {}: {e}", key()));
                }
                Ok(_) => match (&shape0, shape(w)) {
                    (None, s) => shape0 = s,
                    (Some(a), Some(b)) if *a == b => {}
                    _ => {
                        q.bad_watermarks += 1;
                        q.note(max, format!("key {}: watermark {} is not of the shape of the others (mixed widths or kinds)", key(), w.to_value()));
                    }
                },
            }
        }
                        if b.rows() > 0 {
            prev = Some(b.values(b.rows() - 1, k));
        }
        for (r, n) in &canon.notes {
            // A NULL key is counted as such above.
            if (0..k).any(|c| b.get(*r, c) == CellRef::Null) {
                continue;
            }
            if let Note::Invalid(column, value, reason) = n {
                q.invalid += 1;
                q.note(max, format!("key {}, column '{column}': {value} ({reason})", display_key(&b.values(*r, k))));
            }
        }
        Ok(true)
    })?;
    Ok(q)
}

// --- the command ---------------------------------------------------------------

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

/// A table's sync cursor: the watermark and key of the last row carried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cursor {
    // In the order the keys of a JSON object sort, as the text shows it.
    pub key: Json,
    pub watermark: Json,
}

impl Cursor {
    /// The cursor as the target records it: a typed watermark and the
    /// key's JSON text.
    pub fn of(recorded: Option<(Value, String)>) -> Option<Cursor> {
        recorded.map(|(w, k)| Cursor {
            key: serde_json::from_str::<Json>(&k).unwrap_or(Json::Null),
            watermark: w.to_json(),
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
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
        if rep.verdict == Verdict::Pass {
            ts.quality = quality(&p, wm, &source, o.max_keys)?;
            if ts.quality.failures() > 0 {
                rep.verdict = Verdict::Fail;
            }
        }
        plans.push((t, p, before, wm, source_cols, evolving));
        rep.tables.push(ts);
    }
    if rep.verdict == Verdict::Fail {
        return Ok(rep);
    }
    rep.ran = true;
    spec.check_target_columns(&target, &plans.iter().map(|(t, ..)| *t).collect::<Vec<_>>())?;

    // The lookback of each table: --lookback where it fits the table's
    // watermark kind, else the table's own. A flag that fits no table is
    // refused before anything is written.
    let mut lookbacks = Vec::new();
    let mut fits = false;
    for (t, ..) in &plans {
        let cursor = target.sync_cursor(&t.name)?;
        let lb = match (o.lookback, &cursor) {
            (Some(flag), Some((w, _))) if t.watermark.is_some() && lower_bound(w, flag).is_ok() => {
                fits = true;
                Some(flag.to_string())
            }
            // No cursor yet: nothing is behind it, any flag is moot.
            (Some(_), None) if t.watermark.is_some() => {
                fits = true;
                None
            }
            _ => t.lookback.clone(),
        };
        lookbacks.push(lb);
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
    for (i, (t, p, before, wm, source_cols, evolving)) in plans.iter().enumerate() {
        let ts = &mut rep.tables[i];
        if *evolving {
            target.write(|| {
                target.ensure_sync_tables()?;
                for c in &ts.drift.new {
                    let ty = source_cols
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
        // After --evolve added columns, every row already in the target
        // lacks them: this run carries the whole table again (the source's
        // row wins), so that the next one is clean. A table without a
        // watermark is always carried whole.
        let full = *evolving || wm.is_none();
        let mut run_p = (*p).clone();
        if full {
            run_p.on_change = crate::spec::OnChange::Update;
        }
        let lookback = lookbacks[i].clone();
        sync_table(
            &run_p,
            before,
            *wm,
            full,
            lookback.as_deref(),
            source_cols,
            &mut source,
            &mut target,
            o,
            ts,
        )?;
        if ts.conflict.is_some() || ts.late > 0 {
            rep.verdict = Verdict::Fail;
        }
    }
    Ok(rep)
}

#[allow(clippy::too_many_arguments, reason = "the one place a table is synced")]
fn sync_table(
    p: &Table,
    late_plan: &Table,
    wm: Option<usize>,
    full: bool,
    lookback: Option<&str>,
    source_cols: &[ColumnInfo],
    source: &mut Db,
    target: &mut Db,
    o: &Options<'_>,
    ts: &mut TableSync,
) -> Result<()> {
    let k = p.key_len;
    let cursor = target.sync_cursor(&p.name)?;
    ts.cursor_before = Cursor::of(cursor.clone());
    let cursor_key = match &cursor {
        Some((_, key)) => Some(key_from_json(&serde_json::from_str(key)?)?),
        None => None,
    };
    let lower = match (&cursor, lookback, wm) {
        (Some((w, _)), Some(lb), Some(_)) => {
            Some(lower_bound(w, lb).map_err(|e| e.context(format!("table '{}'", p.name)))?)
        }
        _ => None,
    };
    let at = match (&cursor, &cursor_key) {
        _ if wm.is_none() => None,
        (Some((w, _)), Some(key)) => Some((
            mark(w.as_cell())
                .map_err(|e| anyhow::anyhow!("the cursor of table '{}': {e}", p.name))?,
            key.clone(),
        )),
        _ => None,
    };
    // Whether a row is past the cursor, or inside the lookback window.
    let wanted = |w: Option<CellRef<'_>>, key: &dyn Fn() -> Row| -> bool {
        let Some(w) = w else { return true };
        let Some((cm, ck)) = &at else { return true };
        match mark(w) {
            Ok(m) if m > *cm => true,
            Ok(m) if m == *cm && key_cmp(&key(), ck) == Ordering::Greater => true,
            Ok(m) => lower.is_some_and(|lo| m >= lo),
            Err(_) => false,
        }
    };
    // Late rows are judged on the columns the target had before this run
    // (`late_plan`): a column --evolve just added is empty in every row.
    let mut late: Option<std::collections::HashSet<String>> = full.then(Default::default);
    if let (Some(_), Some(w)) = (&at, wm) {
        let behind = |c: CellRef<'_>, key: &dyn Fn() -> Row| wanted(Some(c), key);
        late_rows(
            late_plan,
            w,
            source,
            target,
            &behind,
            o.max_keys,
            ts,
            late.as_mut(),
        )?;
    }
    let (source, target): (&Db, &Db) = (source, target);
    // The engine works on the plan (evolved columns included).
    let engine = Engine::new(std::slice::from_ref(p), target, Side::Target);
    let s_sql = match wm {
        Some(w) => source.table_sql(&p.source_table, &p.source_names(), k, Some(w)),
        None => source.source_sql(p),
    };
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
        if let (Some((cw, ck)), Some(ckey)) = (&cursor, &cursor_key) {
            let behind = match watermark_cmp(&last, cw) {
                Some(Ordering::Less) => true,
                Some(Ordering::Equal) => {
                    key_cmp(&last_row[..k.min(last_row.len())], ckey) == Ordering::Less
                }
                _ => false,
            };
            if behind {
                last = cw.clone();
                last_key = ck.clone();
            }
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
    source.scan_blocks(&s_sql, None, reconcile::BLOCK_ROWS, |b| {
        let mut fwd = vec![CellRef::Null; p.columns.len()];
        for r in 0..b.rows() {
                        ts.rows_read += 1;
            let take = match &late {
                // A whole pass (after --evolve): every row but the late ones,
                // which stay reported, not carried.
                Some(late) => !late.contains(&key_json(&b.values(r, k)).to_string()),
                None => wanted(wm.map(|w| b.get(r, w)), &|| b.values(r, k)),
            };
            if !take {
                continue;
            }
            let key = b.values(r, k);
            if let canonical::Forwarded::Invalid(Note::Invalid(column, value, reason)) = canonical::forward_row(p, &b, r, &mut fwd) {
                failure = Some(anyhow::anyhow!("table '{}', key {}, column '{column}': {value} ({reason}); the source changed during the sync", p.name, display_key(&key)));
                return Ok(false);
            }
                        let row: Row = fwd.iter().map(CellRef::to_value).collect();
            ts.candidates += 1;
            let rule = match wm {
                Some(w) => Rule::Watermark(w),
                None => Rule::Plain,
            };
            pending.push(Change { table: 0, key, rule, after: Some(row), tag: ts.rows_read as i64 });
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

/// Rows at or below the cursor (and outside the lookback window) that the
/// target does not hold as the source has them now: late. A key-ordered merge
/// of source and target, each read on its own thread, as reconcile does.
#[allow(
    clippy::too_many_arguments,
    reason = "the late check's inputs, one by one"
)]
fn late_rows(
    p: &Table,
    wm: usize,
    source: &mut Db,
    target: &mut Db,
    wanted: &(dyn Fn(CellRef<'_>, &dyn Fn() -> Row) -> bool + Sync),
    max: usize,
    ts: &mut TableSync,
    mut all: Option<&mut std::collections::HashSet<String>>,
) -> Result<()> {
    let k = p.key_len;
    let width = p.columns.len();
    let s_sql = source.source_sql(p);
    let t_sql = target.target_sql(p);
    std::thread::scope(|scope| -> Result<()> {
        let (s_rx, s_h) = reconcile::reader(source, s_sql, |b| b, scope);
        let (t_rx, t_h) = reconcile::reader(target, t_sql, |b| b, scope);
        let mut t: reconcile::Cursor<Block> = reconcile::Cursor::new(t_rx, "target");
        reconcile::merge_join(p, &s_rx, &mut t, |met| {
            let reconcile::Met::Source {
                block: sb,
                row: sr,
                fwd,
                forwarded,
                target,
            } = met
            else {
                return Ok(());
            };
            if wanted(sb.get(sr, wm), &|| sb.values(sr, k)) {
                return Ok(());
            }
            if let canonical::Forwarded::Invalid(_) = forwarded {
                return Ok(()); // the quality checks report it
            }
            let held = target
                .map(|(tb, tr)| (0..width).all(|c| reconcile::cells_equal(fwd[c], tb.get(tr, c))));
            if held != Some(true) {
                match held {
                    None => ts.late_missing += 1,
                    Some(_) => ts.late_changed += 1,
                }
                ts.late += 1;
                if let Some(all) = all.as_deref_mut() {
                    all.insert(key_json(&sb.values(sr, k)).to_string());
                }
                if ts.late_keys.len() < max {
                    ts.late_keys.push(key_json(&sb.values(sr, k)));
                }
            }
            Ok(())
        })?;
        drop(t);
        s_h.join()
            .map_err(|_| anyhow::anyhow!("source reader panicked"))??;
        t_h.join()
            .map_err(|_| anyhow::anyhow!("target reader panicked"))??;
        Ok(())
    })
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

/// The gate's view of a synced table: its quality now and every sync batch
/// committed so far (provenance).
#[derive(Debug, Serialize)]
pub struct Provenance {
    pub table: String,
    pub quality_failures: u64,
    pub examples: Vec<String>,
    pub batches: Vec<CommittedBatch>,
}

/// A sync batch as the target recorded it.
#[derive(Debug, Serialize)]
pub struct CommittedBatch {
    pub batch: i64,
    pub rows: i64,
    pub changed: i64,
    pub first_watermark: Json,
    pub last_watermark: Json,
    pub committed_at: String,
}

pub fn provenance(spec: &Spec, source: &Db, target: &Db, max: usize) -> Result<Vec<Provenance>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        let Some(wm) = t.watermark else { continue };
        let q = quality(t, Some(wm), source, max)?;
        let batches = target
            .sync_batches(&t.name)?
            .into_iter()
            .map(
                |(batch, rows, changed, first, last, committed_at)| CommittedBatch {
                    batch,
                    rows,
                    changed,
                    first_watermark: first.to_json(),
                    last_watermark: last.to_json(),
                    committed_at,
                },
            )
            .collect();
        out.push(Provenance {
            table: t.name.clone(),
            quality_failures: q.failures(),
            examples: q.examples,
            batches,
        });
    }
    Ok(out)
}
