//! The engines cutover opens, each under its URL schemes, with what it can
//! do: the one place a location is matched to an engine. Another engine is
//! one entry here and the type that implements [`super::Database`].

use anyhow::{Result, bail};

use super::control::Dialect;
use super::{Access, Db, mysql, postgres, sqlite};
use crate::spec::{Location, Side};

/// What an engine can do that others cannot: the domain asks these instead
/// of asking which engine it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Schema changes (`CREATE`, `ALTER`, `DROP`) inside a transaction are
    /// undone with it. Where they are not (MySQL commits at each), an
    /// install is idempotent and runs outside the data's transaction.
    pub transactional_ddl: bool,
    /// A URL names a schema of a database (`?schema=NAME`), which a drill
    /// can make for itself and drop afterwards.
    pub schemas: bool,
    /// A column of a date or time type holds only dates or times and is
    /// ordered as them, whatever the width of their text (a server drops a
    /// fraction's trailing zeros). SQLite's `DATE` or `TIMESTAMP` column
    /// holds any text and orders it as text.
    pub typed_times: bool,
}

/// One engine: its name, the schemes of its URLs, and how it is opened.
pub struct Engine {
    /// How messages name it.
    pub name: &'static str,
    /// How the control store writes its tables on it.
    pub dialect: &'static Dialect,
    /// How many journal triggers a journaled table has on it.
    pub journal_triggers: usize,
    /// The URL schemes it answers to, the first the one messages show.
    pub schemes: &'static [&'static str],
    /// How a URL of it is written, for messages that say what to write.
    pub form: &'static str,
    pub capabilities: Capabilities,
    /// The DDL of a CHECK on a table of this engine that holds a column to
    /// the other side's bound (table, column, bound): what `check` prints
    /// beside a hazard ([`super::bounds`]); `None` where it has none.
    pub bound_check: fn(&str, &str, &super::Limit) -> Option<String>,
    /// When an error is the server refusing a row (a constraint, a value
    /// its column cannot hold, a trigger raising one), what it said:
    /// [`super::constraint_violation`] asks it.
    pub refusal: fn(&anyhow::Error) -> Option<String>,
    /// Opens a database of this engine at a location of its kind.
    open: fn(&Location, Access, Side) -> Result<Db>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl Engine {
    /// Opens a database of this engine (see [`super::Db::open`]).
    pub(super) fn open(
        &'static self,
        location: &Location,
        access: Access,
        side: Side,
    ) -> Result<Db> {
        (self.open)(location, access, side)
    }
}

pub static SQLITE: Engine = Engine {
    name: "SQLite",
    dialect: &sqlite::control::DIALECT,
    journal_triggers: sqlite::JOURNAL_TRIGGERS_PER_TABLE,
    schemes: &["sqlite"],
    form: "sqlite://PATH",
    capabilities: Capabilities {
        transactional_ddl: true,
        schemas: false,
        typed_times: false,
    },
    bound_check: super::bounds::sqlite,
    refusal: sqlite::constraint_violation,
    open: |location, access, side| match location {
        Location::Sqlite(path) => {
            let db = sqlite::Sqlite::open(path, access, side)?;
            let at = db.location().to_string();
            Ok(Db::new(db, &SQLITE, at))
        }
        other => bail!("{side} {} is not a SQLite file", other.display()),
    },
};

pub static POSTGRES: Engine = Engine {
    name: "PostgreSQL",
    dialect: &postgres::control::DIALECT,
    journal_triggers: postgres::capture::TRIGGER_NAMES.len(),
    schemes: &["postgres", "postgresql"],
    form: "postgres://USER@HOST:PORT/DB?schema=NAME",
    capabilities: Capabilities {
        transactional_ddl: true,
        schemas: true,
        typed_times: true,
    },
    bound_check: super::bounds::postgres,
    refusal: postgres::constraint_violation,
    open: |location, access, side| match location {
        Location::Server(url) => {
            let db = postgres::Postgres::open(url, access, side)?;
            let at = db.location().to_string();
            Ok(Db::new(db, &POSTGRES, at))
        }
        other => bail!("{side} {} is not a PostgreSQL URL", other.display()),
    },
};

/// MySQL and MariaDB: schema changes commit at once, a URL names one
/// database (MySQL's schema); digests inside the server
/// ([`mysql::digest`]); a source replay writes back into, and a target
/// `load`, `sync` and the gate's rehearsal write.
pub static MYSQL: Engine = Engine {
    name: "MySQL",
    dialect: &mysql::control::DIALECT,
    journal_triggers: mysql::capture::JOURNAL_TRIGGERS,
    schemes: &["mysql"],
    form: "mysql://USER@HOST:PORT/DB",
    capabilities: Capabilities {
        transactional_ddl: false,
        schemas: false,
        typed_times: true,
    },
    bound_check: super::bounds::mysql,
    // Every refused row is a `ValueRefused` already, made where the
    // engine writes (`mysql::rows`).
    refusal: |_| None,
    open: |location, access, side| match location {
        Location::Server(url) => {
            let db = mysql::MySql::open(url, access, side)?;
            let at = db.location().to_string();
            Ok(Db::new(db, &MYSQL, at))
        }
        other => bail!("{side} {} is not a MySQL URL", other.display()),
    },
};

/// Every engine, in the order messages list them.
static ENGINES: [&Engine; 3] = [&SQLITE, &POSTGRES, &MYSQL];

/// Every engine cutover opens, in the order messages list them.
pub fn all() -> impl Iterator<Item = &'static Engine> {
    ENGINES.into_iter()
}

/// The engine a URL's scheme names; `None` when no engine answers to it.
pub fn for_url(url: &str) -> Option<&'static Engine> {
    let (scheme, _) = url.split_once("://")?;
    ENGINES
        .into_iter()
        .find(|e| e.schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme)))
}

/// The engine of a location (a CSV snapshot has none: it is read into a
/// temporary SQLite database first).
pub fn for_location(location: &Location, side: Side) -> Result<&'static Engine> {
    match location {
        Location::Sqlite(_) => Ok(&SQLITE),
        Location::Server(url) => match for_url(url) {
            Some(e) => Ok(e),
            None => bail!(
                "{side} url '{}' is not supported; write {}",
                location.display(),
                forms()
            ),
        },
        Location::Csv(path) => bail!(
            "{side} {} is a CSV snapshot, not a database; only a source can be one",
            path.display()
        ),
    }
}

/// How each engine's URL is written, for messages.
pub fn forms() -> String {
    let mut out: Vec<&str> = ENGINES.iter().map(|e| e.form).collect();
    out.push("or csv://PATH for a source snapshot");
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_finds_its_engine_by_scheme_alone() {
        assert_eq!(
            for_url("postgres://me@h/db").map(|e| e.name),
            Some("PostgreSQL")
        );
        assert_eq!(
            for_url("PostgreSQL://me@h/db").map(|e| e.name),
            Some("PostgreSQL")
        );
        assert_eq!(for_url("sqlite://a.db").map(|e| e.name), Some("SQLite"));
        assert_eq!(for_url("mysql://me@h/db").map(|e| e.name), Some("MySQL"));
        assert!(for_url("mssql://me@h/db").is_none());
        assert!(for_url("postgres-ish").is_none());
    }

    #[test]
    fn an_unknown_scheme_is_refused_naming_what_to_write() {
        let e = for_location(&Location::Server("mssql://u:pw@h/db".into()), Side::Source)
            .expect_err("no such engine");
        let text = e.to_string();
        assert!(text.contains("mssql://u:***@h/db"), "{text}");
        assert!(
            text.contains("postgres://") && text.contains("sqlite://") && text.contains("mysql://"),
            "{text}"
        );
    }
}
