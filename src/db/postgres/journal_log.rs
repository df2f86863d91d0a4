//! Change capture, reading side, on PostgreSQL: how a journal table's
//! columns decode (the engine's own decoding of each column type, as a
//! scan reads it) and the one query that reads its rows. Pages, counts,
//! the proof's entries and the digest, the whole [`crate::db::JournalLog`],
//! are [`crate::db::image_journal`]'s.

use anyhow::Result;
use tokio_postgres::types::ToSql;

use super::Postgres;
use super::quote_ident;
use super::scan::Raw;
use super::types::{self, Kind};
use crate::db::control::Control;
use crate::db::image_journal::{Image, ImageColumn, ImageTables, Stored, Writer};
use crate::value::{Row, Value};

pub(super) use crate::db::image_journal::image_table;

impl ImageTables for Postgres {
    type Kind = Kind;

    fn image_control(&self) -> Control<'_> {
        Control::new(self, self, &super::control::DIALECT, &self.shown)
    }

    /// Each column with its `format_type`.
    fn image_columns(&self, name: &str) -> Result<Vec<ImageColumn<Kind>>> {
        Ok(self
            .columns_of(name)?
            .into_iter()
            .map(|c| ImageColumn {
                name: c.name,
                kind: Ok(c.kind),
                type_name: c.type_name,
            })
            .collect())
    }

    fn written_here(&self) -> &'static str {
        "xid = pg_current_xact_id()"
    }

    fn read_image(&self, im: &Image<Kind>, rest: &str, params: &[i64]) -> Result<Vec<Stored>> {
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| {
                im.kinds
                    .iter()
                    .enumerate()
                    .map(move |(i, k)| k.select(&quote_ident(&format!("{p}{}", i + 1))))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "SELECT seq, xid::text, op, {images} FROM {} {rest}",
            self.qualified(&im.name)
        );
        let params: Vec<&(dyn ToSql + Sync)> = params.iter().map(|p| p as _).collect();
        let rows = {
            let mut client = self.client()?;
            let st = self.prepare(&mut client, &text)?;
            client.query(&st, &params)?
        };
        let n = im.kinds.len();
        let mut scratch = String::new();
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut image = |from: usize| -> Result<Row> {
                let mut row = Vec::with_capacity(n);
                for (i, &kind) in im.kinds.iter().enumerate() {
                    let Raw(raw) = r.try_get(from + i)?;
                    row.push(match raw {
                        None => Value::Null,
                        Some(b) => types::decode(kind, b, &mut scratch, |c| c.to_value())?,
                    });
                }
                Ok(row)
            };
            let (old, new) = (image(3)?, image(3 + n)?);
            out.push(Stored {
                seq: r.try_get(0)?,
                writer: Writer::Transaction(r.try_get(1)?),
                op: r.try_get(2)?,
                old,
                new,
            });
        }
        Ok(out)
    }
}

impl Postgres {
    /// Every journaled table (and earlier column lists of the same table).
    pub(super) fn journal_tables(&self) -> Result<Vec<crate::db::JournalTable>> {
        crate::db::JournalIdentity(self.image_control()).images()
    }
}
