//! A synced table's record in the target: every sync batch committed
//! (provenance: rows, watermark range, time) and the cursor, the watermark
//! and key of the last row carried. The gate reports the provenance of each
//! synced table beside the quality of its source now; status, the cursor.

use anyhow::Result;
use serde::Serialize;
use serde_json::Value as Json;

use crate::db::Db;
use crate::db::control::progress::Cursor as Recorded;
use crate::spec::Spec;
use crate::survey::quality;

/// A table's sync cursor: the watermark and key of the last row carried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cursor {
    // In the order the keys of a JSON object sort, as the text shows it.
    pub key: Json,
    pub watermark: Json,
}

impl Cursor {
    /// The cursor as the target records it: a typed watermark and the
    /// key's JSON text.
    pub fn of(recorded: Option<Recorded>) -> Option<Cursor> {
        recorded.map(|r| Cursor {
            key: serde_json::from_str::<Json>(&r.last_key).unwrap_or(Json::Null),
            watermark: r.last_watermark.to_json(),
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&serde_json::to_string(self).map_err(|_| std::fmt::Error)?)
    }
}

/// The gate's view of a synced table: its quality now and every sync batch
/// committed so far (provenance).
#[derive(Debug, Serialize)]
pub struct Provenance {
    pub table: String,
    pub quality_failures: u64,
    pub examples: Vec<String>,
    pub batches: Vec<CommittedBatch>,
}

/// A sync batch as the target recorded it.
#[derive(Debug, Serialize)]
pub struct CommittedBatch {
    pub batch: i64,
    pub rows: i64,
    pub changed: i64,
    pub first_watermark: Json,
    pub last_watermark: Json,
    pub committed_at: String,
}

pub fn provenance(
    spec: &Spec,
    source: &mut Db,
    target: &Db,
    max: usize,
) -> Result<Vec<Provenance>> {
    let mut out = Vec::new();
    for t in &spec.tables {
        if t.watermark.is_none() {
            continue;
        }
        let q = quality(t, source, max)?;
        let batches = target
            .progress()
            .sync_batches(&t.name)?
            .into_iter()
            .map(|b| CommittedBatch {
                batch: b.batch_no,
                rows: b.rows,
                changed: b.changed,
                first_watermark: b.first_watermark.to_json(),
                last_watermark: b.last_watermark.to_json(),
                committed_at: b.committed_at,
            })
            .collect();
        out.push(Provenance {
            table: t.name.clone(),
            quality_failures: q.failures(),
            examples: q.examples,
            batches,
        });
    }
    Ok(out)
}
