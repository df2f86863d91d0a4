//! The one write every rule ends in: the row in the form this side stores
//! it, checked against what the column can hold, written (insert, update
//! or delete), a swallowed or refused write made the row's conflict, and
//! on the source the columns the spec does not carry kept across a delete
//! and a re-insert.

use anyhow::Result;
use serde_json::Value as Json;

use super::expect::Clocked;
use super::rows::{check_row, keep_class, reverse_column, row_json, same_recorded, source_form};
use super::{Applier, Change, Conflict, Effect, sql_key_names};
use crate::canonical::canonical;
use crate::db::{RowsExt, TableSql};
use crate::spec::{Side, Table};
use crate::transform::Transform;
use crate::value::{Row, Value, display_key, key_json};

/// The row stored under a key, as [`Applier::current`] reads it.
pub(super) enum Current {
    /// In canonical form; `None` when no row holds the key.
    Row(Option<Row>),
    /// The stored row cannot be read canonically: the column, and why.
    Unreadable { column: String, why: String },
}

impl Applier<'_> {
    /// Writes `after` where `here` is (insert, update, or delete).
    pub(super) fn write(
        &self,
        c: &Change,
        here: Option<&Row>,
        after: Option<&Row>,
    ) -> Result<Effect> {
        let table = &self.tables[c.table];
        let stored = match after {
            Some(a) => match self.stored_form(table, a, &c.unrecorded) {
                Ok(r) => Some(r),
                Err((column, why)) => {
                    return Ok(Effect::Conflict(self.conflict(
                        c,
                        why,
                        Some(column),
                        None,
                        here,
                    )));
                }
            },
            None => None,
        };
        if let Some(row) = &stored
            && let Some(mut conflict) = self.unfit(c, row)?
        {
            conflict.found = here.map(|r| row_json(table, r));
            return Ok(Effect::Conflict(conflict));
        }
        let ctx = || {
            format!(
                "writing key {} of table '{}' in {}",
                display_key(&c.key),
                table.name,
                self.db.location()
            )
        };
        // Columns the spec does not carry survive a delete and re-insert.
        let keeps = self.side == Side::Source && !table.ignore.is_empty();
        let key_text = || key_json(&c.key).to_string();
        if keeps && here.is_some() && after.is_none() {
            self.keep_ignored(table, c, &key_text())?;
        }
        let clocked = match &stored {
            Some(row) if !self.clocks[c.table].is_empty() => {
                match self.clock(c, c.table, here.is_none(), row)? {
                    Clocked::Set => true,
                    Clocked::Unset => false,
                    Clocked::Conflict(mut conflict) => {
                        conflict.found = here.map(|r| row_json(table, r));
                        return Ok(Effect::Conflict(conflict));
                    }
                }
            }
            _ => false,
        };
        let done = self.put(c, here, stored.as_ref());
        // An insert a rule sent elsewhere (into a partition of an
        // inheritance tree) reports no row, yet the table reads it back.
        let routed = |done: &Result<usize>| -> Result<bool> {
            Ok(matches!(done, Ok(0))
                && here.is_none()
                && stored.is_some()
                && matches!(self.current(table, c.table, &c.key, false)?, Current::Row(Some(r)) if same_recorded(Some(&r), after, &c.unrecorded)))
        };
        if clocked {
            self.db.side_effects().hold_clock(None)?;
        }
        let done = if routed(&done)? { Ok(1) } else { done };
        match done {
            // A write that changed no row (a trigger or rule of the
            // database that swallowed it) did not happen.
            Ok(0) => Ok(Effect::Conflict(self.swallowed(c, here))),
            Ok(_) => {
                if keeps
                    && here.is_none()
                    && let Some(row) = &stored
                {
                    self.restore_ignored(table, &row[..table.key_len], &key_text())?;
                }
                Ok(Effect::Written)
            }
            Err(e) => self
                .refused(c, e.context(ctx()), here)
                .map(Effect::Conflict),
        }
    }

    /// Runs the write: `stored` (the row as this side stores it, `None`
    /// to delete) where `here` is; the rows the statement changed.
    fn put(&self, c: &Change, here: Option<&Row>, stored: Option<&Row>) -> Result<usize> {
        let sql = &self.sql[c.table];
        let write = |sql: &TableSql, row: Option<&Row>| match (here, row) {
            (None, Some(row)) => self.db.rows().insert_row(sql, row),
            (Some(_), Some(row)) => self.db.rows().update_row(sql, &c.key, row),
            (Some(_), None) => self.db.rows().delete_row(sql, &c.key),
            (None, None) => Ok(1),
        };
        if c.unrecorded.is_empty() {
            return write(sql, stored);
        }
        // Only the columns the change carries are written: an update
        // leaves the others as they are, an insert to their defaults.
        let table = &self.tables[c.table];
        let mut partial = self.partial.borrow_mut();
        let sql = partial
            .entry((c.table, c.unrecorded.clone()))
            .or_insert_with(|| self.partial_sql(table, &c.unrecorded));
        let row = stored.map(|r| {
            r.iter()
                .enumerate()
                .filter(|(i, _)| !c.unrecorded.contains(i))
                .map(|(_, v)| v.clone())
                .collect::<Row>()
        });
        write(sql, row.as_ref())
    }

    /// A write that changed no row (a trigger or rule of the database that
    /// swallowed it) did not happen: the conflict that says so, naming what
    /// acts on the table.
    fn swallowed(&self, c: &Change, here: Option<&Row>) -> Box<Conflict> {
        let acting = self.acting.get(c.table).filter(|a| !a.is_empty());
        let by = match acting {
            Some(a) => format!("what acts on it there: {}", a.join(", ")),
            None => "a trigger or rule of the database swallowed it".to_string(),
        };
        self.conflict(
            c,
            format!(
                "{} took the write but changed no row ({by}); nothing of this batch was applied",
                self.db.location()
            ),
            None,
            None,
            here,
        )
    }

    /// The database refused the row of change `c` (say a UNIQUE index of
    /// the source that the new row would break): a conflict on this row,
    /// for the operator to settle, not a failure of the tool; any other
    /// error is the tool's.
    pub(super) fn refused(
        &self,
        c: &Change,
        e: anyhow::Error,
        here: Option<&Row>,
    ) -> Result<Box<Conflict>> {
        match crate::db::constraint_violation(self.db.engine(), &e) {
            Some(msg) => {
                let reason = format!("{} refuses the row: {msg}", self.db.location());
                Ok(self.conflict(c, reason, None, None, here))
            }
            None => Err(e),
        }
    }

    /// Keeps the columns the spec does not carry of a source row about to
    /// be deleted, so that the same key inserted again gets them back.
    pub(super) fn keep_ignored(&self, table: &Table, c: &Change, key_text: &str) -> Result<()> {
        let names: Vec<&str> = table.ignore.iter().map(String::as_str).collect();
        let key_names = sql_key_names(table, Side::Source);
        let columns: Vec<&str> = key_names.iter().chain(&names).copied().collect();
        let sql = self
            .db
            .rows()
            .table_sql(&table.source_table, &columns, key_names.len(), None);
        let Some(mut values) = self.db.rows().get_row(&sql, &c.key)? else {
            return Ok(());
        };
        let values = values.split_off(key_names.len());
        let row: serde_json::Map<String, Json> = names
            .iter()
            .zip(&values)
            .map(|(n, v)| (n.to_string(), v.to_json()))
            .collect();
        self.db
            .applied_set()
            .keep_columns(&self.journal, &table.name, key_text, &row, c.tag)
    }

    /// Gives a re-inserted source row the columns kept when it was deleted.
    pub(super) fn restore_ignored(
        &self,
        table: &Table,
        key: &[Value],
        key_text: &str,
    ) -> Result<()> {
        let Some(kept) =
            self.db
                .applied_set()
                .take_kept_columns(&self.journal, &table.name, key_text)?
        else {
            return Ok(());
        };
        let key_names = sql_key_names(table, Side::Source);
        let mut columns = key_names.clone();
        let mut row: Row = key.to_vec();
        for (n, v) in &kept {
            columns.push(n.as_str());
            row.push(Value::from_json(v)?);
        }
        let sql = self
            .db
            .rows()
            .table_sql(&table.source_table, &columns, key_names.len(), None);
        self.db.rows().update_row(&sql, key, &row)?;
        Ok(())
    }

    /// The row under `key` in canonical form, or why the stored row cannot
    /// be read canonically.
    /// `keep`: this is the row the change writes, whose storage classes
    /// [`Applier::stored_form`] keeps.
    pub(super) fn current(
        &self,
        table: &Table,
        ti: usize,
        key: &[Value],
        keep: bool,
    ) -> Result<Current> {
        let row = self.db.rows().get_row(&self.sql[ti], key)?;
        if keep {
            *self.stored.borrow_mut() = match &row {
                Some(r)
                    if self.side == Side::Source
                        && table
                            .columns
                            .iter()
                            .any(|c| matches!(c.transform, Transform::DecimalToMinor { .. })) =>
                {
                    Some(r.clone())
                }
                _ => None,
            };
        }
        let Some(row) = row else {
            return Ok(Current::Row(None));
        };
        // SQLite's column affinity finds the integer 1 for the text '1'; that
        // is another record, never this one.
        if let Some(i) = (0..table.key_len).find(|&i| row[i] != key[i]) {
            return Ok(Current::Unreadable {
                column: table.columns[i].target.clone(),
                why: format!(
                    "the key names {} ({}) but the stored key is {} ({}); send the key with the column's own type",
                    key[i],
                    key[i].class(),
                    row[i],
                    row[i].class()
                ),
            });
        }
        Ok(match self.side {
            Side::Target => Current::Row(Some(row)),
            Side::Source => match canonical(table, row) {
                Ok(r) => Current::Row(Some(r)),
                Err((_, column, value, why)) => Current::Unreadable {
                    column,
                    why: format!("the source holds {value}, which cannot be read: {why}"),
                },
            },
        })
    }

    /// The statements of `table` on this side without the columns in
    /// `unrecorded`.
    pub(super) fn partial_sql(&self, table: &Table, unrecorded: &[usize]) -> TableSql {
        let names: Vec<&str> = table
            .columns
            .iter()
            .enumerate()
            .filter(|(i, _)| !unrecorded.contains(i))
            .map(|(_, c)| match self.side {
                Side::Source => c.source.as_str(),
                Side::Target => c.target.as_str(),
            })
            .collect();
        let name = match self.side {
            Side::Source => &table.source_table,
            Side::Target => &table.target_table,
        };
        self.db.rows().table_sql(name, &names, table.key_len, None)
    }

    /// The canonical row as this side stores it, after the column checks;
    /// the columns in `unrecorded` stay NULL.
    pub(super) fn stored_form(
        &self,
        table: &Table,
        row: &Row,
        unrecorded: &[usize],
    ) -> Result<Row, (String, String)> {
        match self.side {
            Side::Target => {
                check_row(table, row, unrecorded)?;
                Ok(row.clone())
            }
            Side::Source => {
                let stored = self.stored.borrow();
                let Some(was) = stored.as_ref() else {
                    return source_form(table, row, unrecorded);
                };
                check_row(table, row, unrecorded)?;
                table
                    .columns
                    .iter()
                    .zip(row)
                    .zip(was)
                    .enumerate()
                    .map(|(i, ((col, v), was))| {
                        if unrecorded.contains(&i) {
                            return Ok(Value::Null);
                        }
                        let back = reverse_column(col, v)?;
                        Ok(match &col.transform {
                            Transform::DecimalToMinor { scale, .. } => {
                                keep_class(back, v, was, *scale)
                            }
                            _ => back,
                        })
                    })
                    .collect()
            }
        }
    }
}
