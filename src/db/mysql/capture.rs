//! [`Capture`] on MySQL and MariaDB: not yet. A journal on MySQL needs
//! row triggers that keep the entries of one row in the order they
//! happened, images of a wide row within the 65,535-byte row limit, and
//! a refusal of what fires no trigger (cascaded rows, `TRUNCATE`); until
//! they are built every method refuses, naming what to use instead, so
//! that no command on a MySQL target pretends to journal.

use anyhow::{Result, bail};

use super::MySql;
use crate::db::{Capture, Journaled, Unproven};

/// The refusal of every journal operation on MySQL.
fn refused(db: &MySql) -> anyhow::Error {
    anyhow::anyhow!(
        "{}: {}",
        db.shown(),
        super::not_yet("the journal (journal install, status and remove) on a MySQL target")
    )
}

impl Capture for MySql {
    fn image_for(&self, _name: &str, _table: &str, _columns: &[&str]) -> Result<i64> {
        Err(refused(self))
    }

    fn install_journal(&self, _table: &Journaled<'_>) -> Result<usize> {
        Err(refused(self))
    }

    fn prove_journals(&self, _tables: &[Journaled<'_>]) -> Result<(), Unproven> {
        Err(Unproven {
            table: 0,
            error: refused(self),
        })
    }

    fn stale_journal_triggers(&self, _table: &Journaled<'_>) -> Result<Vec<String>> {
        Err(refused(self))
    }

    fn remove_journal(&self, _table: &str) -> Result<()> {
        Err(refused(self))
    }

    /// No journal tables exist on MySQL yet: nothing to guard.
    fn journal_image_tables(&self) -> Result<Vec<String>> {
        let tables = self.tables()?;
        if let Some(t) = tables
            .iter()
            .find(|t| t.name.starts_with("_cutover_journal"))
        {
            bail!(
                "{}: table '{}' looks like a journal of cutover's, which this version does not write on MySQL",
                self.shown(),
                t.name
            );
        }
        Ok(Vec::new())
    }
}
