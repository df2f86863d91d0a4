//! Change capture, reading side, on MySQL and MariaDB: how an image
//! table's columns decode — each by the engine's own [`types::decode`] for
//! its type (`LONGTEXT` reads as a `VARCHAR` does, `LONGBLOB` as a
//! `BINARY`: the same kinds) — and the one query that reads its rows.
//! Pages, counts, the proof's entries and the digest, the whole
//! [`crate::db::JournalLog`], are [`crate::db::image_journal`]'s.

use anyhow::{Context, Result, bail};
use mysql::Value as My;
use mysql::prelude::Queryable;

use super::types::{self, Kind};
use super::{MySql, quote_ident};
use crate::db::JournalTable;
use crate::db::control::Control;
use crate::db::image_journal::{Image, ImageColumn, ImageTables, Stored, Writer};
use crate::value::Row;

pub(super) use crate::db::image_journal::image_table;

/// An integer column of a journal row.
fn integer(v: Option<&My>, what: &str) -> Result<i64> {
    match v {
        Some(My::Int(i)) => Ok(*i),
        Some(My::UInt(u)) => Ok(i64::try_from(*u)?),
        Some(My::Bytes(b)) => Ok(std::str::from_utf8(b)?.parse()?),
        other => bail!(
            "the journal's {what} is {}",
            other.map_or_else(|| "missing".to_string(), |v| v.as_sql(true))
        ),
    }
}

impl ImageTables for MySql {
    type Kind = Kind;

    fn image_control(&self) -> Control<'_> {
        Control::new(self, self, &super::control::DIALECT, self.shown())
    }

    /// Each column with its `COLUMN_TYPE`, character set and collation.
    fn image_columns(&self, name: &str) -> Result<Vec<ImageColumn<Kind>>> {
        Ok(self
            .columns(name)?
            .iter()
            .map(|c| ImageColumn {
                name: c.name.clone(),
                kind: Kind::of(c),
                type_name: super::capture::image_type(c),
            })
            .collect())
    }

    fn written_here(&self) -> &'static str {
        "conn = CONNECTION_ID()"
    }

    fn read_image(&self, im: &Image<Kind>, rest: &str, params: &[i64]) -> Result<Vec<Stored>> {
        let width = im.kinds.len();
        let images = ["o", "n"]
            .iter()
            .flat_map(|p| (1..=width).map(move |i| quote_ident(&format!("{p}{i}"))))
            .collect::<Vec<_>>()
            .join(", ");
        let text = format!(
            "SELECT seq, conn, op, {images} FROM {} {rest}",
            self.qualified(&im.name)
        );
        let params: Vec<My> = params.iter().map(|&p| p.into()).collect();
        let rows: Vec<mysql::Row> = self
            .conn()?
            .exec(&text, params)
            .map_err(|e| self.failed(&format!("reading journal table {}", im.name), &e))?;
        let mut scratch = String::new();
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut image = |from: usize| -> Result<Row> {
                let mut row = Vec::with_capacity(width);
                for (i, kind) in im.kinds.iter().enumerate() {
                    let v = r.as_ref(from + i).unwrap_or(&My::NULL);
                    row.push(
                        types::decode(kind, v, &mut scratch, |c| c.to_value()).map_err(|why| {
                            anyhow::anyhow!(
                                "journal table {} of table '{}', column o/n{}: {why}",
                                im.name,
                                im.tbl,
                                i + 1
                            )
                        })?,
                    );
                }
                Ok(row)
            };
            let (old, new) = (image(3)?, image(3 + width)?);
            let op = match r.as_ref(2) {
                Some(My::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
                other => bail!(
                    "journal table {}: op {}",
                    im.name,
                    other.map_or_else(|| "missing".to_string(), |v| v.as_sql(true))
                ),
            };
            out.push(Stored {
                seq: integer(r.as_ref(0), "seq")?,
                writer: Writer::Connection(integer(r.as_ref(1), "connection")? as u64),
                op,
                old,
                new,
            });
        }
        Ok(out)
    }
}

impl MySql {
    /// Every journaled table (and earlier column lists of the same table).
    pub(super) fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        crate::db::JournalIdentity(self.image_control())
            .images()
            .context("reading the journal's images")
    }
}
