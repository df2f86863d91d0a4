//! The MySQL option file a connection's user and password may come from,
//! as the `mysql` client reads it: `CUTOVER_MYSQL_OPTION_FILE` when it is
//! set, else `~/.my.cnf`. Its `[client]` group is read, then its
//! `[cutover]` group, whose options win; of them, cutover reads `user` and
//! `password` (the URL says the rest).
//!
//! The syntax is the `mysql` client's: `key=value`, spaces around `=`
//! ignored, a value in single or double quotes (which may then hold `#`),
//! the escapes `\n`, `\t`, `\r`, `\b`, `\s` and `\\` in a value, comment
//! lines starting `#` or `;`, and a `#` comment after an unquoted value.
//! What cutover cannot honour is refused rather than passed over:
//! `!include` and `!includedir` (the password may be in the file they
//! name), and a bare `password` (which asks the `mysql` client to prompt;
//! cutover never prompts). A file anyone may write is not read, as the
//! `mysql` client does not read it, and the operator is told.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The groups read, in order: a later group's options win.
const GROUPS: [&str; 2] = ["client", "cutover"];

/// What an option file gives a connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub user: Option<String>,
    pub password: Option<String>,
}

/// What reading the option file came to.
pub enum Read {
    /// No file there.
    Missing,
    /// Not read, and why (to warn of).
    Refused(String),
    Options(Options),
}

/// Reads the option file at `path`; a file that is there but cannot be
/// read or understood is an error that names it and its line.
pub fn read(path: &Path) -> Result<Read> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => bail!("reading the MySQL option file {}: {e}", path.display()),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_or(0, |m| m.permissions().mode());
        if mode & 0o002 != 0 {
            return Ok(Read::Refused(format!(
                "the MySQL option file {} is not read: anyone may write it (mode {:o}); chmod 0600 {}",
                path.display(),
                mode & 0o777,
                path.display()
            )));
        }
    }
    parse(&text).map(Read::Options).map_err(|e| {
        anyhow::anyhow!(
            "the MySQL option file {}: {e} (docs/engines.md, MySQL)",
            path.display()
        )
    })
}

/// The file to read: `CUTOVER_MYSQL_OPTION_FILE`'s, else `~/.my.cnf`.
pub fn path(named: Option<String>, home: Option<&Path>) -> Option<PathBuf> {
    named
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".my.cnf")))
}

/// The user and password of an option file's text.
pub fn parse(text: &str) -> Result<Options> {
    refuse_directives(text)?;
    let mut syntax = configparser::ini::Ini::new().defaults();
    syntax.comment_symbols = vec!['#', ';'];
    // A `#` may be inside a quoted value, which the parser's inline
    // comments would cut: [`value_of`] drops a trailing comment itself.
    syntax.enable_inline_comments = false;
    syntax.delimiters = vec!['='];
    syntax.multiline = false;
    let map = configparser::ini::Ini::new_from_defaults(syntax)
        .read(text.to_string())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Options::default();
    for group in GROUPS {
        let Some(options) = map.get(group) else {
            continue;
        };
        for (key, value) in options {
            let slot = match option_name(key).as_str() {
                "user" => &mut out.user,
                "password" => &mut out.password,
                _ => continue,
            };
            let Some(raw) = value else {
                bail!(
                    "[{group}] has a bare '{key}', which asks the mysql client to prompt; cutover never prompts: write {key}=… (or leave it out and set CUTOVER_SOURCE_PASSWORD / CUTOVER_TARGET_PASSWORD)"
                );
            };
            *slot = Some(value_of(raw).map_err(|e| anyhow::anyhow!("[{group}] {key}: {e}"))?);
        }
    }
    Ok(out)
}

/// An option's name as the `mysql` client compares it: `-` and `_` alike.
fn option_name(key: &str) -> String {
    key.trim().to_ascii_lowercase().replace('_', "-")
}

/// `!include` and `!includedir`, refused with their line.
fn refuse_directives(text: &str) -> Result<()> {
    for (n, line) in text.lines().enumerate() {
        let l = line.trim_start();
        if l.starts_with("!include") {
            bail!(
                "line {}: '{}' is not followed by cutover; put the [client] or [cutover] password in this file itself, or name the other file in CUTOVER_MYSQL_OPTION_FILE",
                n + 1,
                l.trim_end()
            );
        }
    }
    Ok(())
}

/// A value as the `mysql` client reads it: quotes taken off, escapes
/// replaced, a trailing `#` comment dropped.
fn value_of(raw: &str) -> Result<String> {
    let raw = raw.trim();
    let quote = raw.chars().next().filter(|c| *c == '\'' || *c == '"');
    let body = match quote {
        Some(q) => {
            let rest = &raw[1..];
            let Some(end) = closing(rest, q) else {
                bail!("a value opens a {q} it does not close");
            };
            let after = rest[end + 1..].trim();
            if !(after.is_empty() || after.starts_with('#')) {
                bail!("'{after}' after the closing {q}: quote the whole value");
            }
            &rest[..end]
        }
        None => raw.split_once('#').map_or(raw, |(v, _)| v).trim_end(),
    };
    unescape(body)
}

/// Where the quote `q` that closes `s` is: not one a backslash escapes.
fn closing(s: &str, q: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            c if c == q => return Some(i),
            _ => {}
        }
    }
    None
}

/// Replaces the escapes the `mysql` client knows.
fn unescape(s: &str) -> Result<String> {
    let escapes: HashMap<char, char> = [
        ('n', '\n'),
        ('t', '\t'),
        ('r', '\r'),
        ('b', '\u{8}'),
        ('s', ' '),
        ('\\', '\\'),
        ('"', '"'),
        ('\'', '\''),
    ]
    .into_iter()
    .collect();
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e) => match escapes.get(&e) {
                Some(r) => out.push(*r),
                // The mysql client keeps an unknown escape as it is.
                None => {
                    out.push('\\');
                    out.push(e);
                }
            },
            None => out.push('\\'),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(text: &str) -> Options {
        parse(text).unwrap_or_else(|e| panic!("{e:#}\n{text}"))
    }

    #[test]
    fn client_then_cutover_and_other_groups_are_not_read() {
        let o = opts(
            "# a comment\n; another\n[mysqld]\npassword=server\n[client]\nuser = app\npassword = from-client\nhost=db.internal\nskip-ssl\n[cutover]\npassword=from-cutover\n[mysqldump]\nuser=dumper\n",
        );
        assert_eq!(o.user.as_deref(), Some("app"));
        assert_eq!(o.password.as_deref(), Some("from-cutover"));
        let o = opts("[client]\npassword=only-client\n");
        assert_eq!(o.password.as_deref(), Some("only-client"));
        assert_eq!(opts("[mysql]\npassword=x\n"), Options::default());
    }

    #[test]
    fn values_are_read_as_the_mysql_client_reads_them() {
        for (line, want) in [
            ("password=plain", "plain"),
            (
                "password = 'has # and = and ;' # comment",
                "has # and = and ;",
            ),
            ("password=\"double \\\"q\\\" s\"", "double \"q\" s"),
            ("password=unquoted # comment", "unquoted"),
            ("password=back\\\\slash\\stab\\t", "back\\slash tab\t"),
            ("password=a:b", "a:b"),
            ("PASSWORD=upper", "upper"),
        ] {
            let o = opts(&format!("[client]\n{line}\n"));
            assert_eq!(o.password.as_deref(), Some(want), "{line}");
        }
    }

    #[test]
    fn what_cannot_be_honoured_is_refused() {
        for text in [
            "!include /etc/mysql/secret.cnf\n[client]\nuser=a\n",
            "[client]\n!includedir /etc/mysql/conf.d/\n",
            "[client]\npassword\n",
            "[cutover]\npassword='unclosed\n",
            "[client]\npassword='a'b\n",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn a_file_anyone_may_write_is_not_read() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("my.cnf");
        assert!(matches!(read(&f)?, Read::Missing));
        std::fs::write(&f, "[client]\npassword=x\n")?;
        assert!(matches!(read(&f)?, Read::Options(_)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666))?;
            assert!(matches!(read(&f)?, Read::Refused(w) if w.contains("chmod 0600")));
        }
        Ok(())
    }
}
