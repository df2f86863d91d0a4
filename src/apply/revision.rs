//! The revision rule: a newer revision replaces the stored row (the
//! older kept as evidence), an older one is kept as evidence and never
//! written, and a tombstone is never brought back by an older update.

use anyhow::{Result, bail};

use super::rows::{first_difference, row_from_json, row_json};
use super::{Applier, Change, Effect};
use crate::db::control::receipts::{Evidence, EvidenceKind, Revision};
use crate::value::{Row, Value, key_json};

/// One change under the revision rule, as its steps see it.
struct Revised<'c> {
    c: &'c Change,
    /// The change's revision.
    rev: i64,
    /// The key as receipts name it.
    key: String,
    delivery: &'c str,
}

impl Applier<'_> {
    /// The revision rule, on the row stored under the change's key
    /// (`here`).
    pub(super) fn revision(
        &self,
        c: &Change,
        rev: i64,
        here: Option<Row>,
        delivery: &str,
    ) -> Result<Effect> {
        let table = &self.tables[c.table];
        let Some(rc) = table.revision else {
            bail!(
                "table '{}' has no revision column; a revision cannot be applied to it",
                table.name
            );
        };
        let r = Revised {
            c,
            rev,
            key: key_json(&c.key).to_string(),
            delivery,
        };
        let Some(h) = here else {
            return self.revision_of_absent(&r);
        };
        let cur = match h[rc] {
            Value::Integer(i) => i,
            ref other => {
                return Ok(Effect::Conflict(self.conflict(
                    c,
                    format!("the stored row's revision {other} is not an integer"),
                    Some(table.columns[rc].target.clone()),
                    None,
                    Some(&h),
                )));
            }
        };
        if rev > cur {
            self.evidence(&r, EvidenceKind::Superseded, Some(&h), cur)?;
            if c.after.is_none() {
                self.evidence(&r, EvidenceKind::Tombstone, None, rev)?;
            }
            self.write(c, Some(&h), c.after.as_ref())
        } else if rev == cur {
            if c.after.as_ref() == Some(&h) {
                return Ok(Effect::Duplicate);
            }
            let column = first_difference(table, Some(&h), c.after.as_ref(), &[]);
            let why = if c.after.is_some() {
                format!("revision {rev} is already stored with different content")
            } else {
                format!(
                    "a delete at revision {rev}, the revision of the stored row; a delete must carry a newer revision"
                )
            };
            Ok(Effect::Conflict(self.conflict(
                c,
                why,
                column,
                None,
                Some(&h),
            )))
        } else {
            self.older_revision(&r, Some(&h))
        }
    }

    /// The revision rule where no row holds the key: a tombstone decides,
    /// else a delete is remembered and an insert written.
    fn revision_of_absent(&self, r: &Revised<'_>) -> Result<Effect> {
        let (c, rev) = (r.c, r.rev);
        let table = &self.tables[c.table];
        match self.db.receipts().tombstone(&table.name, &r.key)? {
            Some(t) if rev < t => self.older_revision(r, None),
            Some(t) if rev == t => {
                if c.after.is_none() {
                    Ok(Effect::Duplicate)
                } else {
                    Ok(Effect::Conflict(self.conflict(
                        c,
                        format!("the record was deleted at revision {t}; an update at the same revision conflicts with that delete"),
                        None,
                        None,
                        None,
                    )))
                }
            }
            _ if c.after.is_none() => {
                // A delete of a record never seen here: remember it, so an
                // older update arriving later cannot bring it back.
                self.evidence(r, EvidenceKind::Tombstone, None, rev)?;
                Ok(Effect::Written)
            }
            _ => self.write(c, None, c.after.as_ref()),
        }
    }

    /// An older revision: a duplicate of what was seen then, a conflict if
    /// it says something else, otherwise kept as evidence.
    fn older_revision(&self, r: &Revised<'_>, found: Option<&Row>) -> Result<Effect> {
        let (c, rev) = (r.c, r.rev);
        let table = &self.tables[c.table];
        let of = Revision {
            tbl: &table.name,
            key: &r.key,
            revision: rev,
        };
        let Some(Evidence { kind, row: seen }) = self.db.receipts().evidence(&of)? else {
            self.evidence(r, EvidenceKind::Stale, c.after.as_ref(), rev)?;
            return Ok(Effect::Stale);
        };
        let same = match (&c.after, seen) {
            (None, None) => true,
            (Some(a), Some(s)) => {
                row_from_json(table, &serde_json::from_str(&s)?)
                    .ok()
                    .as_ref()
                    == Some(a)
            }
            _ => false,
        };
        if same {
            return Ok(Effect::Duplicate);
        }
        Ok(Effect::Conflict(self.conflict(
            c,
            format!(
                "revision {rev} was seen before ({}) with different content",
                kind.as_str()
            ),
            None,
            None,
            found,
        )))
    }

    /// Keeps `row` (or nothing) at `revision` of the change's record as
    /// evidence of `kind`.
    fn evidence(
        &self,
        r: &Revised<'_>,
        kind: EvidenceKind,
        row: Option<&Row>,
        revision: i64,
    ) -> Result<()> {
        let table = &self.tables[r.c.table];
        let row = row.map(|row| row_json(table, row).to_string());
        self.db.receipts().record_evidence(
            &Revision {
                tbl: &table.name,
                key: &r.key,
                revision,
            },
            &Evidence { kind, row },
            r.delivery,
            r.c.tag,
        )
    }
}
