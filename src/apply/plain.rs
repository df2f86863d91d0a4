//! The plain rule and the watermark rule: what a load and a sync write. A
//! row absent is inserted and an identical one is a duplicate; a different
//! one is a conflict unless the table's `on_change = "update"` (plain), or
//! is replaced when its watermark is older and kept when newer (watermark).

use std::cmp::Ordering;

use anyhow::Result;

use super::rows::first_difference;
use super::{Applier, Change, Effect};
use crate::spec::OnChange;
use crate::value::Row;

impl Applier<'_> {
    /// The plain rule, on the row stored under the change's key (`here`).
    pub(super) fn plain(&self, c: &Change, here: Option<Row>) -> Result<Effect> {
        let table = &self.tables[c.table];
        match (&here, &c.after) {
            (None, None) => Ok(Effect::Duplicate),
            (Some(_), None) => self.write(c, here.as_ref(), None),
            (None, Some(_)) => self.write(c, None, c.after.as_ref()),
            (Some(h), Some(a)) if h == a => Ok(Effect::Duplicate),
            (Some(h), Some(_)) if table.on_change == OnChange::Update => {
                self.write(c, Some(h), c.after.as_ref())
            }
            (Some(h), Some(_)) => {
                let column = first_difference(table, Some(h), c.after.as_ref(), &[]);
                Ok(Effect::Conflict(self.conflict(
                    c,
                    "a different row with this key is already there (no revision column to order them, and on_change is \"reject\")".into(),
                    column,
                    None,
                    here.as_ref(),
                )))
            }
        }
    }

    /// The watermark rule (column `w`), on the row stored under the
    /// change's key (`here`).
    pub(super) fn watermark(&self, c: &Change, w: usize, here: Option<Row>) -> Result<Effect> {
        let table = &self.tables[c.table];
        let (Some(h), Some(a)) = (&here, &c.after) else {
            return match (&here, &c.after) {
                (None, None) => Ok(Effect::Duplicate),
                _ => self.write(c, here.as_ref(), c.after.as_ref()),
            };
        };
        if h == a {
            return Ok(Effect::Duplicate);
        }
        match crate::watermark::watermark_cmp(&a[w], &h[w]) {
            Some(Ordering::Greater) => self.write(c, Some(h), Some(a)),
            Some(Ordering::Less) => Ok(Effect::Stale),
            Some(Ordering::Equal) if table.on_change == OnChange::Update => {
                self.write(c, Some(h), Some(a))
            }
            Some(Ordering::Equal) => Ok(Effect::Conflict(self.conflict(
                c,
                format!("the stored row has the same watermark {} but other content; set on_change = \"update\" to let the later sync win", a[w]),
                first_difference(table, Some(h), Some(a), &[]),
                None,
                Some(h),
            ))),
            None => Ok(Effect::Conflict(self.conflict(
                c,
                format!("watermarks {} and {} cannot be compared", a[w], h[w]),
                Some(table.columns[w].target.clone()),
                None,
                Some(h),
            ))),
        }
    }
}
