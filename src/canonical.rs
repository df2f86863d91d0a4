//! The canonical view of a source row: its values forward-transformed and
//! checked, in target form, which reconcile, check, load, sync and the apply
//! engine all compare and write. One place, so every command reads a source
//! row the same way.

use crate::spec::{Column, Table};
use crate::value::{Block, CellRef, Row, Value};

/// Forward-transforms and checks one source row (paths that are not hot).
pub fn canonical(table: &Table, row: Row) -> Result<Row, (Row, String, Value, String)> {
    let mut out = Vec::with_capacity(row.len());
    for (col, v) in table.columns.iter().zip(row.iter()) {
        let fwd = match col.transform.forward_ref(v.as_cell()) {
            Ok((f, _)) => f,
            Err(r) => {
                return Err((
                    row[..table.key_len].to_vec(),
                    col.source.clone(),
                    v.clone(),
                    r.0,
                ));
            }
        };
        if let Err(why) = col.checks.check_ref(fwd) {
            return Err((
                row[..table.key_len].to_vec(),
                col.source.clone(),
                v.clone(),
                why,
            ));
        }
        out.push(fwd.to_value());
    }
    Ok(out)
}

/// Something to say about one row of a [`CanonBlock`].
#[derive(Debug)]
pub enum Note {
    /// The row cannot be carried across: `(column, value, reason)`. Its key
    /// cells are in the block; the rest are NULL.
    Invalid(String, Value, String),
    /// Accepted, but the text of this column is not canonical:
    /// `(column index, source value, canonical text)`.
    NonCanonical(usize, Value, Value),
}

/// Source rows in canonical (target) form, with notes on the rows that are
/// invalid or not canonical, kept sparse: `(row, note)` in row order.
#[derive(Debug, Default)]
pub struct CanonBlock {
    pub rows: Block,
    pub notes: Vec<(usize, Note)>,
}

/// How one source row forwarded.
pub enum Forwarded {
    Ok,
    /// Forwarded, but a text was not canonical.
    NonCanonical(Note),
    /// Cannot be carried across; the forwarded cells are incomplete.
    Invalid(Note),
}

/// Forward-transforms and checks row `r` of a block of source rows into
/// `out` (one cell per spec column), borrowing: no allocation unless the
/// row needs a note.
#[inline]
pub fn forward_row<'a>(
    table: &'a Table,
    raw: &'a Block,
    r: usize,
    out: &mut [CellRef<'a>],
) -> Forwarded {
    let mut nc = None;
    for (c, col) in table.columns.iter().enumerate() {
        let v = raw.get(r, c);
        if c < table.key_len && v == CellRef::Null {
            return null_key(col);
        }
        match col.transform.forward_into(v, &mut out[c]) {
            Ok(canonical) => {
                if let Err(why) = col.checks.check_ref(out[c]) {
                    return invalid(col, v, why);
                }
                if !canonical && nc.is_none() {
                    nc = Some(non_canonical(c, col, v, out[c]));
                }
            }
            Err(rej) => return invalid(col, v, rej.0),
        }
    }
    match nc {
        Some(n) => Forwarded::NonCanonical(n),
        None => Forwarded::Ok,
    }
}

// The notes are built out of line: they are rare, and building them inline
// would weigh on every row's call.

#[cold]
#[inline(never)]
fn null_key(col: &Column) -> Forwarded {
    Forwarded::Invalid(Note::Invalid(
        col.source.clone(),
        Value::Null,
        format!(
            "key column '{}' is null: the row has no identity",
            col.source
        ),
    ))
}

#[cold]
#[inline(never)]
fn invalid(col: &Column, v: CellRef<'_>, why: String) -> Forwarded {
    Forwarded::Invalid(Note::Invalid(col.source.clone(), v.to_value(), why))
}

#[cold]
#[inline(never)]
fn non_canonical(c: usize, col: &Column, v: CellRef<'_>, f: CellRef<'_>) -> Note {
    let back = col.transform.reverse(&f.to_value()).unwrap_or(Value::Null);
    Note::NonCanonical(c, v.to_value(), back)
}

/// Forward-transforms a block of source rows: load's input.
pub fn canonical_block(table: &Table, raw: &Block) -> CanonBlock {
    let width = table.columns.len();
    let mut out = CanonBlock {
        rows: Block::new(width, raw.rows()),
        notes: Vec::new(),
    };
    let mut fwd = vec![CellRef::Null; width];
    for r in 0..raw.rows() {
        match forward_row(table, raw, r, &mut fwd) {
            Forwarded::Invalid(note) => {
                for c in 0..width {
                    out.rows.push(if c < table.key_len {
                        raw.get(r, c)
                    } else {
                        CellRef::Null
                    });
                }
                out.notes.push((r, note));
            }
            other => {
                for &f in fwd.iter() {
                    out.rows.push(f);
                }
                if let Forwarded::NonCanonical(note) = other {
                    out.notes.push((r, note));
                }
            }
        }
    }
    out
}
