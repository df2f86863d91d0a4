//! A feed's receipts (`_cutover_deliveries`) and revision evidence
//! (`_cutover_revisions`), in the spec's schema of the database the feed
//! applies to.

use anyhow::Result;

use super::Postgres;
use crate::db::Receipts;

const APPLY_DDL: &str = include_str!("../../../sql/postgres/apply.sql");

impl Receipts for Postgres {
    fn ensure_apply_tables(&self) -> Result<()> {
        self.ensure_tables(
            APPLY_DDL,
            &[
                "_cutover_deliveries",
                "_cutover_deliveries_position",
                "_cutover_revisions",
            ],
            "the feed's receipts",
        )
    }

    /// The digest of a committed delivery, if there is one.
    fn receipt_digest(&self, feed: &str, delivery: &str) -> Result<Option<String>> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(None);
        }
        Ok(self
            .ctl_opt(
                "SELECT digest FROM {{schema}}._cutover_deliveries WHERE feed = $1 AND delivery = $2",
                &[&feed, &delivery],
            )?
            .map(|r| r.get(0)))
    }

    /// A feed's checkpoint: the last position committed, 0 before the first.
    fn feed_checkpoint(&self, feed: &str) -> Result<i64> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(0);
        }
        let r = self.ctl_query(
            "SELECT coalesce(max(last_position), 0) FROM {{schema}}._cutover_deliveries WHERE feed = $1",
            &[&feed],
        )?;
        Ok(r[0].get(0))
    }

    /// Records a committed delivery; a second receipt for the same
    /// delivery is an error, as on SQLite.
    #[allow(
        clippy::too_many_arguments,
        reason = "one receipt row, column by column"
    )]
    fn insert_receipt(
        &self,
        feed: &str,
        delivery: &str,
        digest: &str,
        first: i64,
        last: i64,
        written: u64,
        duplicate: u64,
        stale: u64,
    ) -> Result<()> {
        let (written, duplicate, stale) = (written as i64, duplicate as i64, stale as i64);
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_deliveries
               (feed, delivery, digest, first_position, last_position, written, duplicate, stale)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &feed, &delivery, &digest, &first, &last, &written, &duplicate, &stale,
            ],
        )?;
        Ok(())
    }

    /// The evidence row of one revision of a record: `(kind, row JSON)`, a
    /// tombstone first when the revision has one.
    fn evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
    ) -> Result<Option<(String, Option<String>)>> {
        Ok(self
            .ctl_opt(
                "SELECT kind, row FROM {{schema}}._cutover_revisions
                 WHERE tbl = $1 AND key = $2 AND revision = $3
                 ORDER BY kind = 'tombstone' DESC, kind LIMIT 1",
                &[&tbl, &key, &revision],
            )?
            .map(|r| (r.get(0), r.get(1))))
    }

    /// The newest tombstone revision of a record, if it was deleted.
    fn tombstone(&self, tbl: &str, key: &str) -> Result<Option<i64>> {
        let r = self.ctl_query(
            "SELECT max(revision) FROM {{schema}}._cutover_revisions
             WHERE tbl = $1 AND key = $2 AND kind = 'tombstone'",
            &[&tbl, &key],
        )?;
        Ok(r[0].get(0))
    }

    /// Records the evidence of one revision; the same evidence recorded
    /// again is kept as first written.
    #[allow(
        clippy::too_many_arguments,
        reason = "one evidence row, column by column"
    )]
    fn record_evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
        kind: &str,
        row: Option<&str>,
        delivery: &str,
        position: i64,
    ) -> Result<()> {
        self.ctl_execute(
            "INSERT INTO {{schema}}._cutover_revisions (tbl, key, revision, kind, row, delivery, position)
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
            &[&tbl, &key, &revision, &kind, &row, &delivery, &position],
        )?;
        Ok(())
    }
}
