//! The PostgreSQL URL of a spec: `postgres://user[:password]@host[:port]/db`
//! with query parameters. `schema=NAME` (cutover's own; default `public`)
//! names the schema whose tables are the spec's; every other parameter
//! (`sslmode`, `connect_timeout`, `application_name`, …) goes to the
//! client as it is.

use std::str::FromStr;

use anyhow::{Context, Result, bail};

/// A parsed URL: the client's configuration and the schema.
pub struct PgUrl {
    pub config: tokio_postgres::Config,
    pub schema: String,
    /// The URL as messages show it: no password.
    pub shown: String,
}

/// Whether `url` is one this engine opens.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Decodes `%XX` escapes (a schema name may hold any character).
fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) => out.push(v),
                None => bail!("'{s}' has a % that is not followed by two hex digits"),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).with_context(|| format!("'{s}' is not UTF-8 once decoded"))
}

impl PgUrl {
    pub fn parse(url: &str) -> Result<PgUrl> {
        if !is_postgres(url) {
            bail!("'{url}' is not a PostgreSQL URL (postgres://user@host:port/database)");
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = None;
        let mut rest = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("schema", v)) => {
                    if schema.is_some() {
                        bail!("'{url}' names the schema twice");
                    }
                    schema = Some(percent_decode(v)?);
                }
                _ if pair.is_empty() => {}
                _ => rest.push(pair),
            }
        }
        let schema = schema.unwrap_or_else(|| "public".to_string());
        if schema.is_empty() {
            bail!("'{url}': schema= is empty");
        }
        let client_url = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config = tokio_postgres::Config::from_str(&client_url)
            .with_context(|| format!("'{}' is not a valid PostgreSQL URL", hide_password(url)))?;
        if config.get_dbname().is_none() {
            bail!(
                "'{}' names no database (postgres://user@host:port/database)",
                hide_password(url)
            );
        }
        if config.get_application_name().is_none() {
            config.application_name("cutover");
        }
        Ok(PgUrl {
            config,
            schema,
            shown: hide_password(url),
        })
    }
}

/// The URL with its password, if any, replaced by `***`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{scheme}://{name}:***@{host}{tail}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_is_taken_and_the_rest_passed_through() -> Result<()> {
        let u =
            PgUrl::parse("postgres://me:secret@db.local:6543/shop?sslmode=disable&schema=s%20a")?;
        assert_eq!(u.schema, "s a");
        assert_eq!(u.config.get_dbname(), Some("shop"));
        assert_eq!(u.config.get_user(), Some("me"));
        assert_eq!(u.config.get_ports(), &[6543]);
        assert_eq!(
            u.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        assert!(!u.shown.contains("secret"));
        let u = PgUrl::parse("postgresql://me@localhost/shop")?;
        assert_eq!(u.schema, "public");
        Ok(())
    }

    #[test]
    fn bad_urls_are_refused() {
        for bad in [
            "sqlite:///x.db",
            "postgres://me@host",
            "postgres://me@host/db?schema=a&schema=b",
            "postgres://me@host/db?schema=",
            "postgres://me@host/db?schema=%zz",
            "postgres://me@host/db?nonsense=1",
        ] {
            assert!(PgUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
