//! MySQL and MariaDB: the ground floor of a third engine, one type,
//! [`MySql`], one connection to a database of a server. Not yet selectable
//! in a spec (no `mysql://` entry in [`crate::db::engines`]); the engine
//! interfaces will be implemented over what is here.
//!
//! One concept per file: [`url`] (the spec's URL and its TLS modes),
//! [`client`] (the connection, its session settings, transactions and
//! errors), [`types`] (column types to values and back, with [`numeric`]
//! and [`datetime`]), [`catalogue`] (tables, columns, keys, foreign keys,
//! triggers, `AUTO_INCREMENT`, key collations) and [`scan`] (key-ordered
//! streaming reads and counts).
//!
//! Identifiers go through [`quote_ident`]; values are always bound as
//! parameters of the binary protocol, never spliced into a statement.

pub mod catalogue;
pub mod client;
pub mod datetime;
pub mod numeric;
pub mod scan;
pub mod types;
pub mod url;

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
