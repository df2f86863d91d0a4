//! Replay's watch over the fence: the fence verified and its record held
//! against the source's copy before anything is written, the change token
//! checked before each batch, the fingerprint again at the end.

use anyhow::{Result, bail};

use super::{Copy, FenceRow, Fingerprint, copy_missing, copy_of, orphaned, read};
use crate::db::{Access, Db};
use crate::spec::Spec;

/// Watches a fence from a reader's connection during a replay.
pub struct Sentry {
    fence: FenceRow,
    at_start: Fingerprint,
    change_token: i64,
}

/// How a fence was found when its sentry was posted.
pub enum Posted {
    /// Standing, and watched from now on.
    Standing(Box<Sentry>),
    /// Breached: what was found, for the replay's report.
    Breached(String),
}

impl Sentry {
    /// Verifies the fence now, and its record against the copy the source
    /// keeps; an error when there is none (or no copy, or a check could not
    /// be made).
    pub fn post(target: &Db, spec: &Spec) -> Result<Posted> {
        let fence = read(target.fence_records())?;
        if fence.is_none()
            && let Some(what) = orphaned(target, spec)?
        {
            return Ok(Posted::Breached(format!(
                "fence breached: {what}; nothing was replayed. Find what wrote to the target, then re-plan the rollback"
            )));
        }
        let Some(fence) = fence else {
            bail!(
                "target {} is not fenced; run `cutover fence on` first so that nothing writes to it while the source is rolled back",
                target.location()
            );
        };
        let source = crate::schema::open_source(spec, None, Access::Read)?;
        match copy_of(&fence, &source, target)? {
            Copy::Kept => {}
            Copy::Missing => bail!("{}; nothing was replayed", copy_missing(spec)),
            Copy::Differs(what) => {
                return Ok(Posted::Breached(format!(
                    "fence breached: {what}; nothing was replayed. Find what rewrote it, then re-plan the rollback"
                )));
            }
        }
        drop(source);
        let change_token = target.fence().change_token()?;
        let now = Fingerprint::read_beside(target, spec, fence.format)?;
        if let Some(what) = fence.judge(target.connection(), &now)? {
            return Ok(Posted::Breached(format!(
                "fence breached: {what} (fenced at {}); nothing was replayed. Find what wrote to the target, then re-plan the rollback",
                fence.fenced_at
            )));
        }
        Ok(Posted::Standing(Box::new(Sentry {
            fence,
            at_start: now,
            change_token,
        })))
    }

    pub fn fence(&self) -> &FenceRow {
        &self.fence
    }

    /// Cheap re-check before each batch: any commit by another connection to
    /// a fenced target is a breach; the fingerprint then says what it was.
    pub fn recheck(&mut self, target: &Db, spec: &Spec) -> Result<Option<String>> {
        let v = target.fence().change_token()?;
        if v == self.change_token {
            return Ok(None);
        }
        // Another connection committed: a breach only if what the fence
        // protects changed (a commit to another table, VACUUM or ANALYZE
        // move the change token too).
        let now = Fingerprint::read(target, spec, self.fence.format)?;
        if self.fence.judge(target.connection(), &now)?.is_none() {
            self.change_token = v;
            return Ok(None);
        }
        let what = now.describe_change(&self.at_start);
        Ok(Some(if what.is_empty() {
            format!(
                "fence breached: something committed a write to the fenced target (tables {}) without going through its triggers",
                self.fence.tables.join(", ")
            )
        } else {
            format!("fence breached: {what}")
        }))
    }

    /// The full check at the end, with the rows' digests a reconcile of the
    /// target just computed.
    pub fn verify(
        &self,
        target: &Db,
        spec: &Spec,
        content: Vec<(String, String)>,
    ) -> Result<Option<String>> {
        // No other connection, in any process, has committed to the target
        // since the fingerprint was checked at the start: nothing can differ.
        let v = target.fence().change_token()?;
        if v == self.change_token {
            return Ok(None);
        }
        // Other commits (another table, VACUUM, ANALYZE) move the change token
        // too: what counts is whether the rows the reconcile read, and the
        // schema and journal now, are still what the fence recorded.
        // The reconcile read the columns the spec maps, as formats 1 and 2
        // do; a fence of format 3 reads the tables as they are.
        let now = if self.fence.format >= 3 {
            Fingerprint::read(target, spec, self.fence.format)?
        } else {
            Fingerprint::with_content(target, spec, self.fence.format, content)?
        };
        if self.fence.judge(target.connection(), &now)?.is_none() {
            return Ok(None);
        }
        let what = now.describe_change(&self.at_start);
        Ok(Some(format!(
            "fence breached: {}",
            if what.is_empty() {
                "something committed a write to the fenced target".to_string()
            } else {
                what
            }
        )))
    }
}
