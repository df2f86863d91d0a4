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
use crate::watermark::{Mark, Shape, lower_bound, mark, shape};

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

/// Where a sync starts in a table: the cursor (the watermark and key of the
/// last row carried) and the lookback window behind it.
struct Position {
    at: (Mark, Row),
    lower: Option<Mark>,
}

impl Position {
    /// The position of a table with a watermark and a cursor; `None` when
    /// every row is wanted (no cursor yet).
    fn of(
        table: &Table,
        cursor: &Option<(Value, String)>,
        lookback: Option<&str>,
    ) -> Result<Option<Position>> {
        let Some((w, key)) = cursor else {
            return Ok(None);
        };
        let key = key_from_json(&serde_json::from_str(key)?)?;
        let at = mark(w.as_cell())
            .map_err(|e| anyhow::anyhow!("the cursor of table '{}': {e}", table.name))?;
        let lower = match lookback {
            Some(lb) => {
                Some(lower_bound(w, lb).map_err(|e| e.context(format!("table '{}'", table.name)))?)
            }
            None => None,
        };
        Ok(Some(Position {
            at: (at, key),
            lower,
        }))
    }

    /// Where a row whose watermark reads as `m` stands against the cursor,
    /// in `(watermark, key)` order.
    fn cmp(&self, m: Mark, key: &dyn Fn() -> Row) -> Ordering {
        let (cm, ck) = &self.at;
        m.cmp(cm).then_with(|| key_cmp(&key(), ck))
    }

    /// Whether a row whose watermark reads as `m` is past the cursor, or
    /// inside the lookback window.
    fn wants(&self, m: Mark, key: &dyn Fn() -> Row) -> bool {
        self.cmp(m, key) == Ordering::Greater || self.lower.is_some_and(|lo| m >= lo)
    }
}

/// What one key-ordered pass over a source table found: its quality and,
/// when a cursor stands in it, the late rows and where the rows past the
/// cursor start.
#[derive(Default)]
struct Survey {
    quality: Quality,
    /// The shape every watermark has (the first one's).
    shape: Option<Shape>,
    /// Rows past the cursor or inside the lookback window, and the least of
    /// their watermarks in the engines' order (one shape: the typed order).
    wanted: u64,
    from: Option<Value>,
    late: u64,
    late_missing: u64,
    late_changed: u64,
    late_keys: Vec<Json>,
    /// Every late key, when the sync carries the whole table and must leave
    /// them out.
    all_late: Option<std::collections::HashSet<String>>,
}

impl Survey {
    /// Looks at source row `r` of `b`: its quality, then whether it is
    /// carried or, behind the cursor, held by the target (read beside the
    /// source under `target`, judged on the first `late_width` columns).
    #[allow(
        clippy::too_many_arguments,
        reason = "one row of the pass and what it is judged against"
    )]
    fn row<'a>(
        &mut self,
        p: &'a Table,
        wm: Option<usize>,
        pos: Option<&Position>,
        b: &'a Block,
        r: usize,
        prev: Option<&[Value]>,
        fwd: &mut [CellRef<'a>],
        target: Option<(&mut reconcile::Cursor<Block>, usize)>,
        max: usize,
    ) -> Result<()> {
        let k = p.key_len;
        let q = &mut self.quality;
        q.rows += 1;
        // Keys are built only for a finding, never per row.
        let key = || display_key(&b.values(r, k));
        let order = reconcile::order_after(b, r, prev, k);
        if order == Some(Ordering::Greater) {
            return Err(anyhow::Error::new(crate::db::MaybeDamage(format!(
                "source table '{}' returned key {} out of order: the key column sorts with a collation other than BINARY; sync needs binary key order",
                p.source_table,
                key()
            ))));
        }
        let null_key = (0..k).any(|c| b.get(r, c) == CellRef::Null);
        let dup = order == Some(Ordering::Equal);
        if null_key {
            q.null_keys += 1;
            q.note(max, format!("key {}: a key column is NULL", key()));
        } else if dup {
            q.duplicate_keys += 1;
            q.note(max, format!("key {}: appears twice in the snapshot", key()));
        }
        let mut mark_of = None;
        if let Some(wm) = wm {
            let w = b.get(r, wm);
            match mark(w) {
                Err(e) => {
                    q.bad_watermarks += 1;
                    q.note(max, format!("key {}: {e}", key()));
                }
                Ok(m) => match &self.shape {
                    None => {
                        self.shape = shape(w);
                        mark_of = Some(m);
                    }
                    Some(s) if s.fits(w) => mark_of = Some(m),
                    _ => {
                        q.bad_watermarks += 1;
                        q.note(max, format!("key {}: watermark {} is not of the shape of the others (mixed widths or kinds)", key(), w.to_value()));
                    }
                },
            }
        }
        let invalid = if let canonical::Forwarded::Invalid(Note::Invalid(column, value, reason)) =
            canonical::forward_row(p, b, r, fwd)
        {
            // A NULL key is counted as such above.
            if !null_key {
                q.invalid += 1;
                q.note(
                    max,
                    format!("key {}, column '{column}': {value} ({reason})", key()),
                );
            }
            true
        } else {
            false
        };
        // A row the quality checks refuse is neither carried nor late.
        let (Some(wm), Some(m)) = (wm, mark_of) else {
            return Ok(());
        };
        if null_key || dup || invalid {
            return Ok(());
        }
        if pos.is_none_or(|pos| pos.wants(m, &|| b.values(r, k))) {
            self.wanted += 1;
            let w = b.get(r, wm);
            if self
                .from
                .as_ref()
                .is_none_or(|f| w.sql_cmp(&f.as_cell()) == Ordering::Less)
            {
                self.from = Some(w.to_value());
            }
            return Ok(());
        }
        let Some((t, width)) = target else {
            return Ok(());
        };
        // The target rows before this key are not the source's business here.
        let held = match t.seek(b, r, k, &p.target_table, |_, _| Ok(()))? {
            Ordering::Equal => t
                .current()
                .map(|(tb, tr)| (0..width).all(|c| reconcile::cells_equal(fwd[c], tb.get(tr, c)))),
            _ => None,
        };
        if held != Some(true) {
            match held {
                None => self.late_missing += 1,
                Some(_) => self.late_changed += 1,
            }
            self.late += 1;
            let json = key_json(&b.values(r, k));
            if let Some(all) = self.all_late.as_mut() {
                all.insert(json.to_string());
            }
            if self.late_keys.len() < max {
                self.late_keys.push(json);
            }
        }
        Ok(())
    }

    /// The pass over `source`. With a position, `beside` is the target and
    /// the plan its rows are judged on (the columns it had before this run),
    /// read on its own thread.
    fn run(
        p: &Table,
        wm: Option<usize>,
        pos: Option<&Position>,
        whole: bool,
        source: &mut Db,
        beside: Option<(&mut Db, &Table)>,
        max: usize,
    ) -> Result<Survey> {
        let mut s = Survey {
            all_late: whole.then(Default::default),
            ..Default::default()
        };
        let k = p.key_len;
        let s_sql = source.source_sql(p);
        let beside = beside.filter(|_| pos.is_some());
        std::thread::scope(|scope| -> Result<()> {
            let (s_rx, s_h) = reconcile::reader(source, s_sql, |b| b, scope);
            let (mut t, t_h) = match beside {
                Some((target, late_plan)) => {
                    let sql = target.target_sql(late_plan);
                    let width = late_plan.columns.len();
                    let (rx, h) = reconcile::reader(target, sql, |b| b, scope);
                    (Some((reconcile::Cursor::new(rx, "target"), width)), Some(h))
                }
                None => (None, None),
            };
            let mut prev: Option<Row> = None;
            let walked = (|| -> Result<()> {
                while let Ok(b) = s_rx.recv() {
                    let mut fwd = vec![CellRef::Null; p.columns.len()];
                    for r in 0..b.rows() {
                        s.row(
                            p,
                            wm,
                            pos,
                            &b,
                            r,
                            prev.as_deref(),
                            &mut fwd,
                            t.as_mut().map(|(t, width)| (t, *width)),
                            max,
                        )?;
                    }
                    if b.rows() > 0 {
                        prev = Some(b.values(b.rows() - 1, k));
                    }
                }
                Ok(())
            })();
            // The readers stop when their channels close.
            drop(s_rx);
            drop(t);
            let s_done = reconcile::joined(s_h, "source");
            let t_done = t_h.map_or(Ok(()), |h| reconcile::joined(h, "target"));
            walked?;
            s_done?;
            t_done
        })?;
        Ok(s)
    }
}

/// Reads the whole source once in key order: keys present and unique,
/// every watermark typed and of one shape, every row carried by the forward
/// transform. The gate's view of a synced table.
fn quality(table: &Table, wm: Option<usize>, source: &mut Db, max: usize) -> Result<Quality> {
    Ok(Survey::run(table, wm, None, false, source, None, max)?.quality)
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

pub fn provenance(
    spec: &Spec,
    source: &mut Db,
    target: &Db,
    max: usize,
) -> Result<Vec<Provenance>> {
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
