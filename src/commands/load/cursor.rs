//! The cursor a load leaves for the first sync: the largest watermark (and
//! its key) of the rows it copied into a table with a watermark, recorded
//! where sync keeps its cursor (`_cutover_cursor`), so that the first sync
//! reads from there (less its `--lookback`) instead of carrying every row
//! again. A row the application changed behind it while the load ran is a
//! late row to that sync: reported, or picked up by its lookback.

use std::cmp::Ordering;

use anyhow::Result;
use sha2::{Digest, Sha256};

use super::TableLoad;
use crate::db::Db;
use crate::db::control::progress::{NewBatch, SeenColumn};
use crate::spec::{Spec, Table};
use crate::value::{Block, Row, Value, key_cmp, key_json};
use crate::watermark::{Mark, mark};

/// The least and the largest `(watermark, key)` a load copied into a table.
#[derive(Debug, Default)]
pub struct Span {
    least: Option<(Mark, Value)>,
    highest: Option<(Mark, Value, Row)>,
    rows: u64,
}

impl Span {
    /// Takes in the canonical rows of `b`, a batch of table `t`. A
    /// watermark that is not one is sync's to report, not a bound.
    pub(super) fn see(&mut self, t: &Table, b: &Block) {
        let Some(w) = t.watermark else { return };
        for r in 0..b.rows() {
            let Ok(m) = mark(b.get(r, w)) else { continue };
            self.rows += 1;
            if self.least.as_ref().is_none_or(|(l, _)| m < *l) {
                self.least = Some((m, b.get(r, w).to_value()));
            }
            let higher = match &self.highest {
                None => true,
                Some((h, _, k)) => m
                    .cmp(h)
                    .then_with(|| key_cmp(&b.values(r, t.key_len), k))
                    .is_gt(),
            };
            if higher {
                self.highest = Some((m, b.get(r, w).to_value(), b.values(r, t.key_len)));
            }
        }
    }
}

/// Records the cursor of every table the load copied rows with a
/// watermark into, unless the table's cursor already stands at or past it
/// (a cursor never moves back): one row of `_cutover_cursor` per table,
/// with the source's columns as sync compares them next.
pub(super) fn record(
    spec: &Spec,
    source: &mut Db,
    target: &Db,
    tables: &[TableLoad],
) -> Result<()> {
    let mut made = false;
    for tl in tables {
        let (Some(t), Some((least, (high, last, key)))) = (
            spec.tables.iter().find(|t| t.name == tl.name),
            tl.span.least.as_ref().zip(tl.span.highest.as_ref()),
        ) else {
            continue;
        };
        if let Some(c) = target.progress().sync_cursor(&t.name)?
            && mark(c.last_watermark.as_cell()).is_ok_and(|m| m.cmp(high) != Ordering::Less)
        {
            continue;
        }
        if !made {
            target.progress().ensure_sync_tables()?;
            made = true;
        }
        let seen: Vec<SeenColumn> = source
            .catalogue()
            .table_columns(&t.source_table)?
            .into_iter()
            .map(|c| SeenColumn {
                name: c.name,
                decl_type: c.decl_type,
            })
            .collect();
        let last_key = key_json(key).to_string();
        let mut digest = Sha256::new();
        for part in ["load", &t.name, &last.to_string(), &last_key] {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        let batch = format!("load {}", hex::encode(digest.finalize()));
        target.write(|| {
            target.progress().record_source_schema(&t.name, &seen)?;
            target.progress().record_sync_batch(
                &t.name,
                &NewBatch {
                    batch: &batch,
                    rows: tl.span.rows,
                    changed: tl.loaded,
                    first_watermark: &least.1,
                    last_watermark: last,
                    last_key: &last_key,
                },
            )
        })?;
    }
    Ok(())
}
