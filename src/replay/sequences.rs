//! The source's id generators carried past the target's once the journal
//! is applied, so that the source, in use again, never hands out an id
//! already used.

use anyhow::Result;

use crate::db::{Catalogue, CatalogueExt, Db};
use crate::spec::Spec;

/// Moves each source table's id generators past the target's and past
/// every id the source table now holds (`Catalogue::raise_sequence`), so
/// that the source, in use again, never hands out an id already used. Its
/// own transaction after the last batch (statement by statement where
/// moving a generator commits at once, MySQL's `ALTER TABLE …
/// AUTO_INCREMENT`); a rerun does it again, moving only what is not past.
pub fn carry_sequences(spec: &Spec, source: &Db, target: &dyn Catalogue) -> Result<()> {
    let marks: Vec<(&str, Option<i64>)> = spec
        .tables
        .iter()
        .map(|t| Ok((t.source_table.as_str(), target.sequence(&t.target_table)?)))
        .collect::<Result<_>>()?;
    source.schema_change(|| {
        marks
            .iter()
            .try_for_each(|(t, n)| source.catalogue().raise_sequence(t, n.unwrap_or(0)))
    })
}
