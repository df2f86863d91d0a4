//! A feed's receipts (`_cutover_deliveries`) and revision evidence
//! (`_cutover_revisions`).

use anyhow::Result;
use rusqlite::{OptionalExtension, params};

use super::*;

impl Receipts for Sqlite {
    fn ensure_apply_tables(&self) -> Result<()> {
        Ok(self.conn.execute_batch(APPLY_DDL)?)
    }

    /// The digest of a committed delivery, if there is one.
    fn receipt_digest(&self, feed: &str, delivery: &str) -> Result<Option<String>> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(None);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT digest FROM _cutover_deliveries WHERE feed = ?1 AND delivery = ?2",
            )?
            .query_row([feed, delivery], |r| r.get(0))
            .optional()?)
    }

    /// A feed's checkpoint: the last position committed, 0 before the first.
    fn feed_checkpoint(&self, feed: &str) -> Result<i64> {
        if !self.has_table("_cutover_deliveries")? {
            return Ok(0);
        }
        Ok(self
            .conn
            .prepare_cached(
                "SELECT coalesce(max(last_position), 0) FROM _cutover_deliveries WHERE feed = ?1",
            )?
            .query_row([feed], |r| r.get(0))?)
    }

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
        self.conn
            .prepare_cached(
                "INSERT INTO _cutover_deliveries (feed, delivery, digest, first_position, last_position, written, duplicate, stale)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![feed, delivery, digest, first, last, written as i64, duplicate as i64, stale as i64])?;
        Ok(())
    }

    /// The evidence row of one revision of a record: `(kind, row JSON)`.
    fn evidence(
        &self,
        tbl: &str,
        key: &str,
        revision: i64,
    ) -> Result<Option<(String, Option<String>)>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT kind, row FROM _cutover_revisions WHERE tbl = ?1 AND key = ?2 AND revision = ?3
                 ORDER BY kind = 'tombstone' DESC LIMIT 1",
            )?
            .query_row(params![tbl, key, revision], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// The newest tombstone revision of a record, if it was deleted.
    fn tombstone(&self, tbl: &str, key: &str) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT max(revision) FROM _cutover_revisions WHERE tbl = ?1 AND key = ?2 AND kind = 'tombstone'",
            )?
            .query_row(params![tbl, key], |r| r.get(0))?)
    }

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
        self.conn
            .prepare_cached(
                "INSERT OR IGNORE INTO _cutover_revisions (tbl, key, revision, kind, row, delivery, position)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![tbl, key, revision, kind, row, delivery, position])?;
        Ok(())
    }
}
