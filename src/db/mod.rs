//! Database access. Every statement the tool runs is written under this module
//! (and `sql/`); the rest of the crate speaks in tables, keys and rows.
//!
//! SQLite is the one engine today ([`sqlite::Db`]). docs/architecture.md
//! groups its methods into the interfaces a second engine implements.

pub mod csv;
pub mod sqlite;

pub use sqlite::constraint_violation;

pub use sqlite::{
    Access, ColumnInfo, Db, FenceRecord, Inserter, JOURNAL_TRIGGERS_PER_TABLE, JournalEntry,
    TableSql,
};
