//! A feed's receipts (`_cutover_deliveries`: one per committed delivery,
//! with its digest and positions) and the revision evidence of its records
//! (`_cutover_revisions`), in the database the feed applies to.

use anyhow::Result;

use super::{Control, P, Set, int, opt_int, opt_text, text};

/// The receipt of one committed delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt<'a> {
    pub feed: &'a str,
    pub delivery: &'a str,
    pub digest: &'a str,
    pub first: i64,
    pub last: i64,
    pub written: u64,
    pub duplicate: u64,
    pub stale: u64,
}

/// What the evidence of one revision of a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvidenceKind {
    /// A newer revision replaced it.
    Superseded,
    /// It came after a newer one and was kept, replacing nothing.
    Stale,
    /// The record was deleted at this revision.
    Tombstone,
}

impl EvidenceKind {
    /// The kind as the evidence table records it.
    pub fn as_str(self) -> &'static str {
        match self {
            EvidenceKind::Superseded => "superseded",
            EvidenceKind::Stale => "stale",
            EvidenceKind::Tombstone => "tombstone",
        }
    }

    fn parse(s: &str) -> Result<EvidenceKind> {
        Ok(match s {
            "superseded" => EvidenceKind::Superseded,
            "stale" => EvidenceKind::Stale,
            "tombstone" => EvidenceKind::Tombstone,
            other => anyhow::bail!("_cutover_revisions holds an unknown kind '{other}'"),
        })
    }
}

/// The evidence of one revision of a record: its kind and the row (JSON
/// text, as the feed line gave it), which a tombstone has none of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    pub kind: EvidenceKind,
    pub row: Option<String>,
}

/// Where the evidence of one revision came from.
#[derive(Clone, Copy, Debug)]
pub struct Revision<'a> {
    pub tbl: &'a str,
    /// The record's key, as JSON text.
    pub key: &'a str,
    pub revision: i64,
}

/// A feed's receipts, on one connection.
#[derive(Clone, Copy)]
pub struct Receipts<'a>(pub(crate) Control<'a>);

impl Receipts<'_> {
    /// Makes the receipts' and the evidence's tables.
    pub fn ensure(&self) -> Result<()> {
        self.0.ensure(Set::Receipts)
    }

    /// The digest of a committed delivery, if there is one.
    pub fn digest(&self, feed: &str, delivery: &str) -> Result<Option<String>> {
        if !self.0.has("_cutover_deliveries")? {
            return Ok(None);
        }
        self.0
            .one(
                "SELECT digest FROM {{schema}}._cutover_deliveries WHERE feed = :feed AND delivery = :delivery",
                &[("feed", P::Text(feed)), ("delivery", P::Text(delivery))],
            )?
            .map(|r| text(&r, 0))
            .transpose()
    }

    /// A feed's checkpoint: the last position committed, 0 before the first.
    pub fn checkpoint(&self, feed: &str) -> Result<i64> {
        if !self.0.has("_cutover_deliveries")? {
            return Ok(0);
        }
        self.0
            .one(
                "SELECT coalesce(max(last_position), 0) FROM {{schema}}._cutover_deliveries WHERE feed = :feed",
                &[("feed", P::Text(feed))],
            )?
            .map_or(Ok(0), |r| int(&r, 0))
    }

    /// Records a committed delivery.
    pub fn insert(&self, r: &Receipt<'_>) -> Result<()> {
        self.0.exec(
            "INSERT INTO {{schema}}._cutover_deliveries
               (feed, delivery, digest, first_position, last_position, written, duplicate, stale)
             VALUES (:feed, :delivery, :digest, :first, :last, :written, :duplicate, :stale)",
            &[
                ("feed", P::Text(r.feed)),
                ("delivery", P::Text(r.delivery)),
                ("digest", P::Text(r.digest)),
                ("first", P::Int(r.first)),
                ("last", P::Int(r.last)),
                ("written", P::Int(r.written as i64)),
                ("duplicate", P::Int(r.duplicate as i64)),
                ("stale", P::Int(r.stale as i64)),
            ],
        )?;
        Ok(())
    }

    /// The evidence of one revision of a record, a tombstone first.
    pub fn evidence(&self, of: &Revision<'_>) -> Result<Option<Evidence>> {
        self.0
            .one(
                "SELECT kind, \"row\" FROM {{schema}}._cutover_revisions
                 WHERE tbl = :tbl AND \"key\" = :key AND revision = :revision
                 ORDER BY CASE WHEN kind = 'tombstone' THEN 0 ELSE 1 END, kind LIMIT 1",
                &[
                    ("tbl", P::Text(of.tbl)),
                    ("key", P::Text(of.key)),
                    ("revision", P::Int(of.revision)),
                ],
            )?
            .map(|r| {
                Ok(Evidence {
                    kind: EvidenceKind::parse(&text(&r, 0)?)?,
                    row: opt_text(&r, 1)?,
                })
            })
            .transpose()
    }

    /// The newest tombstone revision of a record, if it was deleted.
    pub fn tombstone(&self, tbl: &str, key: &str) -> Result<Option<i64>> {
        self.0
            .one(
                "SELECT max(revision) FROM {{schema}}._cutover_revisions
                 WHERE tbl = :tbl AND \"key\" = :key AND kind = 'tombstone'",
                &[("tbl", P::Text(tbl)), ("key", P::Text(key))],
            )?
            .map_or(Ok(None), |r| opt_int(&r, 0))
    }

    /// Records the evidence of one revision, from `delivery` at `position`;
    /// evidence already recorded is kept as it was.
    pub fn record_evidence(
        &self,
        of: &Revision<'_>,
        evidence: &Evidence,
        delivery: &str,
        position: i64,
    ) -> Result<()> {
        self.0.exec(
            &format!(
                "INSERT INTO {{{{schema}}}}._cutover_revisions (tbl, \"key\", revision, kind, \"row\", delivery, position)
                 VALUES (:tbl, :key, :revision, :kind, :row, :delivery, :position) {}",
                (self.0.dialect().upsert)(&["tbl", "\"key\"", "revision", "kind"], &[], "")
            ),
            &[
                ("tbl", P::Text(of.tbl)),
                ("key", P::Text(of.key)),
                ("revision", P::Int(of.revision)),
                ("kind", P::Text(evidence.kind.as_str())),
                ("row", P::OptText(evidence.row.as_deref())),
                ("delivery", P::Text(delivery)),
                ("position", P::Int(position)),
            ],
        )?;
        Ok(())
    }
}
