//! MySQL and MariaDB, the third engine: one type, [`MySql`], one
//! connection to a database of a server, registered as `mysql://` and
//! `mariadb://` in [`crate::db::engines`].
//!
//! One concept per file: [`url`] (the spec's URL and its TLS modes),
//! [`client`] (the connection, its session settings, transactions and
//! errors), [`types`] (column types to values and back, with [`numeric`]
//! and [`datetime`]), [`scan`] (key-ordered streaming reads and counts),
//! and one file per engine interface: [`connection`], [`control`] (the
//! control store's dialect), [`catalogue`] (tables, columns, keys,
//! foreign keys, triggers, `AUTO_INCREMENT`, key collations),
//! [`table_sql`] with [`rows`], [`capture`], [`journal_log`], [`fence`],
//! [`fixtures`] and [`side_effects`]; [`digest`], the gate's digests
//! computed inside the server.
//!
//! MySQL as a source is built: `check`, `load` and `gate` read it, and the
//! rollback writes the journal back into it (replay's writes, the control
//! store, `AUTO_INCREMENT`, its hold on foreign keys and triggers). As a
//! target, `load` writes it (multi-row `INSERT` batches, each committed
//! with its checkpoint), the gate's rehearsal writes it in a transaction
//! it rolls back, the journal is built ([`capture`] installs its `AFTER`
//! row triggers, [`journal_log`] reads its entries back), and so is the
//! write fence ([`fence`]: `BEFORE` triggers that `SIGNAL`); what is not
//! built yet refuses, exit 2, naming what is not supported and what to use
//! instead ([`not_yet`]).
//!
//! Identifiers go through [`quote_ident`]; values are always bound as
//! parameters of the binary protocol, never spliced into a statement.

pub mod capture;
pub mod catalogue;
pub mod client;
pub mod connection;
pub mod control;
pub mod datetime;
pub mod digest;
pub mod fence;
pub mod fixtures;
pub mod journal_log;
pub mod numeric;
pub mod option_file;
pub mod rows;
pub mod scan;
pub mod side_effects;
pub mod table_sql;
pub mod types;
pub mod url;

impl crate::db::Database for MySql {}

/// The refusal of what MySQL cannot do yet: what, and what to use instead.
pub(crate) fn not_yet(what: &str) -> String {
    format!(
        "{what} is not supported on MySQL yet (docs/engines.md, MySQL and MariaDB): use a PostgreSQL or SQLite target for this step"
    )
}

pub use client::{Flavor, MySql, ServerInfo};
pub use url::{MyUrl, is_mysql};

/// Quotes an identifier in backticks, doubling any backtick in it.
pub fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_hostile_names() {
        assert_eq!(quote_ident("a`b"), "`a``b`");
        assert_eq!(quote_ident("x\"; DROP"), "`x\"; DROP`");
    }
}
