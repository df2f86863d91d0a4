//! What sync checks in a source table before it writes anything: how the
//! table drifted from the spec and from the last sync ([`drift`]), and one
//! key-ordered pass ([`Survey`]) that runs the quality checks (keys present
//! and unique, watermarks typed and of one shape, every row carried by the
//! forward transform) and, with the target read beside it, finds the rows
//! behind the cursor the target does not hold (late rows) and the least
//! watermark past it. The gate runs the same quality checks
//! ([`quality`]) on every synced table.

use crate::db::control::progress::Cursor as Recorded;
use std::cmp::Ordering;
use std::collections::BTreeSet;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value as Json;

use crate::canonical::{self, Note};
use crate::db::{ColumnInfo, Db, Progress};
use crate::reconcile;
use crate::spec::Table;
use crate::value::{Block, CellRef, Row, Value, display_key, key_cmp, key_from_json, key_json};
use crate::watermark::{Mark, Shape, declared_shape, lower_bound, mark, shape};

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

pub fn drift(table: &Table, source_cols: &[ColumnInfo], target: &Progress<'_>) -> Result<Drift> {
    let evolved: BTreeSet<String> = target
        .evolved_columns(&table.name)?
        .into_iter()
        .map(|e| e.source_column)
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
    for was in target.recorded_source_schema(&table.name)? {
        if let Some(now) = source_cols.iter().find(|c| c.name == was.name)
            && !now.decl_type.eq_ignore_ascii_case(&was.decl_type)
        {
            d.retyped.push(format!(
                "{}: {} → {}",
                was.name, was.decl_type, now.decl_type
            ));
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

/// A table's watermark column: where it is in the spec's columns, and the
/// shape its declared type gives its watermarks (none: the first read sets
/// it).
#[derive(Clone, Debug)]
pub(crate) struct WatermarkColumn {
    pub(crate) index: usize,
    pub(crate) shape: Option<Shape>,
}

impl WatermarkColumn {
    /// The watermark column of `table`, typed as `source` declares it
    /// (its columns `source_cols`) where the engine orders it as its type.
    pub(crate) fn of(
        table: &Table,
        source: &Db,
        source_cols: &[ColumnInfo],
    ) -> Option<WatermarkColumn> {
        let index = table.watermark?;
        let name = &table.columns.get(index)?.source;
        let shape = source_cols
            .iter()
            .find(|c| &c.name == name)
            .filter(|_| source.engine().capabilities.typed_times)
            .and_then(|c| declared_shape(&c.kind));
        Some(WatermarkColumn { index, shape })
    }
}

/// Where a sync starts in a table: the cursor (the watermark and key of the
/// last row carried) and the lookback window behind it.
pub(crate) struct Position {
    pub(crate) at: (Mark, Row),
    pub(crate) lower: Option<Mark>,
}

impl Position {
    /// The position of a table with a watermark and a cursor; `None` when
    /// every row is wanted (no cursor yet).
    pub(crate) fn of(
        table: &Table,
        cursor: &Option<Recorded>,
        lookback: Option<&str>,
    ) -> Result<Option<Position>> {
        let Some(Recorded {
            last_watermark: w,
            last_key,
        }) = cursor
        else {
            return Ok(None);
        };
        let key = key_from_json(&serde_json::from_str(last_key)?)?;
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
    pub(crate) fn cmp(&self, m: Mark, key: &dyn Fn() -> Row) -> Ordering {
        let (cm, ck) = &self.at;
        m.cmp(cm).then_with(|| key_cmp(&key(), ck))
    }

    /// Whether a row whose watermark reads as `m` is past the cursor, or
    /// inside the lookback window.
    pub(crate) fn wants(&self, m: Mark, key: &dyn Fn() -> Row) -> bool {
        self.cmp(m, key) == Ordering::Greater || self.lower.is_some_and(|lo| m >= lo)
    }
}

/// What one key-ordered pass over a source table found: its quality and,
/// when a cursor stands in it, the late rows and where the rows past the
/// cursor start.
#[derive(Default)]
pub(crate) struct Survey {
    pub(crate) quality: Quality,
    /// The shape every watermark has (the first one's).
    pub(crate) shape: Option<Shape>,
    /// Rows past the cursor or inside the lookback window, and the least of
    /// their watermarks, as read and as a typed value (the engines' order).
    pub(crate) wanted: u64,
    pub(crate) from: Option<(Mark, Value)>,
    pub(crate) late: u64,
    pub(crate) late_missing: u64,
    pub(crate) late_changed: u64,
    pub(crate) late_keys: Vec<Json>,
    /// Every late key, when the sync carries the whole table and must leave
    /// them out.
    pub(crate) all_late: Option<std::collections::HashSet<String>>,
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
        let mark_of = wm.and_then(|wm| self.watermark(b.get(r, wm), max, &key));
        let q = &mut self.quality;
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
            if self.from.as_ref().is_none_or(|(f, _)| m < *f) {
                self.from = Some((m, b.get(r, wm).to_value()));
            }
            return Ok(());
        }
        let Some(target) = target else {
            return Ok(());
        };
        self.behind(p, b, r, fwd, target, max)
    }

    /// A watermark as a typed value of the shape of the others; else a
    /// finding, and `None`.
    fn watermark(&mut self, w: CellRef<'_>, max: usize, key: &dyn Fn() -> String) -> Option<Mark> {
        let q = &mut self.quality;
        let mut mark_of = None;
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
        mark_of
    }

    /// A row at or behind the cursor: late unless the target (read beside
    /// the source, judged on its first `width` columns) holds it as it is.
    fn behind(
        &mut self,
        p: &Table,
        b: &Block,
        r: usize,
        fwd: &[CellRef<'_>],
        (t, width): (&mut reconcile::Cursor<Block>, usize),
        max: usize,
    ) -> Result<()> {
        let k = p.key_len;
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
    pub(crate) fn run(
        p: &Table,
        wm: Option<&WatermarkColumn>,
        pos: Option<&Position>,
        whole: bool,
        source: &mut Db,
        beside: Option<(&mut Db, &Table)>,
        max: usize,
    ) -> Result<Survey> {
        let mut s = Survey {
            all_late: whole.then(Default::default),
            shape: wm.and_then(|w| w.shape.clone()),
            ..Default::default()
        };
        let wm = wm.map(|w| w.index);
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
pub fn quality(table: &Table, source: &mut Db, max: usize) -> Result<Quality> {
    let cols = source.catalogue().table_columns(&table.source_table)?;
    let wm = WatermarkColumn::of(table, source, &cols);
    Ok(Survey::run(table, wm.as_ref(), None, false, source, None, max)?.quality)
}
