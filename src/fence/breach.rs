//! Whether the target still matches its fence: the fingerprint read now
//! against the one recorded, in the fence's format; what changed, in words;
//! and fence triggers left standing without their row.

use anyhow::{Result, bail};

use super::{FenceRow, Fingerprint, journal_tables};
use crate::db::{Connection, Db};
use crate::spec::Spec;

impl FenceRow {
    /// The fingerprint `now` would have under this fence's format.
    fn expected(&self, now: &Fingerprint) -> String {
        match self.format {
            1 => {
                // Format 1 hashed the schema in the catalogue's order, which
                // for parts of one name is no fixed order: the same parts
                // are hashed in the order the fence recorded them.
                let mut now = now.clone();
                if let Some(p) = &self.parts {
                    let (mut a, mut b) = (now.schema.clone(), p.schema.clone());
                    a.sort();
                    b.sort();
                    if a == b {
                        now.schema = p.schema.clone();
                    }
                }
                now.hash()
            }
            2 => now.hash_v2(&self.record),
            _ => now.hash_v3(&self.record),
        }
    }

    /// Whether `now` still matches the fence: `Ok(None)`; a breach:
    /// `Ok(Some(what changed))`; `Err` when what was read cannot say — a
    /// query failed on tables that are there as the fence saw them, or the
    /// target's file is damaged.
    pub fn judge(&self, target: &dyn Connection, now: &Fingerprint) -> Result<Option<String>> {
        if self.expected(now) == self.fingerprint {
            return Ok(None);
        }
        not_damaged(target)?;
        if let Some(failed) = &now.failed
            && self.parts.as_ref().is_none_or(|p| p.schema == now.schema)
        {
            bail!(
                "the fence's fingerprint could not be computed, which is not a breach: {failed}. Fix what stopped the query (a statement_timeout or a permission of the role, a lost connection), then run the command again"
            );
        }
        let what = self
            .parts
            .as_ref()
            .map(|p| now.describe_change(p))
            .unwrap_or_default();
        Ok(Some(if what.is_empty() {
            "the fingerprint no longer matches (schema, rows, journal or the fence record changed since fence on)"
                .to_string()
        } else {
            what
        }))
    }

    /// Whether the target still matches the fence (a scan of the fenced
    /// tables); if not, what changed.
    pub fn breach(&self, target: &Db, spec: &Spec) -> Result<Option<String>> {
        self.judge(
            target.connection(),
            &Fingerprint::read(target, spec, self.format)?,
        )
    }
}

/// Refuses to call a difference a breach on a damaged file.
pub fn not_damaged(target: &dyn Connection) -> Result<()> {
    if let Some(d) = target.damage()? {
        return Err(anyhow::Error::new(crate::db::Damaged(format!(
            "target: {d}"
        ))));
    }
    Ok(())
}

/// Fence triggers without a fence row: the row (or its table) was removed
/// behind cutover's back, and the target is still fenced. What is left, as
/// a breach.
pub fn orphaned(target: &Db, spec: &Spec) -> Result<Option<String>> {
    for t in spec
        .tables
        .iter()
        .map(|t| t.target_table.clone())
        .chain(journal_tables(target.capture())?)
    {
        if target.catalogue().own_triggers(&t)?.fence > 0 {
            // Where each trigger commits as it is made, a `fence on` stopped
            // before its row leaves the same.
            let stopped = if target.engine().capabilities.transactional_ddl {
                ""
            } else {
                ", or did a `fence on` stop before writing it? `cutover fence on` completes it"
            };
            return Ok(Some(format!(
                "table {t} still has fence triggers but the fence row is gone (was _cutover_fence deleted or dropped{stopped}?)"
            )));
        }
    }
    Ok(None)
}
