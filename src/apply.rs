//! The apply engine: the one place that writes rows, used by load and replay.
//!
//! A batch is a list of [`Change`]s, each a compare-and-set on one key: "the
//! row is `before` (or absent), make it `after` (or absent)". The whole batch
//! and its checkpoint (the caller's bookkeeping: applied sequence numbers, a
//! load cursor) commit in one `BEGIN IMMEDIATE` transaction; a conflict or
//! any error rolls all of it back, so every table is exactly as before.
//!
//! Rows in a change are canonical (target form). Applied to the source they
//! are reverse-transformed; the source's current row is compared in canonical
//! form, so a value-equal but non-canonical text (`12.5`) is not a conflict.
//!
//! A change whose `after` is already in place counts as done, never as a
//! conflict: that is what makes a rerun after a crash apply nothing twice.

use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::{Db, TableSql};
use crate::reconcile::canonical;
use crate::spec::{Side, Spec, Table};
use crate::value::{Row, Value, key_cmp, key_json};

/// One compare-and-set on one key.
#[derive(Clone, Debug)]
pub struct Change {
    /// Index of the table in the spec.
    pub table: usize,
    /// The row expected to be in place now (canonical); `None`: no row.
    pub before: Option<Row>,
    /// The row to leave in place (canonical); `None`: no row.
    pub after: Option<Row>,
    /// Where the change came from, for reports (a journal `seq`, a row number).
    pub tag: i64,
}

/// A change that the database's current state does not allow.
#[derive(Clone, Debug, Serialize)]
pub struct Conflict {
    pub tag: i64,
    pub table: String,
    pub key: Json,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    pub reason: String,
    /// The row the change expected to find (canonical).
    pub expected: Option<Json>,
    /// The row that is there (canonical).
    pub found: Option<Json>,
    /// The row the change wanted to leave (canonical).
    pub wanted: Option<Json>,
}

/// What a committed batch did.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Applied {
    /// Changes written.
    pub written: u64,
    /// Changes whose `after` was already in place.
    pub already: u64,
}

/// A batch either committed or was refused whole because of a conflict.
pub enum BatchOutcome {
    Committed(Applied),
    Conflict(Box<Conflict>),
}

/// Crash points for drills: `CUTOVER_FAULT=mid-batch|before-commit|after-commit`
/// makes the process exit at once with code 73, without cleanup, at that
/// point of the first batch that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    MidBatch,
    BeforeCommit,
    AfterCommit,
}

pub const FAULT_EXIT: i32 = 73;

fn fault() -> Option<Fault> {
    static F: OnceLock<Option<Fault>> = OnceLock::new();
    *F.get_or_init(|| match std::env::var("CUTOVER_FAULT").ok().as_deref() {
        Some("mid-batch") => Some(Fault::MidBatch),
        Some("before-commit") => Some(Fault::BeforeCommit),
        Some("after-commit") => Some(Fault::AfterCommit),
        _ => None,
    })
}

fn crash_at(point: Fault) {
    if fault() == Some(point) {
        // No unwinding, no destructors, no rollback: what a kill -9 leaves.
        std::process::exit(FAULT_EXIT);
    }
}

/// The engine bound to one database of the migration.
pub struct Engine<'a> {
    spec: &'a Spec,
    db: &'a Db,
    side: Side,
    sql: Vec<TableSql>,
}

impl<'a> Engine<'a> {
    pub fn new(spec: &'a Spec, db: &'a Db, side: Side) -> Engine<'a> {
        let sql = spec
            .tables
            .iter()
            .map(|t| match side {
                Side::Source => TableSql::new(&t.source_table, &t.source_names(), t.key_len),
                Side::Target => TableSql::new(&t.target_table, &t.target_names(), t.key_len),
            })
            .collect();
        Engine {
            spec,
            db,
            side,
            sql,
        }
    }

    pub fn db(&self) -> &Db {
        self.db
    }

    /// Applies `changes` and then `checkpoint`, all in one transaction.
    pub fn apply_batch(
        &self,
        changes: &[Change],
        checkpoint: impl FnOnce(&Db) -> Result<()>,
    ) -> Result<BatchOutcome> {
        self.db.begin_immediate()?;
        let result = self.apply_inside(changes, checkpoint);
        match result {
            Ok(BatchOutcome::Committed(a)) => {
                crash_at(Fault::BeforeCommit);
                if let Err(e) = self.db.commit() {
                    self.db.rollback();
                    return Err(e.context("the batch was rolled back; nothing of it was applied"));
                }
                crash_at(Fault::AfterCommit);
                Ok(BatchOutcome::Committed(a))
            }
            Ok(conflict) => {
                self.db.rollback();
                Ok(conflict)
            }
            Err(e) => {
                self.db.rollback();
                Err(e.context(format!(
                    "the batch was rolled back; {} is as it was before it",
                    self.db.path().display()
                )))
            }
        }
    }

    fn apply_inside(
        &self,
        changes: &[Change],
        checkpoint: impl FnOnce(&Db) -> Result<()>,
    ) -> Result<BatchOutcome> {
        let mut done = Applied::default();
        for (i, c) in changes.iter().enumerate() {
            match self.apply_one(c)? {
                Ok(true) => done.written += 1,
                Ok(false) => done.already += 1,
                Err(conflict) => return Ok(BatchOutcome::Conflict(conflict)),
            }
            if i == 0 {
                crash_at(Fault::MidBatch);
            }
        }
        checkpoint(self.db)?;
        Ok(BatchOutcome::Committed(done))
    }

    /// `Ok(true)` written, `Ok(false)` already in place, `Err` a conflict.
    fn apply_one(&self, c: &Change) -> Result<Result<bool, Box<Conflict>>> {
        let table = &self.spec.tables[c.table];
        let sql = &self.sql[c.table];
        let k = table.key_len;
        let Some(any) = c.before.as_ref().or(c.after.as_ref()) else {
            bail!(
                "change {} of table '{}' has neither a before nor an after row",
                c.tag,
                table.name
            );
        };
        let before_key = c.before.as_ref().map(|r| &r[..k]);
        let after_key = c.after.as_ref().map(|r| &r[..k]);
        let here_key = before_key.unwrap_or(&any[..k]);
        let moves = matches!((before_key, after_key), (Some(b), Some(a)) if key_cmp(b, a).is_ne());

        let conflict = |reason: String, column: Option<String>, found: Option<&Row>| {
            Box::new(Conflict {
                tag: c.tag,
                table: table.name.clone(),
                key: key_json(here_key),
                column,
                reason,
                expected: c.before.as_ref().map(|r| row_json(table, r)),
                found: found.map(|r| row_json(table, r)),
                wanted: c.after.as_ref().map(|r| row_json(table, r)),
            })
        };

        let here = match self.current(table, sql, here_key)? {
            Ok(r) => r,
            Err((column, why)) => return Ok(Err(conflict(why, Some(column), None))),
        };
        let there = if moves {
            match self.current(table, sql, &any_after_key(c, k))? {
                Ok(r) => r,
                Err((column, why)) => return Ok(Err(conflict(why, Some(column), None))),
            }
        } else {
            None
        };

        let already = if moves {
            here.is_none() && there == c.after
        } else {
            here == c.after
        };
        if already {
            return Ok(Ok(false));
        }
        let as_expected = here == c.before && (!moves || there.is_none());
        if !as_expected {
            let reason = if moves && there.is_some() && here == c.before {
                "the key it moves to is already taken".to_string()
            } else {
                match (&c.before, &here) {
                    (None, Some(_)) => {
                        "a row with this key exists, but the change expected none".to_string()
                    }
                    (Some(_), None) => "the row is gone, but the change expected it".to_string(),
                    _ => "the row differs from the one the change expected".to_string(),
                }
            };
            let column = first_difference(table, c.before.as_ref(), here.as_ref());
            let found = if moves && here == c.before {
                there.as_ref()
            } else {
                here.as_ref()
            };
            return Ok(Err(conflict(reason, column, found)));
        }

        let written = match &c.after {
            Some(after) => match self.stored_form(table, after) {
                Ok(r) => r,
                Err((column, why)) => return Ok(Err(conflict(why, Some(column), here.as_ref()))),
            },
            None => Vec::new(),
        };
        let ctx = || {
            format!(
                "writing key {} of table '{}' in {}",
                crate::value::display_key(here_key),
                table.name,
                self.db.path().display()
            )
        };
        match (&c.before, &c.after) {
            (None, Some(_)) => self.db.insert_row(sql, &written).with_context(ctx)?,
            (Some(_), Some(_)) => {
                self.db
                    .update_row(sql, here_key, &written)
                    .with_context(ctx)?;
            }
            (Some(_), None) => {
                self.db.delete_row(sql, here_key).with_context(ctx)?;
            }
            (None, None) => unreachable!("checked above"),
        }
        Ok(Ok(true))
    }

    /// The row under `key` in canonical form; `Err((column, why))` when the
    /// stored row cannot be read canonically.
    fn current(
        &self,
        table: &Table,
        sql: &TableSql,
        key: &[Value],
    ) -> Result<Result<Option<Row>, (String, String)>> {
        let Some(row) = self.db.get_row(sql, key)? else {
            return Ok(Ok(None));
        };
        Ok(match self.side {
            Side::Target => Ok(Some(row)),
            Side::Source => match canonical(table, row) {
                Ok(r) => Ok(Some(r)),
                Err((_, column, value, why)) => Err((
                    column,
                    format!("the source holds {value}, which cannot be read: {why}"),
                )),
            },
        })
    }

    /// The canonical row as this side stores it, after the column checks.
    fn stored_form(&self, table: &Table, row: &Row) -> Result<Row, (String, String)> {
        for (col, v) in table.columns.iter().zip(row) {
            col.checks
                .check(v)
                .map_err(|why| (col.target.clone(), why))?;
        }
        match self.side {
            Side::Target => Ok(row.clone()),
            Side::Source => table
                .columns
                .iter()
                .zip(row)
                .map(|(col, v)| {
                    col.transform.reverse(v).map_err(|r| {
                        (
                            col.target.clone(),
                            format!(
                                "{v} cannot be carried back to source column '{}': {r}",
                                col.source
                            ),
                        )
                    })
                })
                .collect(),
        }
    }
}

fn any_after_key(c: &Change, k: usize) -> Row {
    c.after
        .as_ref()
        .map(|r| r[..k].to_vec())
        .unwrap_or_default()
}

fn first_difference(table: &Table, a: Option<&Row>, b: Option<&Row>) -> Option<String> {
    let (a, b) = (a?, b?);
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .map(|i| table.columns[i].target.clone())
}

/// A canonical row as a JSON object keyed by target column names.
pub fn row_json(table: &Table, row: &[Value]) -> Json {
    Json::Object(
        table
            .columns
            .iter()
            .zip(row)
            .map(|(c, v)| (c.target.clone(), v.to_json()))
            .collect(),
    )
}

/// A canonical row from a JSON object keyed by target column names. Every
/// mapped column must be present and no other.
pub fn row_from_json(table: &Table, json: &Json) -> Result<Row> {
    let Json::Object(obj) = json else {
        bail!("a row must be a JSON object, found {json}");
    };
    for name in obj.keys() {
        if !table.columns.iter().any(|c| c.target == *name) {
            bail!(
                "column '{name}' is not a mapped target column of table '{}'",
                table.name
            );
        }
    }
    table
        .columns
        .iter()
        .map(|c| {
            let v = obj.get(&c.target).with_context(|| {
                format!("column '{}' of table '{}' is missing", c.target, table.name)
            })?;
            Value::from_json(v).with_context(|| format!("column '{}'", c.target))
        })
        .collect()
}
