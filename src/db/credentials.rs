//! Where what a server's URL leaves out comes from: the process's
//! environment, the home folder and the login name (or, in tests, given
//! ones), and the variable that gives one side's password.
//!
//! Source and target may be two servers with two passwords, so beside each
//! engine's own variable (`PGPASSWORD`, `MYSQL_PWD`), which both sides
//! share, `CUTOVER_SOURCE_PASSWORD` and `CUTOVER_TARGET_PASSWORD` give one
//! side's: below the URL's password, above the engine's variable and its
//! password file. A URL's escapes are decoded here too, alike for every
//! server.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::spec::Side;

/// Where a connection's password came from (never the password).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordFrom {
    Url,
    /// A variable: the engine's own (`PGPASSWORD`, `MYSQL_PWD`), or the
    /// side's.
    Environment(&'static str),
    /// The engine's password file (PostgreSQL's `.pgpass`, MySQL's option
    /// file).
    File(PathBuf),
}

impl PasswordFrom {
    /// Where, as messages say it; `file` is what the engine calls its
    /// password file.
    pub fn shown(&self, file: &str) -> String {
        match self {
            PasswordFrom::Url => "the URL".to_string(),
            PasswordFrom::Environment(name) => name.to_string(),
            PasswordFrom::File(p) => format!("the {file} {}", p.display()),
        }
    }
}

/// Decodes the `%XX` escapes of a part of a server's URL (a user, a
/// password, a database or schema name, a parameter's value), named by
/// `what` in messages, never shown. A `%` not followed by two hex digits is
/// refused rather than kept as it is: a URL that means something else than
/// it says is an error to fix.
pub fn percent_decode(s: &str, what: &str) -> Result<String> {
    let b = s.as_bytes();
    let escape =
        |i: usize| i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
    if (0..b.len()).any(|i| b[i] == b'%' && !escape(i)) {
        bail!("the {what} has a % that is not followed by two hex digits");
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .with_context(|| format!("the {what} is not UTF-8 once decoded"))
}

/// How a variable of the environment is read.
type Lookup = Box<dyn Fn(&str) -> Option<String>>;

/// The environment a URL is completed from.
pub struct Env {
    var: Lookup,
    pub home: Option<PathBuf>,
    pub login: Option<String>,
    /// The side whose URL this is, when it is one: it chooses the side's
    /// password variable.
    pub side: Option<Side>,
}

impl Env {
    /// The process's environment, for the database of `side`.
    pub fn process(side: Side) -> Env {
        Env {
            var: Box::new(|k| std::env::var(k).ok().filter(|v| !v.is_empty())),
            home: std::env::home_dir(),
            login: whoami::username().ok(),
            side: Some(side),
        }
    }

    /// Given variables, home folder and login name, for no side.
    pub fn given(vars: &[(&str, &str)], home: Option<PathBuf>, login: &str) -> Env {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Env {
            var: Box::new(move |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())),
            home,
            login: Some(login.to_string()),
            side: None,
        }
    }

    /// The same environment, for `side`'s URL.
    pub fn for_side(mut self, side: Side) -> Env {
        self.side = Some(side);
        self
    }

    /// A variable's value; an empty one is no value.
    pub fn var(&self, name: &str) -> Option<String> {
        (self.var)(name).filter(|v| !v.is_empty())
    }

    /// The side's own password, from its variable: `(variable, password)`.
    pub fn side_password(&self) -> Option<(&'static str, String)> {
        let name = self.side?.password_variable();
        self.var(name).map(|p| (name, p))
    }
}

/// Says `warning` on stderr, once per process (a command opens the same
/// database more than once): a password or option file that was not read.
pub fn warn_once(warning: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == warning) {
        eprintln!("cutover: warning: {warning}");
        said.push(warning.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_reads_its_own_variable_and_no_other() {
        let vars = [
            ("CUTOVER_SOURCE_PASSWORD", "s"),
            ("CUTOVER_TARGET_PASSWORD", "t"),
        ];
        let env = || Env::given(&vars, None, "login");
        assert_eq!(env().side_password(), None);
        assert_eq!(
            env().for_side(Side::Source).side_password(),
            Some(("CUTOVER_SOURCE_PASSWORD", "s".to_string()))
        );
        assert_eq!(
            env().for_side(Side::Target).side_password(),
            Some(("CUTOVER_TARGET_PASSWORD", "t".to_string()))
        );
        let empty = Env::given(&[("CUTOVER_SOURCE_PASSWORD", "")], None, "login");
        assert_eq!(empty.for_side(Side::Source).side_password(), None);
    }
}
