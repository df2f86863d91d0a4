//! [`JournalLog`] on MySQL and MariaDB: not yet (see [`super::capture`]):
//! a MySQL target holds no journal, so every read of one refuses, naming
//! what to use instead.

use anyhow::{Result, bail};

use super::MySql;
use crate::db::{Extent, JournalCount, JournalLog, Run, RunShape, SeqRange};

impl MySql {
    fn no_journal<T>(&self) -> Result<T> {
        bail!(
            "{}: {}",
            self.shown(),
            super::not_yet("reading a journal (replay, status) from a MySQL target")
        )
    }
}

impl JournalLog for MySql {
    fn journal_counts(&self, _range: SeqRange) -> Result<Vec<JournalCount>> {
        self.no_journal()
    }

    fn journal_extent(&self) -> Result<Extent> {
        self.no_journal()
    }

    fn journal_run(&self, _after: i64, _upto: i64, _shape: &RunShape<'_>) -> Result<Run> {
        self.no_journal()
    }

    fn journal_digest(&self) -> Result<String> {
        self.no_journal()
    }
}
