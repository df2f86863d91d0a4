//! Reconcile: a streaming, key-ordered merge of the source's canonical view
//! (its rows forward-transformed) with the target's (its rows as stored).
//!
//! Each side is read on its own thread and handed over in chunks through a
//! bounded channel; the merge keeps counters, control totals and the first
//! `max_diffs` differences, so memory does not grow with the table.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, sync_channel};

use anyhow::{Result, anyhow, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::{Db, TableSql};
use crate::spec::{Spec, Table};
use crate::value::{Row, Value, key_cmp, key_json};

const CHUNK: usize = 1024;
const CHANNEL_CHUNKS: usize = 4;

/// What kind of difference a [`Diff`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// Both sides hold the key; a column differs.
    Changed,
    /// The source holds the key; the target does not.
    Missing,
    /// The target holds a key the source does not.
    Extra,
    /// The source row cannot be carried across (bad value, failed check,
    /// duplicate key).
    Invalid,
    /// Accepted, value-equal, but not the text reverse would write back.
    NonCanonical,
}

/// One kept difference.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    pub table: String,
    pub key: Json,
    pub kind: DiffKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<Json>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Display forms, storage class visible (`'1250'` vs `1250`).
    #[serde(skip)]
    pub shown: (String, String),
}

/// The sum of one money column, per currency when the table names one.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Total {
    pub column: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    #[serde(serialize_with = "ser_i128")]
    pub source: i128,
    #[serde(serialize_with = "ser_i128")]
    pub target: i128,
}

fn ser_i128<S: serde::Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
    // A JSON number where it fits, exact text where it does not.
    match i64::try_from(*v) {
        Ok(i) => s.serialize_i64(i),
        Err(_) => s.serialize_str(&v.to_string()),
    }
}

/// Per-table counts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TableReport {
    pub name: String,
    pub source_rows: u64,
    pub target_rows: u64,
    pub matched: u64,
    pub changed: u64,
    pub missing: u64,
    pub extra: u64,
    pub invalid: u64,
    pub non_canonical: u64,
    pub totals: Vec<Total>,
}

impl TableReport {
    pub fn clean(&self) -> bool {
        self.changed == 0 && self.missing == 0 && self.extra == 0 && self.invalid == 0
    }
}

/// The result of reconciling every table of a spec.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Reconciliation {
    pub tables: Vec<TableReport>,
    pub diffs: Vec<Diff>,
    /// Differences found in all, of which `diffs` keeps the first few.
    pub diffs_found: u64,
    pub diffs_kept_max: usize,
}

impl Reconciliation {
    pub fn clean(&self) -> bool {
        self.tables.iter().all(TableReport::clean)
    }

    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.target_rows).sum()
    }

    /// Sum of every money column of every table, on the target side.
    pub fn target_total(&self) -> i128 {
        self.tables
            .iter()
            .flat_map(|t| &t.totals)
            .map(|t| t.target)
            .sum()
    }

    pub fn source_total(&self) -> i128 {
        self.tables
            .iter()
            .flat_map(|t| &t.totals)
            .map(|t| t.source)
            .sum()
    }

    fn keep(&mut self, d: Diff) {
        self.diffs_found += 1;
        if self.diffs.len() < self.diffs_kept_max {
            self.diffs.push(d);
        }
    }
}

/// A source row in canonical form, or why it has none.
enum Canon {
    Row(Row),
    Invalid {
        key: Row,
        column: String,
        value: Value,
        reason: String,
    },
}

impl Canon {
    fn key(&self, key_len: usize) -> &[Value] {
        match self {
            Canon::Row(r) => &r[..key_len],
            Canon::Invalid { key, .. } => key,
        }
    }
}

/// Forward-transforms and checks one source row.
pub fn canonical(table: &Table, row: Row) -> Result<Row, (Row, String, Value, String)> {
    let mut out = Vec::with_capacity(row.len());
    for (col, v) in table.columns.iter().zip(row.iter()) {
        let fwd = match col.transform.forward(v) {
            Ok(f) => f,
            Err(r) => {
                return Err((
                    row[..table.key_len].to_vec(),
                    col.source.clone(),
                    v.clone(),
                    r.0,
                ));
            }
        };
        if let Err(why) = col.checks.check(&fwd) {
            return Err((
                row[..table.key_len].to_vec(),
                col.source.clone(),
                v.clone(),
                why,
            ));
        }
        out.push(fwd);
    }
    Ok(out)
}

/// Which source rows, if any, are value-equal but not canonical text.
fn non_canonical_column(table: &Table, row: &[Value]) -> Option<usize> {
    table
        .columns
        .iter()
        .zip(row)
        .position(|(c, v)| !c.transform.is_canonical(v))
}

/// Reconciles every table of the spec. Both connections are used from a
/// reader thread each; a transaction open on either (the rehearsal's) is the
/// view that is read.
pub fn reconcile(
    spec: &Spec,
    source: &mut Db,
    target: &mut Db,
    max_diffs: usize,
) -> Result<Reconciliation> {
    let mut rec = Reconciliation {
        diffs_kept_max: max_diffs,
        ..Default::default()
    };
    for table in &spec.tables {
        let report = reconcile_table(table, source, target, &mut rec)?;
        rec.tables.push(report);
    }
    Ok(rec)
}

fn reader<'scope, 'env, T: Send + 'scope>(
    db: &'scope mut Db,
    sql: TableSql,
    map: impl Fn(Row) -> T + Send + 'scope,
    scope: &'scope std::thread::Scope<'scope, 'env>,
) -> (
    Receiver<Vec<T>>,
    std::thread::ScopedJoinHandle<'scope, Result<()>>,
) {
    let (tx, rx) = sync_channel::<Vec<T>>(CHANNEL_CHUNKS);
    let h = scope.spawn(move || {
        let mut buf = Vec::with_capacity(CHUNK);
        db.scan(&sql, None, |row| {
            buf.push(map(row));
            if buf.len() == CHUNK {
                let full = std::mem::replace(&mut buf, Vec::with_capacity(CHUNK));
                // The merge hung up: it failed, and its error is the one to report.
                if tx.send(full).is_err() {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        if !buf.is_empty() {
            let _ = tx.send(buf);
        }
        Ok(())
    });
    (rx, h)
}

/// A stream of chunks read one item at a time, checking key order.
struct Side<T> {
    rx: Receiver<Vec<T>>,
    chunk: std::vec::IntoIter<T>,
}

impl<T> Side<T> {
    fn new(rx: Receiver<Vec<T>>) -> Self {
        Side {
            rx,
            chunk: Vec::new().into_iter(),
        }
    }
    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(x) = self.chunk.next() {
                return Some(x);
            }
            self.chunk = self.rx.recv().ok()?.into_iter();
        }
    }
}

fn reconcile_table(
    table: &Table,
    source: &mut Db,
    target: &mut Db,
    rec: &mut Reconciliation,
) -> Result<TableReport> {
    let s_sql = TableSql::new(&table.source_table, &table.source_names(), table.key_len);
    let t_sql = TableSql::new(&table.target_table, &table.target_names(), table.key_len);
    let money = table.money_columns();
    let mut report = TableReport {
        name: table.name.clone(),
        ..Default::default()
    };
    let mut totals: BTreeMap<(usize, Option<String>), (i128, i128)> = BTreeMap::new();
    let k = table.key_len;
    let currency_of = |row: &[Value]| -> Option<String> {
        table.currency.map(|c| match &row[c] {
            Value::Text(t) => t.clone(),
            other => other.to_string(),
        })
    };

    std::thread::scope(|scope| -> Result<()> {
        let (s_rx, s_h) = reader(
            source,
            s_sql,
            |row| {
                let nc = non_canonical_column(table, &row).map(|i| (i, row[i].clone()));
                let canon = match canonical(table, row) {
                    Ok(r) => Canon::Row(r),
                    Err((key, column, value, reason)) => Canon::Invalid {
                        key,
                        column,
                        value,
                        reason,
                    },
                };
                (canon, nc)
            },
            scope,
        );
        let (t_rx, t_h) = reader(target, t_sql, |row| row, scope);
        let mut s = Side::new(s_rx);
        let mut t = Side::new(t_rx);
        let mut s_head = s.next();
        let mut t_head = t.next();
        let mut s_prev: Option<Row> = None;
        let mut t_prev: Option<Row> = None;

        let diff = |kind,
                    key: &[Value],
                    column: Option<&str>,
                    exp: Option<&Value>,
                    act: Option<&Value>,
                    reason: Option<String>| Diff {
            table: table.name.clone(),
            key: key_json(key),
            kind,
            column: column.map(str::to_string),
            expected: exp.map(Value::to_json),
            actual: act.map(Value::to_json),
            reason,
            shown: (
                exp.map_or_else(String::new, Value::to_string),
                act.map_or_else(String::new, Value::to_string),
            ),
        };

        loop {
            let ord = match (&s_head, &t_head) {
                (None, None) => break,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some((sc, _)), Some(tr)) => key_cmp(sc.key(k), &tr[..k]),
            };
            if ord != Ordering::Greater {
                let (sc, nc) = s_head
                    .take()
                    .ok_or_else(|| anyhow!("merge lost its source row"))?;
                report.source_rows += 1;
                let key = sc.key(k).to_vec();
                check_order(&mut s_prev, &key, "source", &table.source_table)?;
                if let Some((i, v)) = nc {
                    report.non_canonical += 1;
                    let col = &table.columns[i];
                    let canon_text = col
                        .transform
                        .forward(&v)
                        .ok()
                        .and_then(|f| col.transform.reverse(&f).ok());
                    rec.keep(diff(
                        DiffKind::NonCanonical,
                        &key,
                        Some(&col.source),
                        canon_text.as_ref(),
                        Some(&v),
                        Some(
                            "value-equal but not canonical; replay would write the canonical text"
                                .into(),
                        ),
                    ));
                }
                match &sc {
                    Canon::Invalid {
                        column,
                        value,
                        reason,
                        ..
                    } => {
                        report.invalid += 1;
                        rec.keep(diff(
                            DiffKind::Invalid,
                            &key,
                            Some(column),
                            None,
                            Some(value),
                            Some(reason.clone()),
                        ));
                    }
                    Canon::Row(srow) => {
                        for &m in &money {
                            if let Value::Integer(i) = srow[m] {
                                totals.entry((m, currency_of(srow))).or_default().0 +=
                                    i128::from(i);
                            }
                        }
                    }
                }
                if ord == Ordering::Equal {
                    let trow = t_head
                        .take()
                        .ok_or_else(|| anyhow!("merge lost its target row"))?;
                    report.target_rows += 1;
                    check_order(&mut t_prev, &trow[..k], "target", &table.target_table)?;
                    add_target_totals(&money, &trow, currency_of(&trow), &mut totals);
                    if let Canon::Row(srow) = &sc {
                        let mut same = true;
                        for (i, (e, a)) in srow.iter().zip(&trow).enumerate().skip(k) {
                            if e != a {
                                same = false;
                                rec.keep(diff(
                                    DiffKind::Changed,
                                    &key,
                                    Some(&table.columns[i].target),
                                    Some(e),
                                    Some(a),
                                    None,
                                ));
                            }
                        }
                        if same {
                            report.matched += 1;
                        } else {
                            report.changed += 1;
                        }
                    }
                    t_head = t.next();
                } else if matches!(sc, Canon::Row(_)) {
                    report.missing += 1;
                    rec.keep(diff(DiffKind::Missing, &key, None, None, None, None));
                }
                s_head = s.next();
            } else {
                let trow = t_head
                    .take()
                    .ok_or_else(|| anyhow!("merge lost its target row"))?;
                report.target_rows += 1;
                check_order(&mut t_prev, &trow[..k], "target", &table.target_table)?;
                add_target_totals(&money, &trow, currency_of(&trow), &mut totals);
                report.extra += 1;
                rec.keep(diff(DiffKind::Extra, &trow[..k], None, None, None, None));
                t_head = t.next();
            }
        }
        drop(s);
        drop(t);
        s_h.join()
            .map_err(|_| anyhow!("source reader panicked"))??;
        t_h.join()
            .map_err(|_| anyhow!("target reader panicked"))??;
        Ok(())
    })?;

    for &m in &money {
        if !totals.keys().any(|(c, _)| *c == m) {
            totals.insert((m, None), (0, 0));
        }
    }
    report.totals = totals
        .into_iter()
        .map(|((c, currency), (s, t))| Total {
            column: table.columns[c].target.clone(),
            currency,
            source: s,
            target: t,
        })
        .collect();
    Ok(report)
}

fn add_target_totals(
    money: &[usize],
    row: &[Value],
    currency: Option<String>,
    totals: &mut BTreeMap<(usize, Option<String>), (i128, i128)>,
) {
    for &m in money {
        if let Value::Integer(i) = row[m] {
            totals.entry((m, currency.clone())).or_default().1 += i128::from(i);
        }
    }
}

/// Keys must arrive strictly increasing in SQLite's order; a repeat is a
/// duplicate key, a step back means the engine ordered differently than we
/// compare (a non-binary collation on the key), and the merge would lie.
fn check_order(prev: &mut Option<Row>, key: &[Value], side: &str, table: &str) -> Result<()> {
    if let Some(p) = prev {
        match key_cmp(p, key) {
            Ordering::Less => {}
            Ordering::Equal => bail!(
                "{side} table '{table}' holds two rows with key {}; the spec's key must be unique (add a unique index or fix the key)",
                crate::value::display_key(key)
            ),
            Ordering::Greater => bail!(
                "{side} table '{table}' returned key {} after {}: the key column sorts with a collation other than BINARY; reconcile needs binary key order",
                crate::value::display_key(key),
                crate::value::display_key(p)
            ),
        }
        p.clear();
        p.extend_from_slice(key);
    } else {
        *prev = Some(key.to_vec());
    }
    Ok(())
}
