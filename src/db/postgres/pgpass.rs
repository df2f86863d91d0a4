//! The password file of libpq (`~/.pgpass`, or the file `PGPASSFILE`
//! names): one `hostname:port:database:username:password` a line. A field
//! that is exactly `*` matches anything; `\` makes the next character
//! itself (`\:` a colon, `\\` a backslash, `\*` a star); lines starting with
//! `#` are comments. The first line that matches gives the password. The
//! host of a Unix-socket connection is matched as `localhost`.
//!
//! As libpq does, a file that is not a plain file, or that its group or
//! others may read or write (anything beyond `0600`), is not read: the
//! caller is told why, to say so.

use std::path::Path;

/// What a connection is matched on.
pub struct Wanted<'a> {
    pub host: &'a str,
    pub port: &'a str,
    pub database: &'a str,
    pub user: &'a str,
}

/// One field: `*` alone, or a value with its escapes resolved.
#[derive(Debug, PartialEq, Eq)]
enum Field {
    Any,
    Is(String),
}

impl Field {
    fn matches(&self, s: &str) -> bool {
        match self {
            Field::Any => true,
            Field::Is(v) => v == s,
        }
    }
}

/// Splits a line at its unescaped colons: the first four fields and the
/// password, which ends at the next unescaped colon or the end of the line.
/// `None` for a line of fewer than five fields.
fn fields(line: &str) -> Option<([Field; 4], String)> {
    let mut out: Vec<Field> = Vec::with_capacity(4);
    // The field so far with its escapes resolved, and as written.
    let mut cur = String::new();
    let mut raw = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                raw.push(c);
                match chars.next() {
                    Some(n) => {
                        raw.push(n);
                        cur.push(n);
                    }
                    None => cur.push(c),
                }
            }
            ':' if out.len() < 4 => {
                out.push(if raw == "*" {
                    Field::Any
                } else {
                    Field::Is(std::mem::take(&mut cur))
                });
                cur.clear();
                raw.clear();
            }
            ':' => break,
            c => {
                raw.push(c);
                cur.push(c);
            }
        }
    }
    let [h, p, d, u]: [Field; 4] = out.try_into().ok()?;
    Some(([h, p, d, u], cur))
}

/// The password of the first line of `text` that matches `w`.
pub fn lookup(text: &str, w: &Wanted) -> Option<String> {
    let host = if w.host.is_empty() || w.host.starts_with('/') {
        "localhost"
    } else {
        w.host
    };
    text.lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(fields)
        .find(|([h, p, d, u], _)| {
            h.matches(host) && p.matches(w.port) && d.matches(w.database) && u.matches(w.user)
        })
        .map(|(_, password)| password)
}

/// What reading the file came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// There is no such file: nothing to say.
    Missing,
    /// The file was not read, and why (a sentence naming the file).
    Refused(String),
    /// The file's text.
    Text(String),
}

/// Reads the password file at `path` if its permissions allow.
pub fn read(path: &Path) -> Read {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Read::Missing,
        Err(e) => {
            return Read::Refused(format!(
                "password file {} cannot be read ({e})",
                path.display()
            ));
        }
    };
    if !meta.is_file() {
        return Read::Refused(format!(
            "password file {} is not a plain file; it was not read",
            path.display()
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            return Read::Refused(format!(
                "password file {} has group or world access (mode {:04o}); permissions should be u=rw (0600) or less: it was not read (chmod 0600 {})",
                path.display(),
                mode & 0o7777,
                path.display()
            ));
        }
    }
    match std::fs::read_to_string(path) {
        Ok(t) => Read::Text(t),
        Err(e) => Read::Refused(format!(
            "password file {} cannot be read ({e})",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w<'a>(host: &'a str, port: &'a str, database: &'a str, user: &'a str) -> Wanted<'a> {
        Wanted {
            host,
            port,
            database,
            user,
        }
    }

    #[test]
    fn the_first_matching_line_gives_the_password() {
        let text = "# comment:with:colons:a:b\n\
                    db.internal:5432:shop:app:first\n\
                    db.internal:5432:shop:app:second\n\
                    *:*:*:app:fallback\n";
        assert_eq!(
            lookup(text, &w("db.internal", "5432", "shop", "app")),
            Some("first".into())
        );
        assert_eq!(
            lookup(text, &w("other", "6543", "x", "app")),
            Some("fallback".into())
        );
        assert_eq!(lookup(text, &w("db.internal", "5432", "shop", "bob")), None);
        assert_eq!(lookup("", &w("h", "1", "d", "u")), None);
    }

    #[test]
    fn wildcards_match_any_value_only_when_the_whole_field_is_a_star() {
        let text = "*:5432:*:app:pw\n";
        assert_eq!(
            lookup(text, &w("anything", "5432", "db", "app")),
            Some("pw".into())
        );
        assert_eq!(lookup(text, &w("anything", "5433", "db", "app")), None);
        // An escaped star is a star, not a wildcard; a star inside a field is
        // itself too.
        let text = "\\*:5432:db*:app:pw\n";
        assert_eq!(lookup(text, &w("h", "5432", "db*", "app")), None);
        assert_eq!(
            lookup(text, &w("*", "5432", "db*", "app")),
            Some("pw".into())
        );
        assert_eq!(lookup(text, &w("*", "5432", "dbx", "app")), None);
    }

    #[test]
    fn escapes_make_colons_and_backslashes_themselves() {
        let text = "h:5432:we\\:ird:u\\\\ser:pa\\:ss\\\\word:ignored after a colon\n";
        assert_eq!(
            lookup(text, &w("h", "5432", "we:ird", "u\\ser")),
            Some("pa:ss\\word".into())
        );
        // A password may hold anything else, spaces and # included.
        assert_eq!(
            lookup("h:1:d:u: p#w \r\n", &w("h", "1", "d", "u")),
            Some(" p#w ".into())
        );
        // A line of too few fields matches nothing; an empty password is one.
        assert_eq!(lookup("h:1:d:u\n", &w("h", "1", "d", "u")), None);
        assert_eq!(
            lookup("h:1:d:u:\n", &w("h", "1", "d", "u")),
            Some(String::new())
        );
    }

    #[test]
    fn a_unix_socket_is_matched_as_localhost() {
        let text = "localhost:5432:d:u:local\n";
        assert_eq!(
            lookup(text, &w("/var/run/postgresql", "5432", "d", "u")),
            Some("local".into())
        );
        assert_eq!(lookup(text, &w("127.0.0.1", "5432", "d", "u")), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_not_read() -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("pgpass");
        assert_eq!(read(&path), Read::Missing);
        std::fs::write(&path, "*:*:*:*:pw\n")?;
        for (mode, ok) in [(0o600, true), (0o400, true), (0o640, false), (0o604, false)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            match read(&path) {
                Read::Text(t) => assert!(ok, "{mode:o} was read: {t}"),
                Read::Refused(why) => {
                    assert!(!ok, "{mode:o} refused: {why}");
                    assert!(why.contains("0600"), "{why}");
                    assert!(!why.contains("pw"), "{why}");
                }
                Read::Missing => panic!("{mode:o}: missing"),
            }
        }
        assert!(matches!(read(dir.path()), Read::Refused(_)));
        Ok(())
    }
}
