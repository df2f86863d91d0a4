//! Transactions as guards: a [`Transaction`] or [`Savepoint`] rolls back
//! when it is dropped without being committed or released, as rusqlite's
//! `Transaction` does, so no path out of a batch (an error, an early
//! return, a panic unwinding) leaves it open or half-applied. Outside
//! `src/db/` nobody begins or commits by hand: a run opens a guard
//! ([`super::Db::begin_write`], [`super::Db::begin_read`],
//! [`super::Db::savepoint`]) or hands a closure to [`super::Db::write`].
//!
//! An engine implements one primitive, [`super::Connection::transaction`],
//! which runs a [`Step`]; the guards are the only callers.

use anyhow::Result;

use super::Connection;

/// One step of a transaction, as the engine runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A write transaction holding the write lock now, so what is read
    /// inside it cannot change before it commits (SQLite: `BEGIN
    /// IMMEDIATE`; PostgreSQL: `REPEATABLE READ`).
    BeginWrite,
    /// A transaction whose reads all see one snapshot, for a reader that
    /// asks many questions of one state (the gate in digest mode).
    BeginRead,
    Commit,
    /// Rolls back if a transaction is open; never fails.
    Rollback,
    /// A nested transaction inside the open one (a dry run's batch).
    Savepoint,
    /// Keeps the nested transaction's work in the open one.
    Release,
    /// Undoes the nested transaction's work and closes it; never fails.
    RollbackSavepoint,
    /// Leaves the open transaction's `DEFERRABLE` foreign keys unchecked
    /// until its commit (PostgreSQL: `SET CONSTRAINTS ALL DEFERRED`), so
    /// that the rows of tables whose keys refer to each other in a cycle
    /// can be written in any order; nothing on SQLite, whose connections
    /// cutover opens without enforcing foreign keys, nor on MySQL.
    DeferForeignKeys,
}

/// An open transaction: committed by [`Transaction::commit`], rolled back
/// by [`Transaction::rollback`] or when dropped.
#[must_use = "a transaction dropped at once is rolled back at once"]
pub struct Transaction<'a> {
    conn: &'a dyn Connection,
    open: bool,
}

impl<'a> Transaction<'a> {
    /// Begins a write transaction (`write`) or a read transaction on one
    /// snapshot, on an engine's connection (the crate opens them through
    /// [`super::Db`]).
    pub fn begin(conn: &'a dyn Connection, write: bool) -> Result<Transaction<'a>> {
        conn.transaction(if write {
            Step::BeginWrite
        } else {
            Step::BeginRead
        })?;
        Ok(Transaction { conn, open: true })
    }

    /// Commits. A commit that fails is rolled back: the database is as
    /// it was before the transaction.
    pub fn commit(mut self) -> Result<()> {
        let r = self.conn.transaction(Step::Commit);
        // A failed commit leaves the guard open, and its drop rolls back.
        self.open = r.is_err();
        r
    }

    /// Rolls back now (what dropping the guard does).
    pub fn rollback(self) {}

    /// Leaves the transaction's deferrable foreign keys unchecked until
    /// its commit ([`Step::DeferForeignKeys`]).
    pub fn defer_foreign_keys(&self) -> Result<()> {
        self.conn.transaction(Step::DeferForeignKeys)
    }

    /// Runs `f` inside the transaction: committed when it returns `Ok`,
    /// rolled back when it fails, so the database is either changed whole
    /// or exactly as before.
    pub fn run<T>(self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let v = f()?;
        self.commit()?;
        Ok(v)
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.transaction(Step::Rollback);
        }
    }
}

/// A nested transaction inside the open one: kept by
/// [`Savepoint::release`], undone by [`Savepoint::rollback`] or when
/// dropped.
#[must_use = "a savepoint dropped at once is rolled back at once"]
pub struct Savepoint<'a> {
    conn: &'a dyn Connection,
    open: bool,
}

impl<'a> Savepoint<'a> {
    /// Opens a savepoint in the transaction open on `conn`.
    pub fn open(conn: &'a dyn Connection) -> Result<Savepoint<'a>> {
        conn.transaction(Step::Savepoint)?;
        Ok(Savepoint { conn, open: true })
    }

    /// Keeps its work in the enclosing transaction.
    pub fn release(mut self) -> Result<()> {
        let r = self.conn.transaction(Step::Release);
        self.open = r.is_err();
        r
    }

    /// Undoes its work now (what dropping the guard does).
    pub fn rollback(self) {}
}

impl Drop for Savepoint<'_> {
    fn drop(&mut self) {
        if self.open {
            let _ = self.conn.transaction(Step::RollbackSavepoint);
        }
    }
}
