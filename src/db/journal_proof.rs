//! The proof that a table's journal triggers journal what is written:
//! the writes an engine's [`super::Capture::prove_journals`] makes inside a
//! savepoint it always rolls back ([`prove_writes`], for the engines whose
//! journal keeps one entry per write: PostgreSQL, MySQL), and the check of
//! the entries they left against the row as the table held it around each
//! write ([`check`], for every engine).

use anyhow::{Context, Result, bail};

use super::transaction::Savepoint;
use super::{Connection, JournalEntry, RowWrite, Rows};
use crate::value::{Row, Value};

/// What an engine supplies for [`prove_writes`], beyond its rows.
pub(crate) trait ProofWrites: Rows + Connection {
    /// The journal's last seq as this session can know it (0 when none).
    fn last_seq(&self) -> Result<i64>;
    /// The entries of image `img` this transaction (or connection) wrote
    /// after seq `after`, in seq order.
    fn entries_written_here(&self, img: i64, after: i64) -> Result<Vec<JournalEntry>>;
    /// Whether `e` is the database refusing to write a row back: other
    /// rows refer to it, or its key is one the table generates ALWAYS.
    fn cannot_write_back(&self, e: &anyhow::Error) -> bool;
}

/// The proof's writes on table `table` of spec table `name` (image `img`),
/// inside the caller's rolled-back savepoint: the first row (by key)
/// deleted, inserted again and updated to itself, written as the
/// application writes them (its triggers fire, its foreign keys hold). The
/// journal's entries of this transaction for the table must be exactly
/// those ([`check`]), each image the row as the table held it around that
/// write (read back, so a trigger of the application that fills or touches
/// a column is journaled as stored). A row other rows refer to cannot be
/// deleted, and a key generated ALWAYS cannot be inserted again: then only
/// the update is proved. Nothing on an empty table.
pub(crate) fn prove_writes<D: ProofWrites>(
    db: &D,
    name: &str,
    img: i64,
    table: &str,
    columns: &[&str],
    key_len: usize,
) -> Result<()> {
    let sql = db.table_sql(table, columns, key_len, None);
    let mut first = None;
    db.scan_into(&sql, None, 1, &mut |b| {
        first = Some(b.values(0, b.width()));
        Ok(false)
    })?;
    let Some(row) = first else { return Ok(()) };
    let key: Vec<Value> = row[..key_len].to_vec();
    let start = db.last_seq()?;
    let again = (|| -> Result<(usize, usize)> {
        let savepoint = Savepoint::open(db)?;
        let gone = db.write_row(&sql, RowWrite::Delete(&key))?;
        let mut back = db.write_row(&sql, RowWrite::Insert(&row))?;
        // A rule that routes the insert into a table inheriting from this
        // one reports no row written: the row is there all the same.
        if back == 0 && db.get_row(&sql, &key)?.is_some() {
            back = 1;
        }
        savepoint.release()?;
        Ok((gone, back))
    })();
    let (expect, before): (&[&str], Row) = match again {
        Ok((1, 1)) => (
            &["delete", "insert", "update"],
            db.get_row(&sql, &key)?.with_context(|| {
                format!("the row of '{name}' inserted again is not there under its key")
            })?,
        ),
        Ok((gone, back)) => {
            bail!("deleting and inserting again one row of '{name}' wrote {gone} and {back} rows")
        }
        Err(e) if db.cannot_write_back(&e) => (&["update"], row.clone()),
        Err(e) => return Err(e),
    };
    let update = RowWrite::Update {
        key: &key,
        row: &before,
    };
    let changed = db.write_row(&sql, update)?;
    if changed != 1 {
        bail!("updating one row of '{name}' to itself wrote {changed} rows");
    }
    let after = db.get_row(&sql, &key)?.with_context(|| {
        format!("the row of '{name}' updated to itself is not there under its key")
    })?;
    let entries = db.entries_written_here(img, start)?;
    check(name, expect, &row, &before, &after, &entries)
}

/// Whether `entries` (this connection's, of one table's image, in seq
/// order) are exactly `expect` (`delete`, `insert`, `update`), each with
/// the images the write had: `row` before the delete, `before` as the
/// insert stored it, `after` as the update left it; an error naming the
/// first entry that differs.
pub(crate) fn check(
    name: &str,
    expect: &[&str],
    row: &Row,
    before: &Row,
    after: &Row,
    entries: &[JournalEntry],
) -> Result<()> {
    // What each entry must hold: the row as stored before and after it.
    let images = |op: &str| -> (Option<&Row>, Option<&Row>) {
        match op {
            "delete" => (Some(row), None),
            "insert" => (None, Some(before)),
            _ => (Some(before), Some(after)),
        }
    };
    let ops: Vec<&str> = entries.iter().map(|e| e.op.as_str()).collect();
    let exact = entries.len() >= expect.len()
        && entries.iter().zip(expect).all(|(e, op)| {
            let (old, new) = images(op);
            e.op.as_str() == *op
                && (old.is_none() || e.old.as_ref() == old)
                && (new.is_none() || e.new.as_ref() == new)
        });
    if !exact {
        let first_differing = entries.iter().zip(expect).find(|(e, op)| {
            let (old, new) = images(op);
            (old.is_some() && e.old.as_ref() != old) || (new.is_some() && e.new.as_ref() != new)
        });
        bail!(
            "writing one row of '{name}' ({}) journaled {} entries ({}) instead of those, with the row as stored around each write as their images{}",
            expect.join(", "),
            entries.len(),
            ops.join(", "),
            match first_differing {
                Some((e, op)) => {
                    let (old, new) = images(op);
                    let show = |r: Option<&Row>| {
                        r.map_or("-".to_string(), |r| crate::value::display_key(r))
                    };
                    format!(
                        "; the table held {} / {} but seq {} journaled {} / {}",
                        show(old),
                        show(new),
                        e.seq,
                        show(e.old.as_ref()),
                        show(e.new.as_ref())
                    )
                }
                None => String::new(),
            }
        );
    }
    Ok(())
}
