//! The engine interfaces as the tests ask them, in a few words: a page of
//! the journal, one table's journal proved or installed, cutover's own
//! triggers on a table, the journal's entries counted per op. Each is one
//! call of the interface (`cutover::db::interfaces`), nothing else.

use anyhow::Result;
use cutover::db::{Db, JournalEntry, JournalLogExt, JournalTable, Journaled, RunShape};

/// A spec table as the journal records it.
pub fn journaled<'a>(
    name: &'a str,
    table: &'a str,
    columns: &'a [&'a str],
    key_len: usize,
) -> Journaled<'a> {
    Journaled {
        name,
        table,
        columns,
        key_len,
    }
}

pub trait Seam {
    /// Entries with `after < seq <= upto`, at most `limit`, in seq order,
    /// every value whole.
    fn journal_page(&self, after: i64, upto: i64, limit: usize) -> Result<Vec<JournalEntry>>;
    /// One table's journal proved with writes rolled back.
    fn prove_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<()>;
    /// One table's journal triggers installed; how many were.
    fn install_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<usize>;
    /// One table's journal triggers out of date.
    fn stale_journal_triggers(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<Vec<String>>;
    fn fence_triggers(&self, table: &str) -> Result<usize>;
    fn journal_triggers(&self, table: &str) -> Result<usize>;
    /// Every journaled table and column list.
    fn journal_tables(&self) -> Result<Vec<JournalTable>>;
    /// Entries with `after < seq <= upto` per op, the ops in byte order,
    /// only those the range has.
    fn journal_pending_counts(&self, after: i64, upto: i64) -> Result<Vec<(String, i64)>>;
}

impl Seam for Db {
    fn journal_page(&self, after: i64, upto: i64, limit: usize) -> Result<Vec<JournalEntry>> {
        let whole = |_: i64, _: usize, _: bool| false;
        let shape = RunShape {
            limit,
            bytes: usize::MAX,
            digest: &whole,
        };
        Ok(self.journal().journal_run(after, upto, &shape)?.entries)
    }

    fn prove_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<()> {
        self.capture()
            .prove_journals(&[journaled(name, table, columns, key_len)])
            .map_err(|u| u.error)
    }

    fn install_journal(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<usize> {
        self.capture()
            .install_journal(&journaled(name, table, columns, key_len))
    }

    fn stale_journal_triggers(
        &self,
        name: &str,
        table: &str,
        columns: &[&str],
        key_len: usize,
    ) -> Result<Vec<String>> {
        self.capture()
            .stale_journal_triggers(&journaled(name, table, columns, key_len))
    }

    fn fence_triggers(&self, table: &str) -> Result<usize> {
        Ok(self.catalogue().own_triggers(table)?.fence)
    }

    fn journal_triggers(&self, table: &str) -> Result<usize> {
        Ok(self.catalogue().own_triggers(table)?.journal)
    }

    fn journal_tables(&self) -> Result<Vec<JournalTable>> {
        self.identity().images()
    }

    fn journal_pending_counts(&self, after: i64, upto: i64) -> Result<Vec<(String, i64)>> {
        let c = self.journal().counts_by_op(after, upto)?;
        Ok([
            ("delete", c.delete),
            ("insert", c.insert),
            ("update", c.update),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(o, n)| (o.to_string(), n))
        .collect())
    }
}
