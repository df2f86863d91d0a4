//! The MySQL URL of a spec, `mysql://user[:password]@host[:port]/db`, with
//! the parameters cutover reads from it: `ssl-mode`, `ssl-ca`, `ssl-cert`,
//! `ssl-key`, `socket` and `connect-timeout`, spelled as the `mysql`
//! command-line client spells its options.
//!
//! The user, password, database and parameter values are percent-decoded
//! (`%40` is `@`); a `%` not followed by two hex digits is refused. A
//! parameter the engine does not know is refused rather than ignored: a
//! URL that means something else than it says is an error to fix.
//!
//! The password is the URL's, else the side's own variable's
//! (`CUTOVER_SOURCE_PASSWORD`, `CUTOVER_TARGET_PASSWORD`:
//! [`crate::db::credentials`]), else `MYSQL_PWD`'s (as the `mysql` client
//! reads it), else the option file's ([`super::option_file`]: `[client]`,
//! then `[cutover]`, of `CUTOVER_MYSQL_OPTION_FILE` or `~/.my.cnf`): the
//! URL wins, then the environment, then the file. The user is the URL's,
//! else the option file's, else the login name. Messages show the URL
//! with `***` for its password ([`MyUrl::shown`]).
//!
//! `ssl-mode` takes the `mysql` client's values:
//!
//! | `ssl-mode` | encrypted | the server's certificate |
//! |---|---|---|
//! | `DISABLED` | never | not looked at |
//! | `PREFERRED` (default) | when the server offers TLS; plaintext when it does not, or the handshake fails | not verified |
//! | `REQUIRED` | always; refused if the server will not | not verified |
//! | `VERIFY_CA` | always | its chain must end at a root of `ssl-ca` (or a public root); the host name is not checked |
//! | `VERIFY_IDENTITY` | always | the chain as `VERIFY_CA`, and the host must be one the certificate names |
//!
//! A Unix socket is never encrypted, as with the `mysql` client; a mode
//! above `PREFERRED` on a socket is refused rather than met in name only.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::option_file;
pub use crate::db::credentials::PasswordFrom;
use crate::db::credentials::{Env, percent_decode};
use crate::spec::Side;

/// How a connection uses TLS (`ssl-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disabled,
    Preferred,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    /// The mode as the URL spells it.
    pub fn shown(self) -> &'static str {
        match self {
            SslMode::Disabled => "DISABLED",
            SslMode::Preferred => "PREFERRED",
            SslMode::Required => "REQUIRED",
            SslMode::VerifyCa => "VERIFY_CA",
            SslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }

    fn parse(text: &str) -> Option<SslMode> {
        Some(match text.to_ascii_uppercase().as_str() {
            "DISABLED" => SslMode::Disabled,
            "PREFERRED" => SslMode::Preferred,
            "REQUIRED" => SslMode::Required,
            "VERIFY_CA" => SslMode::VerifyCa,
            "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
            _ => return None,
        })
    }

    /// Whether the connection must be encrypted.
    pub fn required(self) -> bool {
        matches!(
            self,
            SslMode::Required | SslMode::VerifyCa | SslMode::VerifyIdentity
        )
    }
}

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A host name or address (an IPv6 one without its brackets) and port.
    Tcp { host: String, port: u16 },
    /// A Unix socket.
    Socket(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Endpoint::Tcp { host, port } => write!(f, "{host}:{port}"),
            Endpoint::Socket(p) => write!(f, "socket {}", p.display()),
        }
    }
}

/// A parsed URL.
#[derive(Clone)]
pub struct MyUrl {
    pub user: String,
    password: Option<String>,
    pub password_from: Option<PasswordFrom>,
    pub endpoint: Endpoint,
    pub database: String,
    pub ssl_mode: SslMode,
    /// `ssl-ca`: the CA certificates (PEM) to verify the server against.
    pub ssl_ca: Option<PathBuf>,
    /// `ssl-cert` and `ssl-key`: a client certificate chain and its key.
    pub ssl_cert: Option<PathBuf>,
    pub ssl_key: Option<PathBuf>,
    pub connect_timeout: Option<Duration>,
    /// The URL as messages show it: no password.
    pub shown: String,
    /// What the operator should hear of the option file (not read, and
    /// why); a password in the URL is [`MyUrl::password_warning`]'s.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for MyUrl {
    /// The password is never shown, not even in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MyUrl")
            .field("shown", &self.shown)
            .field("user", &self.user)
            .field("password_from", &self.password_from)
            .field("endpoint", &self.endpoint)
            .field("database", &self.database)
            .field("ssl_mode", &self.ssl_mode)
            .finish_non_exhaustive()
    }
}

/// Whether `url` is one this engine opens.
pub fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql://")
}

/// The parameters of a URL's query, decoded, each at most once.
#[derive(Default)]
struct Params {
    ssl_mode: Option<String>,
    ssl_ca: Option<String>,
    ssl_cert: Option<String>,
    ssl_key: Option<String>,
    socket: Option<String>,
    connect_timeout: Option<String>,
}

impl Params {
    fn parse(query: Option<&str>) -> Result<Params> {
        let mut p = Params::default();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            if pair.is_empty() {
                continue;
            }
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match k {
                "ssl-mode" => &mut p.ssl_mode,
                "ssl-ca" => &mut p.ssl_ca,
                "ssl-cert" => &mut p.ssl_cert,
                "ssl-key" => &mut p.ssl_key,
                "socket" => &mut p.socket,
                "connect-timeout" => &mut p.connect_timeout,
                _ => bail!(
                    "parameter '{k}' is not one cutover reads (ssl-mode, ssl-ca, ssl-cert, ssl-key, socket, connect-timeout)"
                ),
            };
            if slot.is_some() {
                bail!("it names {k} twice");
            }
            *slot = Some(percent_decode(v, &format!("value of {k}"))?);
        }
        Ok(p)
    }
}

/// `host[:port]` of an authority (`[::1]:3306` for IPv6).
fn host_port(text: &str) -> Result<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((h, after)) = rest.split_once(']') else {
            bail!("the host '{text}' opens a [ it does not close");
        };
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .with_context(|| format!("'{text}': expected :PORT after ]"))?,
            ),
        };
        (h.to_string(), port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (text.to_string(), None),
        }
    };
    let port = match port {
        None => 3306,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .with_context(|| format!("the port '{p}' is not a port number"))?,
    };
    Ok((host, port))
}

/// The user and password of a URL's user information, decoded.
fn user_password(userinfo: Option<&str>) -> Result<(Option<String>, Option<String>)> {
    Ok(match userinfo {
        None => (None, None),
        Some(u) => match u.split_once(':') {
            Some((name, pw)) => (
                Some(percent_decode(name, "user")?),
                Some(percent_decode(pw, "password")?),
            ),
            None => (Some(percent_decode(u, "user")?), None),
        },
    })
}

/// Where the server is: the `socket` parameter's socket (with no host, or
/// `localhost`), else the host and port.
fn endpoint(socket: Option<&str>, hostport: &str) -> Result<Endpoint> {
    Ok(match (socket, hostport) {
        (Some(s), "" | "localhost") => Endpoint::Socket(PathBuf::from(s)),
        (Some(_), h) => bail!(
            "it names both the host '{h}' and a socket: leave the host out (mysql://user@/db?socket=PATH)"
        ),
        (None, "") => bail!(
            "it names no host: write mysql://user@HOST[:PORT]/db, or ?socket=PATH for a Unix socket"
        ),
        (None, h) => {
            let (host, port) = host_port(h)?;
            if host.is_empty() {
                bail!("it names no host before the port");
            }
            Endpoint::Tcp { host, port }
        }
    })
}

/// The password and where it came from, the option file's user, and
/// what to warn of.
struct Credentials {
    password: Option<String>,
    from: Option<PasswordFrom>,
    user: Option<String>,
    warnings: Vec<String>,
}

impl Credentials {
    /// The URL's `password`, else the environment's, else the option
    /// file's; the file is read only when something is still missing (the
    /// password, or the user when the URL names none).
    fn of(password: Option<String>, user_missing: bool, env: &Env) -> Result<Credentials> {
        let mut c = Credentials {
            from: password.as_ref().map(|_| PasswordFrom::Url),
            password,
            user: None,
            warnings: Vec::new(),
        };
        if c.password.is_none() {
            let variable = env
                .side_password()
                .or_else(|| env.var("MYSQL_PWD").map(|p| ("MYSQL_PWD", p)));
            if let Some((name, p)) = variable {
                c.password = Some(p);
                c.from = Some(PasswordFrom::Environment(name));
            }
        }
        if c.password.is_some() && !user_missing {
            return Ok(c);
        }
        let named = env.var("CUTOVER_MYSQL_OPTION_FILE");
        let Some(path) = option_file::path(named.clone(), env.home.as_deref()) else {
            return Ok(c);
        };
        match option_file::read(&path)? {
            option_file::Read::Missing if named.is_some() => bail!(
                "CUTOVER_MYSQL_OPTION_FILE names {}, which does not exist",
                path.display()
            ),
            option_file::Read::Missing => {}
            option_file::Read::Refused(why) => c.warnings.push(why),
            option_file::Read::Options(o) => {
                c.user = o.user;
                if c.password.is_none()
                    && let Some(p) = o.password
                {
                    c.password = Some(p);
                    c.from = Some(PasswordFrom::File(path));
                }
            }
        }
        Ok(c)
    }
}

impl MyUrl {
    /// Parses `url` of the database `role` names; what it leaves out
    /// comes from the process's environment and option file.
    pub fn parse(url: &str, side: Side) -> Result<MyUrl> {
        MyUrl::resolve(url, &Env::process(side))
    }

    /// Parses `url`, completing it from `env`.
    pub fn resolve(url: &str, env: &Env) -> Result<MyUrl> {
        let shown = crate::spec::without_password(url);
        MyUrl::resolve_inner(url, &shown, env).with_context(|| format!("the MySQL URL {shown}"))
    }

    fn resolve_inner(url: &str, shown: &str, env: &Env) -> Result<MyUrl> {
        let Some(rest) = url.strip_prefix("mysql://") else {
            bail!("it is not a MySQL URL (mysql://user@host:port/database)");
        };
        if rest.contains('#') {
            bail!("it holds a '#': write it as %23 in a user, password or parameter");
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.split_once('/') {
            Some((a, p)) => (a, p),
            None => (before_query, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = user_password(userinfo)?;
        let user = user.filter(|u| !u.is_empty());
        let credentials = Credentials::of(password, user.is_none(), env)?;
        let user = match user.or(credentials.user).or(env.login.clone()) {
            Some(u) => u,
            None => bail!("it names no user, and the login name is unknown: write mysql://USER@…"),
        };
        let database = percent_decode(path, "database")?;
        if database.is_empty() {
            bail!("it names no database: write mysql://user@host/DATABASE");
        }
        if database.contains('/') {
            bail!("the database '{database}' holds a '/': a database name cannot");
        }
        let p = Params::parse(query)?;
        let endpoint = endpoint(p.socket.as_deref(), hostport)?;
        let ssl_mode = match &p.ssl_mode {
            None => SslMode::Preferred,
            Some(m) => SslMode::parse(m).with_context(|| {
                format!(
                    "ssl-mode '{m}' is not one of DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY"
                )
            })?,
        };
        if matches!(endpoint, Endpoint::Socket(_)) && ssl_mode.required() {
            bail!(
                "ssl-mode={} on a Unix socket: a socket is never encrypted; connect over TCP, or use ssl-mode=PREFERRED or DISABLED",
                ssl_mode.shown()
            );
        }
        if p.ssl_cert.is_some() != p.ssl_key.is_some() {
            bail!("ssl-cert and ssl-key go together: name both or neither");
        }
        let connect_timeout = match &p.connect_timeout {
            None => None,
            Some(t) => Some(Duration::from_secs(
                t.parse::<u64>()
                    .ok()
                    .filter(|&s| s > 0)
                    .with_context(|| format!("connect-timeout '{t}' is not a number of seconds"))?,
            )),
        };
        Ok(MyUrl {
            user,
            password: credentials.password,
            password_from: credentials.from,
            endpoint,
            database,
            ssl_mode,
            ssl_ca: p.ssl_ca.map(PathBuf::from),
            ssl_cert: p.ssl_cert.map(PathBuf::from),
            ssl_key: p.ssl_key.map(PathBuf::from),
            connect_timeout,
            shown: shown.to_string(),
            warnings: credentials.warnings,
        })
    }

    /// The password, for the driver only.
    pub(super) fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// What `check` says of a URL that holds a password.
    pub fn password_warning(&self) -> Option<String> {
        (self.password_from == Some(PasswordFrom::Url)).then(|| {
            format!(
                "the URL {} holds a password, and anyone who reads the spec has it: take it out of the URL and give it in ~/.my.cnf ([client] password=…, mode 0600), or as CUTOVER_SOURCE_PASSWORD / CUTOVER_TARGET_PASSWORD or MYSQL_PWD (docs/engines.md, MySQL)",
                self.shown
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Side;

    fn parse(url: &str) -> Result<MyUrl> {
        MyUrl::resolve(url, &Env::given(&[], None, "ops"))
    }

    #[test]
    fn a_full_url_is_read_and_its_password_never_shown() -> Result<()> {
        let u = parse(
            "mysql://app:s%40cr%3At@db.internal:3307/shop?ssl-mode=verify_identity&ssl-ca=/etc/ca.pem",
        )?;
        assert_eq!(u.user, "app");
        assert_eq!(u.password(), Some("s@cr:t"));
        assert_eq!(u.password_from, Some(PasswordFrom::Url));
        assert_eq!(
            u.endpoint,
            Endpoint::Tcp {
                host: "db.internal".into(),
                port: 3307
            }
        );
        assert_eq!(u.database, "shop");
        assert_eq!(u.ssl_mode, SslMode::VerifyIdentity);
        assert_eq!(u.ssl_ca, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            u.shown,
            "mysql://app:***@db.internal:3307/shop?ssl-mode=verify_identity&ssl-ca=/etc/ca.pem"
        );
        assert!(!format!("{u:?}").contains("cr%3At") && !format!("{u:?}").contains("s@cr"));
        assert!(u.password_warning().is_some_and(|w| !w.contains("s%40")));
        Ok(())
    }

    #[test]
    fn defaults_come_from_the_mysql_client_conventions() -> Result<()> {
        let env = Env::given(&[("MYSQL_PWD", "pw")], None, "ops");
        let u = MyUrl::resolve("mysql://127.0.0.1/test", &env)?;
        assert_eq!(u.user, "ops");
        assert_eq!(u.password(), Some("pw"));
        assert_eq!(
            u.password_from,
            Some(PasswordFrom::Environment("MYSQL_PWD"))
        );
        assert!(u.password_warning().is_none());
        assert_eq!(u.ssl_mode, SslMode::Preferred);
        assert_eq!(u.endpoint.to_string(), "127.0.0.1:3306");
        let v6 = parse("mysql://u@[::1]:3310/d")?;
        assert_eq!(v6.endpoint.to_string(), "[::1]:3310");
        let sock = parse("mysql://u@/d%20b?socket=%2Frun%2Fmysqld%2Fmysqld.sock")?;
        assert_eq!(
            sock.endpoint,
            Endpoint::Socket(PathBuf::from("/run/mysqld/mysqld.sock"))
        );
        assert_eq!(sock.database, "d b");
        Ok(())
    }

    #[test]
    fn what_the_url_cannot_mean_is_refused() {
        for (url, says) in [
            ("postgres://u@h/d", "not a MySQL URL"),
            ("mysql://u@h", "names no database"),
            ("mysql://u@h/", "names no database"),
            ("mysql://u@/d", "names no host"),
            ("mysql://u@h:0/d", "not a port"),
            ("mysql://u@h:99999/d", "not a port"),
            ("mysql://u@h/d?ssl-mode=ALLOW", "ssl-mode 'ALLOW'"),
            ("mysql://u@h/d?sslmode=require", "parameter 'sslmode'"),
            ("mysql://u@h/d?ssl-mode=REQUIRED&ssl-mode=DISABLED", "twice"),
            (
                "mysql://u@/d?socket=/s&ssl-mode=REQUIRED",
                "never encrypted",
            ),
            ("mysql://u@h/d?socket=/s", "both the host"),
            ("mysql://u@h/d?ssl-cert=/c", "go together"),
            ("mysql://u:p%zz@h/d", "not followed by two hex digits"),
            ("mysql://u@h/d?connect-timeout=soon", "connect-timeout"),
        ] {
            let e = format!("{:#}", parse(url).expect_err(url));
            assert!(e.contains(says), "{url}: {e}");
        }
        let e = format!("{:#}", parse("mysql://u:hunter2@h/d?x=1").expect_err("x"));
        assert!(
            e.contains("mysql://u:***@h/d?x=1") && !e.contains("hunter2"),
            "{e}"
        );
    }

    /// The password: the URL's, else the side's variable, else MYSQL_PWD,
    /// else the option file's ([cutover] over [client]); the user: the
    /// URL's, else the file's, else the login name.
    #[test]
    fn the_url_wins_then_the_environment_then_the_option_file() -> Result<()> {
        let home = tempfile::tempdir()?;
        let file = home.path().join(".my.cnf");
        std::fs::write(
            &file,
            "[client]\nuser=file-user\npassword=from-client\n[cutover]\npassword=from-file\n",
        )?;
        let h = || Some(home.path().to_path_buf());
        let url = "mysql://app@db.internal/shop";
        let pw = |u: &MyUrl| (u.password().map(str::to_string), u.password_from.clone());
        let file_only = Env::given(&[], h(), "ops");
        let u = MyUrl::resolve(url, &file_only)?;
        assert_eq!(
            pw(&u),
            (
                Some("from-file".into()),
                Some(PasswordFrom::File(file.clone()))
            )
        );
        assert_eq!(u.user, "app", "the URL's user wins");
        let u = MyUrl::resolve("mysql://db.internal/shop", &file_only)?;
        assert_eq!(u.user, "file-user");
        let u = MyUrl::resolve("mysql://app:from-url@db.internal/shop", &file_only)?;
        assert_eq!(pw(&u).1, Some(PasswordFrom::Url));

        let vars = [
            ("MYSQL_PWD", "from-mysql-pwd"),
            ("CUTOVER_SOURCE_PASSWORD", "from-source"),
            ("CUTOVER_TARGET_PASSWORD", "from-target"),
        ];
        let env = || Env::given(&vars, h(), "ops");
        let u = MyUrl::resolve(url, &env())?;
        assert_eq!(pw(&u).0.as_deref(), Some("from-mysql-pwd"));
        let u = MyUrl::resolve(url, &env().for_side(Side::Source))?;
        assert_eq!(
            pw(&u),
            (
                Some("from-source".into()),
                Some(PasswordFrom::Environment("CUTOVER_SOURCE_PASSWORD"))
            )
        );
        let u = MyUrl::resolve(url, &env().for_side(Side::Target))?;
        assert_eq!(pw(&u).0.as_deref(), Some("from-target"));
        let u = MyUrl::resolve(
            "mysql://app:u@db.internal/shop",
            &env().for_side(Side::Target),
        )?;
        assert_eq!(pw(&u).0.as_deref(), Some("u"));

        // CUTOVER_MYSQL_OPTION_FILE instead of ~/.my.cnf; it must exist.
        let other = home.path().join("other.cnf");
        std::fs::write(&other, "[client]\npassword=\"from other\"\n")?;
        let named = other.display().to_string();
        let u = MyUrl::resolve(
            url,
            &Env::given(&[("CUTOVER_MYSQL_OPTION_FILE", &named)], h(), "ops"),
        )?;
        assert_eq!(pw(&u).0.as_deref(), Some("from other"));
        let missing = home.path().join("nope.cnf").display().to_string();
        let e = MyUrl::resolve(
            url,
            &Env::given(&[("CUTOVER_MYSQL_OPTION_FILE", &missing)], h(), "ops"),
        )
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
        assert!(
            e.contains("nope.cnf") && e.contains("does not exist"),
            "{e}"
        );
        // A file that cannot be honoured is an error naming it.
        std::fs::write(&file, "[client]\n!include /etc/secret.cnf\n")?;
        let e = MyUrl::resolve(url, &file_only)
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(e.contains(".my.cnf") && e.contains("!include"), "{e}");
        // No file, no password.
        let u = MyUrl::resolve(url, &Env::given(&[], None, "ops"))?;
        assert_eq!(pw(&u), (None, None));
        Ok(())
    }
}
