//! Database access. Every statement the tool runs is written under this module
//! (and `sql/`); the rest of the crate speaks in tables, keys and rows.
//!
//! SQLite is the one engine today ([`sqlite::Db`]). When a second engine
//! arrives, `Db` becomes a trait with this same surface, and reconcile, apply
//! and replay do not change.

pub mod csv;
pub mod sqlite;

pub use sqlite::constraint_violation;

pub use sqlite::{Access, ColumnInfo, Db, FenceRecord, Inserter, JournalEntry, TableSql};
