//! A database cutover only reads: an engine that implements the read side
//! alone ([`Source`]: its connection, catalogue and rows) is opened as one
//! ([`super::Db::read_only`]), and this stand-in answers for its write side
//! — the control store, the journal, the fence, a source's side effects,
//! fixture SQL — by refusing, naming the database and what cutover does
//! with it. Such an engine writes none of the write side's methods.
//!
//! [`Source`]: super::Source

use anyhow::{Result, anyhow};

use super::control::Statement;
use super::types::{
    Decision, Extent, JournalCount, Journaled, Powers, Probe, Run, SeqRange, SideEffect, Unproven,
};
use super::{Capture, ControlSql, Fence, Fixtures, JournalLog, RunShape, SideEffects};
use crate::value::{Row, Value};

/// The write side of a database opened read-only.
pub(crate) struct ReadOnly {
    /// Where the database is, as messages name it.
    pub(crate) location: String,
}

impl ReadOnly {
    /// Why `what` is refused, before anything is written.
    fn refusal(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "{} is opened read-only: cutover reads it as a source (check, load, gate, sync) and cannot {what} there; nothing was written",
            self.location
        )
    }

    fn refuse<T>(&self, what: &str) -> Result<T> {
        Err(self.refusal(what))
    }
}

impl ControlSql for ReadOnly {
    fn control_execute(&self, _st: &Statement) -> Result<u64> {
        self.refuse("keep control tables")
    }

    fn control_query(&self, _st: &Statement) -> Result<Vec<Row>> {
        self.refuse("keep control tables")
    }
}

impl Capture for ReadOnly {
    fn image_for(&self, _name: &str, _table: &str, _columns: &[&str]) -> Result<i64> {
        self.refuse("install a journal")
    }

    fn install_journal(&self, _table: &Journaled<'_>) -> Result<usize> {
        self.refuse("install a journal")
    }

    fn prove_journals(&self, _tables: &[Journaled<'_>]) -> Result<(), Unproven> {
        Err(Unproven {
            table: 0,
            error: self.refusal("install a journal"),
        })
    }

    fn stale_journal_triggers(&self, _table: &Journaled<'_>) -> Result<Vec<String>> {
        self.refuse("keep a journal")
    }

    fn remove_journal(&self, _table: &str) -> Result<()> {
        self.refuse("keep a journal")
    }

    fn journal_image_tables(&self) -> Result<Vec<String>> {
        self.refuse("keep a journal")
    }
}

impl JournalLog for ReadOnly {
    fn journal_counts(&self, _range: SeqRange) -> Result<Vec<JournalCount>> {
        self.refuse("keep a journal")
    }

    fn journal_extent(&self) -> Result<Extent> {
        self.refuse("keep a journal")
    }

    fn journal_run(&self, _after: i64, _upto: i64, _shape: &RunShape<'_>) -> Result<Run> {
        self.refuse("keep a journal")
    }

    fn journal_digest(&self) -> Result<String> {
        self.refuse("keep a journal")
    }
}

impl Fence for ReadOnly {
    fn drain_writers(&self, _tables: &[&str]) -> Result<()> {
        self.refuse("fence writers out")
    }

    fn change_token(&self) -> Result<i64> {
        self.refuse("fence writers out")
    }

    fn install_fence_triggers(&self, _table: &str, _message: &str) -> Result<()> {
        self.refuse("fence writers out")
    }

    fn install_fence_guard(&self, _row: &str, _ddl: &str) -> Result<Option<String>> {
        self.refuse("fence writers out")
    }

    fn remove_fence(&self, _tables: &[&str], _keep: Option<&[String]>) -> Result<()> {
        self.refuse("fence writers out")
    }

    fn probe_writes(&self, _table: &str) -> Result<Vec<Probe>> {
        self.refuse("fence writers out")
    }
}

impl Fixtures for ReadOnly {
    fn execute_script(&self, _sql: &str) -> Result<()> {
        self.refuse("run fixture SQL")
    }
}

impl SideEffects for ReadOnly {
    fn side_effects(&self, _table: &str) -> Result<Vec<SideEffect>> {
        self.refuse("replay into it")
    }

    fn powers(&self, _tables: &[&str]) -> Result<Powers> {
        self.refuse("replay into it")
    }

    fn hold_side_effects(
        &self,
        _decided: &[(SideEffect, Decision)],
        _powers: &Powers,
    ) -> Result<()> {
        self.refuse("replay into it")
    }

    fn referencing_rows(
        &self,
        _effect: &SideEffect,
        _parent: &[Value],
        _limit: usize,
    ) -> Result<Vec<String>> {
        self.refuse("replay into it")
    }

    fn referencing_tables(&self, _table: &str) -> Result<Vec<String>> {
        self.refuse("replay into it")
    }
}
