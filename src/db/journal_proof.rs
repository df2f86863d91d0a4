//! The proof that a table's journal triggers journal what is written:
//! the check every engine's [`super::Capture::prove_journals`] makes of the
//! entries its rolled-back writes left, against the row as the table held
//! it around each write.

use anyhow::{Result, bail};

use super::JournalEntry;
use crate::value::Row;

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
