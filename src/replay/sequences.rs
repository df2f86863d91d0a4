//! The source's id generators carried past the target's once the journal
//! is applied, so that the source, in use again, never hands out an id
//! already used.

use anyhow::Result;

use crate::db::{Catalogue, CatalogueExt, Db};
use crate::spec::Spec;

/// Moves each source table's id generators past the target's and past
/// every id the source table now holds (`Catalogue::raise_sequence`), so
/// that the source, in use again, never hands out an id already used. Its
/// own transaction after the last batch; a rerun does it again.
pub fn carry_sequences(spec: &Spec, source: &Db, target: &dyn Catalogue) -> Result<()> {
    let marks: Vec<(&str, Option<i64>)> = spec
        .tables
        .iter()
        .map(|t| Ok((t.source_table.as_str(), target.sequence(&t.target_table)?)))
        .collect::<Result<_>>()?;
    source.write(|| {
        marks
            .iter()
            .try_for_each(|(t, n)| source.catalogue().raise_sequence(t, n.unwrap_or(0)))
    })
}
