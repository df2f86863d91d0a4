//! The replay rule: a change carries the row it expects (`before`), and is
//! written only where the stored row is that one, or is a duplicate where
//! it is already the row the change leaves. Its common changes go first
//! in one conditional statement where the engine has one
//! ([`crate::db::ConditionalWrite`]); a source trigger that stamps the
//! statement's time is held to the row's value by the session's clock.

use anyhow::Result;

use super::rows::{first_difference, row_json_of, same_recorded, source_form};
use super::write::Current;
use super::{Applier, Change, Conflict, Effect};
use crate::db::control::receipts::{Evidence, EvidenceKind, Revision};
use crate::spec::Side;
use crate::value::{Row, Value, key_cmp, key_json};

/// Whether a write's session clock was set ([`Applier::clock`]).
pub(super) enum Clocked {
    /// No trigger of the table stamps on this write.
    Unset,
    /// Set to the row's value: the caller gives the clock back.
    Set,
    /// The row's values cannot be one clock's.
    Conflict(Box<Conflict>),
}

impl Applier<'_> {
    /// The replay rule in one statement, where the engine has one: the
    /// write happens only if the stored row is exactly `before` in the form
    /// this side stores it, and then the rule would have written it too, so
    /// the row need not be read first. `false`: nothing was written, and
    /// the rule runs on the row read. A change of key, a change to the same
    /// content (a duplicate, not a write) and the kept columns of an insert
    /// or delete always take the long way.
    pub(super) fn wrote_if(&self, c: &Change, before: Option<&Row>) -> Result<bool> {
        let table = &self.tables[c.table];
        let k = table.key_len;
        let keeps = self.side == Side::Source && !table.ignore.is_empty();
        let plain = match (before, &c.after) {
            (Some(b), Some(a)) => b != a,
            (Some(_), None) | (None, Some(_)) => !keeps,
            (None, None) => false,
        };
        let same_key = [before, c.after.as_ref()]
            .into_iter()
            .flatten()
            .all(|r| key_cmp(&r[..k], &c.key).is_eq());
        if !plain || !same_key || self.writers.borrow()[c.table].is_none() {
            return Ok(false);
        }
        // The stored form of a new value follows the class of the stored
        // one, which the condition pins to `before`'s own: the source form,
        // computed ahead when the change carries it.
        *self.stored.borrow_mut() = None;
        let computed;
        let (b, a) = match &c.source_images {
            Some((b, a)) if self.side == Side::Source => (b.as_deref(), a.as_deref()),
            _ => {
                let stored =
                    |r: Option<&Row>| r.map(|r| self.stored_form(table, r, &[])).transpose();
                let (Ok(b), Ok(a)) = (stored(before), stored(c.after.as_ref())) else {
                    return Ok(false);
                };
                computed = (b, a);
                (computed.0.as_deref(), computed.1.as_deref())
            }
        };
        // A value the source would not store as written takes the long
        // way, which names it as a conflict.
        if let Some(a) = a
            && self.unfit(c, a)?.is_some()
        {
            return Ok(false);
        }
        let clocked = match (b, a) {
            (_, Some(a)) if !self.clocks[c.table].is_empty() => {
                match self.clock(c, c.table, b.is_none(), a)? {
                    Clocked::Set => true,
                    Clocked::Unset => false,
                    // The long way names the conflict.
                    Clocked::Conflict(_) => return Ok(false),
                }
            }
            _ => false,
        };
        let wrote = match &mut self.writers.borrow_mut()[c.table] {
            Some(w) => w.write_if(b, a),
            None => Ok(false),
        };
        if clocked {
            self.db.side_effects().hold_clock(None)?;
        }
        wrote
    }

    /// The replay rule, including a change of key.
    pub(super) fn expect(
        &self,
        c: &Change,
        before: Option<&Row>,
        here: Option<Row>,
    ) -> Result<Effect> {
        let table = &self.tables[c.table];
        let k = table.key_len;
        let moves =
            matches!((before, &c.after), (Some(_), Some(a)) if key_cmp(&c.key, &a[..k]).is_ne());
        let there = match (&c.after, moves) {
            (Some(a), true) => match self.current(table, c.table, &a[..k], false)? {
                Current::Row(r) => r,
                Current::Unreadable { column, why } => {
                    return Ok(Effect::Conflict(self.conflict(
                        c,
                        why,
                        Some(column),
                        before,
                        None,
                    )));
                }
            },
            _ => None,
        };
        let same = |a: Option<&Row>, b: Option<&Row>| same_recorded(a, b, &c.unrecorded);
        let already = if moves {
            here.is_none() && same(there.as_ref(), c.after.as_ref())
        } else {
            same(here.as_ref(), c.after.as_ref())
        };
        // An update that changed no value happened all the same (the
        // application's statement fired the row's triggers): found as
        // expected, it is written again, never taken as already there.
        let unchanged = before.is_some() && same(before, c.after.as_ref());
        if already && !(unchanged && same(here.as_ref(), before)) {
            return Ok(Effect::Duplicate);
        }
        let expected = same(here.as_ref(), before);
        if !expected || (moves && there.is_some()) {
            let (reason, found) = if expected {
                ("the key it moves to is already taken", there.as_ref())
            } else {
                match (before, &here) {
                    (None, Some(_)) => (
                        "a row with this key exists, but the change expected none",
                        here.as_ref(),
                    ),
                    (Some(_), None) => ("the row is gone, but the change expected it", None),
                    _ => (
                        "the row differs from the one the change expected",
                        here.as_ref(),
                    ),
                }
            };
            let column = first_difference(table, before, here.as_ref(), &c.unrecorded);
            return Ok(Effect::Conflict(self.conflict(
                c,
                reason.into(),
                column,
                before,
                found,
            )));
        }
        self.write(c, here.as_ref(), c.after.as_ref())
    }

    /// Sets the session's clock for a write of `row` (as stored) to table
    /// `ti`, an insert or an update, when a trigger that fires on it sets
    /// columns to the statement's time: `Ok(true)` when set (the caller
    /// gives the clock back after the write), `Ok(false)` when no trigger
    /// needs it, a conflict when the row's values cannot be one clock's.
    pub(super) fn clock(
        &self,
        c: &Change,
        ti: usize,
        insert: bool,
        row: &[Value],
    ) -> Result<Clocked> {
        let table = &self.tables[ti];
        let mut at: Option<(&Value, usize)> = None;
        for k in self.clocks[ti]
            .iter()
            .filter(|k| if insert { k.insert } else { k.update })
        {
            for &col in &k.columns {
                let v = &row[col];
                let differs = at.is_some_and(|(a, _)| a != v);
                if matches!(v, Value::Null) || differs {
                    let why = match at {
                        Some((_, first)) if differs => format!(
                            "source trigger '{}' sets '{}' to the statement's time, which replay sets to the journal's value, and the row holds another time in '{}' ({} and {})",
                            k.trigger,
                            table.columns[col].source,
                            table.columns[first].source,
                            v,
                            row[first]
                        ),
                        _ => format!(
                            "source trigger '{}' sets '{}' to the statement's time, and the row holds NULL there, which no clock reads",
                            k.trigger, table.columns[col].source
                        ),
                    };
                    return Ok(Clocked::Conflict(self.conflict(
                        c,
                        why,
                        Some(table.columns[col].target.clone()),
                        None,
                        None,
                    )));
                }
                at.get_or_insert((v, col));
            }
        }
        let Some((v, col)) = at else {
            return Ok(Clocked::Unset);
        };
        if !self.db.side_effects().hold_clock(Some(v))? {
            return Ok(Clocked::Conflict(self.conflict(
                c,
                format!(
                    "a source trigger sets '{}' to the statement's time, and the session's clock cannot be set to {v} (it runs from 1970 to 2038)",
                    table.columns[col].source
                ),
                Some(table.columns[col].target.clone()),
                None,
                None,
            )));
        }
        Ok(Clocked::Set)
    }

    /// On the source: whether the row change `c` leaves cannot be written
    /// there exactly — the spec's checks or the reverse transform refuse
    /// it, or the source column would not store it as written. `false` for
    /// a delete, and on the target.
    pub fn stuck(&self, c: &Change) -> Result<bool> {
        let (Some(after), Side::Source) = (&c.after, self.side) else {
            return Ok(false);
        };
        match source_form(&self.tables[c.table], after, &c.unrecorded) {
            Ok(row) => Ok(self.unfit(c, &row)?.is_some()),
            Err(_) => Ok(true),
        }
    }

    /// On the source: the conflict of change `c` when its row in the form
    /// written, `stored`, holds a value the source column would not store
    /// exactly (round a time's fraction, cut or pad a text, refuse a number
    /// past its precision, a label it does not have, a NULL), naming the
    /// column, the value and the column's type. `None` on the target, or
    /// when every value fits as far as the catalogue tells.
    pub(super) fn unfit(&self, c: &Change, stored: &[Value]) -> Result<Option<Box<Conflict>>> {
        if self.side != Side::Source {
            return Ok(None);
        }
        let table = &self.tables[c.table];
        let id = (c.table, c.unrecorded.clone());
        let mut holding = self.holding.borrow_mut();
        let holds = match holding.entry(id) {
            std::collections::hash_map::Entry::Occupied(h) => h.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let h = match c.unrecorded.is_empty() {
                    true => self.db.catalogue().holding(&self.sql[c.table], false)?,
                    false => self
                        .db
                        .catalogue()
                        .holding(&self.partial_sql(table, &c.unrecorded), false)?,
                };
                v.insert(h)
            }
        };
        let unfit = match c.unrecorded.is_empty() {
            true => holds.unfit(stored)?,
            false => holds.unfit(
                &stored
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !c.unrecorded.contains(i))
                    .map(|(_, v)| v.clone())
                    .collect::<Row>(),
            )?,
        };
        let Some(unfit) = unfit else {
            return Ok(None);
        };
        let i = table
            .columns
            .iter()
            .position(|col| col.source == unfit.column);
        let value = i.map_or_else(String::new, |i| format!("{} ", stored[i]));
        let column = i.map(|i| table.columns[i].target.clone());
        Ok(Some(self.conflict(
            c,
            format!(
                "the source would not store the value {value}as written: {}",
                unfit.why
            ),
            column,
            None,
            None,
        )))
    }

    /// After a replayed change of a table with a revision column was
    /// written: the revision it replaced kept as evidence, and a delete's
    /// revision as a tombstone, as the revision rule keeps them.
    pub(super) fn record_replaced(
        &self,
        c: &Change,
        before: Option<&Row>,
        rev: i64,
        delivery: &str,
    ) -> Result<()> {
        let table = &self.tables[c.table];
        let Some(rc) = table.revision else {
            return Ok(());
        };
        let key = key_json(&c.key).to_string();
        if let Some(b) = before
            && let Value::Integer(old) = b[rc]
        {
            let json = row_json_of(table, b, &c.unrecorded).to_string();
            self.db.receipts().record_evidence(
                &Revision {
                    tbl: &table.name,
                    key: &key,
                    revision: old,
                },
                &Evidence {
                    kind: EvidenceKind::Superseded,
                    row: Some(json),
                },
                delivery,
                c.tag,
            )?;
        }
        if c.after.is_none() {
            self.db.receipts().record_evidence(
                &Revision {
                    tbl: &table.name,
                    key: &key,
                    revision: rev,
                },
                &Evidence {
                    kind: EvidenceKind::Tombstone,
                    row: None,
                },
                delivery,
                c.tag,
            )?;
        }
        Ok(())
    }
}
