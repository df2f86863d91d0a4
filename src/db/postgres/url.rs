//! The PostgreSQL URL of a spec, `postgres://user[:password]@host[:port]/db`
//! with query parameters, completed from the environment as libpq does.
//! `schema=NAME` (cutover's own; default `public`) names the schema whose
//! tables are the spec's; `sslmode`, `sslrootcert`, `sslcert`, `sslkey` and
//! `sslsni` are TLS's ([`super::tls`]); every other parameter
//! (`connect_timeout`, `application_name`, …) goes to the client as it is.
//!
//! What the URL leaves out comes from the libpq environment: the host
//! (`PGHOST`, else the local Unix socket), port (`PGPORT`, else 5432), user
//! (`PGUSER`, else the login name), database (`PGDATABASE`; none is an
//! error), `PGSSLMODE`, `PGSSLROOTCERT`, `PGSSLCERT`, `PGSSLKEY`,
//! `PGSSLSNI`, `PGCONNECT_TIMEOUT`. The password is the URL's, else the
//! side's own variable's (`CUTOVER_SOURCE_PASSWORD`,
//! `CUTOVER_TARGET_PASSWORD`: [`crate::db::credentials`]), else
//! `PGPASSWORD`'s, else the password file's ([`super::pgpass`]: `PGPASSFILE`,
//! else `~/.pgpass`). The default certificates are libpq's:
//! `~/.postgresql/root.crt`, `postgresql.crt` and `postgresql.key`, each
//! used when it exists.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use tokio_postgres::config::Host;

use super::pgpass;
use super::tls::{Roots, Settings, SslMode};
pub use crate::db::credentials::PasswordFrom;
use crate::db::credentials::{Env, percent_decode};
use crate::spec::Side;

/// A parsed URL: the client's configuration and the schema.
pub struct PgUrl {
    pub config: tokio_postgres::Config,
    pub schema: String,
    /// The URL as messages show it: no password.
    pub shown: String,
    /// The first host and port, as messages name the server.
    pub server: String,
    pub tls: Settings,
    /// Where the password came from, if there is one (never the password).
    pub password_from: Option<PasswordFrom>,
    /// What the operator should hear: a password file not read, a
    /// password in the spec.
    pub warnings: Vec<String>,
}

/// What `check` says of a URL that holds a password, and how to move it out.
pub fn password_warning(shown: &str) -> String {
    format!(
        "the URL {shown} holds a password, and anyone who reads the spec has it: take it out of the URL and give it as PGPASSWORD, or as a line HOST:PORT:DATABASE:USER:PASSWORD of ~/.pgpass (mode 0600; docs/engines.md, Connecting)"
    )
}

/// A file under `~/.postgresql/`, when it exists.
fn default_file(env: &Env, name: &str) -> Option<PathBuf> {
    let p = env.home.as_ref()?.join(".postgresql").join(name);
    p.exists().then_some(p)
}

/// Whether `url` is one this engine opens.
pub fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The TLS parameters a URL may carry, taken out before the client sees it.
#[derive(Default)]
struct TlsParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
    sslsni: Option<String>,
}

/// Whether the URL itself holds a password (after the user name, or as a
/// `password=` parameter).
pub fn holds_password(url: &str) -> bool {
    crate::spec::without_password(url) != url
}

/// The default host: the local Unix socket's folder (where Debian's and
/// upstream's servers put it).
fn default_host() -> String {
    #[cfg(unix)]
    {
        if std::path::Path::new("/var/run/postgresql").is_dir() {
            return "/var/run/postgresql".to_string();
        }
        "/tmp".to_string()
    }
    #[cfg(not(unix))]
    {
        "localhost".to_string()
    }
}

impl PgUrl {
    /// Parses `url` of the database `role` names, completing it from the
    /// process's environment.
    pub fn parse(url: &str, side: Side) -> Result<PgUrl> {
        PgUrl::resolve(url, &Env::process(side))
    }

    /// Parses `url`, completing it from `env`.
    pub fn resolve(url: &str, env: &Env) -> Result<PgUrl> {
        let shown = crate::spec::without_password(url);
        if !is_postgres(url) {
            bail!("'{shown}' is not a PostgreSQL URL (postgres://user@host:port/database)");
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (url, None),
        };
        let mut schema = None;
        let mut tls = TlsParams::default();
        let mut rest = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match k {
                "schema" => &mut schema,
                "sslmode" => &mut tls.sslmode,
                "sslrootcert" => &mut tls.sslrootcert,
                "sslcert" => &mut tls.sslcert,
                "sslkey" => &mut tls.sslkey,
                "sslsni" => &mut tls.sslsni,
                "sslpassword" => bail!(
                    "'{shown}': sslpassword is not supported; decrypt the key (openssl pkey -in KEY -out KEY.plain, mode 0600)"
                ),
                _ if pair.is_empty() => continue,
                _ => {
                    rest.push(pair);
                    continue;
                }
            };
            if slot.is_some() {
                bail!("'{shown}' names {k} twice");
            }
            *slot = Some(percent_decode(v, &format!("value of {k}"))?);
        }
        let schema = schema.unwrap_or_else(|| "public".to_string());
        if schema.is_empty() {
            bail!("'{shown}': schema= is empty");
        }
        let client_url = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut config = tokio_postgres::Config::from_str(&client_url)
            .with_context(|| format!("'{shown}' is not a valid PostgreSQL URL"))?;
        let mut warnings = Vec::new();

        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            match env.var("PGHOST") {
                Some(hosts) => {
                    for h in hosts.split(',') {
                        config.host(h);
                    }
                }
                None => {
                    config.host(default_host());
                }
            }
        }
        if config.get_ports().is_empty()
            && let Some(ports) = env.var("PGPORT")
        {
            for p in ports.split(',') {
                let port: u16 = p
                    .trim()
                    .parse()
                    .with_context(|| format!("PGPORT '{ports}' is not a port number"))?;
                config.port(port);
            }
        }
        if config.get_user().is_none() {
            match env.var("PGUSER").or_else(|| env.login.clone()) {
                Some(u) => {
                    config.user(u);
                }
                None => bail!(
                    "'{shown}' names no user, and neither PGUSER nor the login name gives one"
                ),
            }
        }
        if config.get_dbname().is_none() {
            match env.var("PGDATABASE") {
                Some(d) => {
                    config.dbname(d);
                }
                None => bail!(
                    "'{shown}' names no database (postgres://user@host:port/database, or PGDATABASE)"
                ),
            }
        }
        if config.get_connect_timeout().is_none()
            && let Some(t) = env.var("PGCONNECT_TIMEOUT")
        {
            let secs: u64 = t
                .trim()
                .parse()
                .with_context(|| format!("PGCONNECT_TIMEOUT '{t}' is not a number of seconds"))?;
            if secs > 0 {
                config.connect_timeout(std::time::Duration::from_secs(secs.max(2)));
            }
        }
        if config.get_application_name().is_none() {
            config.application_name("cutover");
        }

        let host = match config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(Host::Unix(p)) => p.display().to_string(),
            None => config
                .get_hostaddrs()
                .first()
                .map_or_else(String::new, |a| a.to_string()),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let server = if host.starts_with('/') {
            format!("{host} (Unix socket, port {port})")
        } else if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };

        let password_from = if config.get_password().is_some() {
            Some(PasswordFrom::Url)
        } else if let Some((name, pw)) = env.side_password() {
            config.password(pw);
            Some(PasswordFrom::Environment(name))
        } else if let Some(pw) = env.var("PGPASSWORD") {
            config.password(pw);
            Some(PasswordFrom::Environment("PGPASSWORD"))
        } else {
            let file = env
                .var("PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| env.home.as_ref().map(|h| h.join(".pgpass")));
            match file {
                None => None,
                Some(file) => match pgpass::read(&file) {
                    pgpass::Read::Missing => None,
                    pgpass::Read::Refused(why) => {
                        warnings.push(why);
                        None
                    }
                    pgpass::Read::Text(text) => {
                        let wanted = pgpass::Wanted {
                            host: &host,
                            port: &port.to_string(),
                            database: config.get_dbname().unwrap_or(""),
                            user: config.get_user().unwrap_or(""),
                        };
                        pgpass::lookup(&text, &wanted).map(|pw| {
                            config.password(pw);
                            PasswordFrom::File(file)
                        })
                    }
                },
            }
        };

        let tls = tls_settings(tls, env, &shown)?;
        // A Unix socket is local, and the server refuses TLS there: libpq
        // does not ask for it.
        let all_unix = !config.get_hosts().is_empty()
            && config.get_hostaddrs().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, Host::Tcp(_)));
        config.ssl_mode(match tls.mode {
            _ if all_unix => tokio_postgres::config::SslMode::Disable,
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            _ => tokio_postgres::config::SslMode::Require,
        });
        Ok(PgUrl {
            config,
            schema,
            shown,
            server,
            tls,
            password_from,
            warnings,
        })
    }
}

/// The TLS settings from the URL's parameters, else the environment, else
/// libpq's defaults.
fn tls_settings(p: TlsParams, env: &Env, shown: &str) -> Result<Settings> {
    let given_mode = match p.sslmode.or_else(|| env.var("PGSSLMODE")) {
        Some(m) => Some(SslMode::parse(&m).with_context(|| format!("'{shown}'"))?),
        None => None,
    };
    let roots = match p.sslrootcert.or_else(|| env.var("PGSSLROOTCERT")) {
        Some(r) if r == "system" => Some(Roots::System),
        Some(r) => {
            let path = PathBuf::from(&r);
            if !path.exists() {
                bail!(
                    "'{shown}': root certificate file sslrootcert {r} does not exist (give the CA's PEM file, or sslrootcert=system for the platform's roots)"
                );
            }
            Some(Roots::File(path))
        }
        None => default_file(env, "root.crt").map(Roots::File),
    };
    let mode = match (given_mode, &roots) {
        // libpq: the platform's roots are only worth their host name check.
        (None, Some(Roots::System)) => SslMode::VerifyFull,
        (Some(m), Some(Roots::System)) if m != SslMode::VerifyFull && m != SslMode::Disable => {
            bail!(
                "'{shown}': sslmode={} may not be used with sslrootcert=system (use verify-full)",
                m.name()
            )
        }
        (Some(m), _) => m,
        (None, _) => SslMode::Prefer,
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && roots.is_none() {
        bail!(
            "'{shown}': sslmode={} needs the certificate of the CA that signed the server's: give sslrootcert=FILE (or PGSSLROOTCERT, or ~/.postgresql/root.crt), or sslrootcert=system for the platform's trusted roots",
            mode.name()
        );
    }
    let cert = match p.sslcert.or_else(|| env.var("PGSSLCERT")) {
        Some(c) => Some(PathBuf::from(c)),
        None => default_file(env, "postgresql.crt"),
    };
    let key = p
        .sslkey
        .or_else(|| env.var("PGSSLKEY"))
        .map(PathBuf::from)
        .or_else(|| {
            env.home
                .as_ref()
                .map(|h| h.join(".postgresql").join("postgresql.key"))
        });
    let client = match (cert, key, mode) {
        (_, _, SslMode::Disable) | (None, _, _) => None,
        (Some(c), _, _) if !c.exists() => bail!(
            "'{shown}': client certificate file sslcert {} does not exist",
            c.display()
        ),
        (Some(c), Some(k), _) if k.exists() => Some((c, k)),
        (Some(c), k, _) => bail!(
            "'{shown}': client certificate sslcert {} is given, but its private key sslkey {} does not exist",
            c.display(),
            k.map_or_else(|| "(none)".to_string(), |k| k.display().to_string())
        ),
    };
    let sni = match p.sslsni.or_else(|| env.var("PGSSLSNI")).as_deref() {
        None | Some("1") => true,
        Some("0") => false,
        Some(other) => bail!("'{shown}': sslsni={other} is not 0 or 1"),
    };
    Ok(Settings {
        mode,
        roots: if mode == SslMode::Disable {
            None
        } else {
            roots
        },
        client,
        sni,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bare() -> Env {
        Env::given(&[], None, "login")
    }

    #[test]
    fn schema_is_taken_and_the_rest_passed_through() -> Result<()> {
        let u = PgUrl::resolve(
            "postgres://me:secret@db.local:6543/shop?sslmode=disable&schema=s%20a",
            &bare(),
        )?;
        assert_eq!(u.schema, "s a");
        assert_eq!(u.config.get_dbname(), Some("shop"));
        assert_eq!(u.config.get_user(), Some("me"));
        assert_eq!(u.config.get_ports(), &[6543]);
        assert_eq!(u.tls.mode, SslMode::Disable);
        assert_eq!(
            u.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        assert!(!u.shown.contains("secret"));
        assert_eq!(u.server, "db.local:6543");
        let u = PgUrl::resolve("postgresql://me@localhost/shop", &bare())?;
        assert_eq!(u.schema, "public");
        assert_eq!(u.tls.mode, SslMode::Prefer, "libpq's default");
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
            "postgres://me@host/db?sslmode=allow",
            "postgres://me@host/db?sslmode=verify",
            "postgres://me@host/db?sslmode=verify-ca",
            "postgres://me@host/db?sslmode=require&sslrootcert=system",
            "postgres://me@host/db?sslrootcert=/no/such/file.pem",
            "postgres://me@host/db?sslcert=/no/such/client.crt",
            "postgres://me@host/db?sslsni=2",
            "postgres://me@host/db?sslpassword=x",
        ] {
            assert!(PgUrl::resolve(bad, &bare()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_password_is_hidden_wherever_the_url_holds_it() -> Result<()> {
        for url in [
            "postgres://me:s3cr%40t@h/db",
            "postgres://me@h/db?password=s3cr%40t&schema=x",
        ] {
            assert!(holds_password(url), "{url}");
            let u = PgUrl::resolve(url, &bare())?;
            assert!(!u.shown.contains("s3cr"), "{}", u.shown);
            assert_eq!(u.password_from, Some(PasswordFrom::Url));
            let w = password_warning(&u.shown);
            assert!(w.contains("holds a password") && !w.contains("s3cr"), "{w}");
        }
        assert!(!holds_password("postgres://me@h/db?sslmode=require"));
        // A URL the client cannot parse is named without its password too.
        let e = PgUrl::resolve("postgres://me:s3cret@h:notaport/db", &bare())
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(!e.is_empty() && !e.contains("s3cret"), "{e}");
        Ok(())
    }

    #[test]
    fn what_the_url_leaves_out_comes_from_the_environment() -> Result<()> {
        let env = Env::given(
            &[
                ("PGHOST", "db.internal"),
                ("PGPORT", "6432"),
                ("PGUSER", "envuser"),
                ("PGDATABASE", "envdb"),
                ("PGSSLMODE", "require"),
                ("PGCONNECT_TIMEOUT", "7"),
            ],
            None,
            "login",
        );
        let u = PgUrl::resolve("postgres:///?schema=v2", &env)?;
        assert_eq!(
            u.config.get_hosts(),
            &[Host::Tcp("db.internal".to_string())]
        );
        assert_eq!(u.config.get_ports(), &[6432]);
        assert_eq!(u.config.get_user(), Some("envuser"));
        assert_eq!(u.config.get_dbname(), Some("envdb"));
        assert_eq!(u.tls.mode, SslMode::Require);
        assert_eq!(
            u.config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(7))
        );
        // The URL wins over the environment, setting by setting.
        let u = PgUrl::resolve(
            "postgres://urluser@urlhost:5433/urldb?sslmode=disable",
            &env,
        )?;
        assert_eq!(u.config.get_hosts(), &[Host::Tcp("urlhost".to_string())]);
        assert_eq!(u.config.get_ports(), &[5433]);
        assert_eq!(u.config.get_user(), Some("urluser"));
        assert_eq!(u.config.get_dbname(), Some("urldb"));
        assert_eq!(u.tls.mode, SslMode::Disable);
        // Nothing anywhere: the login name, the local socket, 5432.
        let u = PgUrl::resolve("postgres:///db", &bare())?;
        assert_eq!(u.config.get_user(), Some("login"));
        #[cfg(unix)]
        assert!(matches!(u.config.get_hosts(), [Host::Unix(_)]));
        assert!(u.server.contains("5432"), "{}", u.server);
        Ok(())
    }

    /// The password: the URL's, else PGPASSWORD, else the password file's
    /// first matching line, looked up with the host, port, database and
    /// user the connection ends up with.
    #[test]
    fn the_password_comes_from_the_url_then_pgpassword_then_the_password_file() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "other:5432:shop:app:not-this\ndb.internal:5432:shop:app:from-file\n",
        )?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
        }
        let passfile = file.display().to_string();
        let pw = |u: &PgUrl| {
            u.config
                .get_password()
                .map(|p| String::from_utf8_lossy(p).to_string())
        };
        let url = "postgres://app@db.internal/shop?schema=v2";

        let both = Env::given(
            &[("PGPASSWORD", "from-env"), ("PGPASSFILE", &passfile)],
            None,
            "login",
        );
        let u = PgUrl::resolve("postgres://app:from-url@db.internal/shop", &both)?;
        assert_eq!(pw(&u).as_deref(), Some("from-url"));
        assert_eq!(u.password_from, Some(PasswordFrom::Url));

        let u = PgUrl::resolve(url, &both)?;
        assert_eq!(pw(&u).as_deref(), Some("from-env"));
        assert_eq!(
            u.password_from,
            Some(PasswordFrom::Environment("PGPASSWORD"))
        );
        assert!(u.warnings.is_empty(), "{:?}", u.warnings);

        // Each side's own variable is above PGPASSWORD and the file, below
        // the URL, and read only for its side.
        let sides = || {
            Env::given(
                &[
                    ("PGPASSWORD", "from-env"),
                    ("PGPASSFILE", &passfile),
                    ("CUTOVER_SOURCE_PASSWORD", "from-source"),
                    ("CUTOVER_TARGET_PASSWORD", "from-target"),
                ],
                None,
                "login",
            )
        };
        let u = PgUrl::resolve(url, &sides().for_side(Side::Source))?;
        assert_eq!(pw(&u).as_deref(), Some("from-source"));
        assert_eq!(
            u.password_from,
            Some(PasswordFrom::Environment("CUTOVER_SOURCE_PASSWORD"))
        );
        let u = PgUrl::resolve(url, &sides().for_side(Side::Target))?;
        assert_eq!(pw(&u).as_deref(), Some("from-target"));
        let u = PgUrl::resolve(url, &sides())?;
        assert_eq!(pw(&u).as_deref(), Some("from-env"));
        let u = PgUrl::resolve(
            "postgres://app:from-url@db.internal/shop",
            &sides().for_side(Side::Target),
        )?;
        assert_eq!(pw(&u).as_deref(), Some("from-url"));
        let target_only = Env::given(
            &[
                ("PGPASSFILE", &passfile),
                ("CUTOVER_TARGET_PASSWORD", "from-target"),
            ],
            None,
            "login",
        );
        let u = PgUrl::resolve(url, &target_only.for_side(Side::Source))?;
        assert_eq!(pw(&u).as_deref(), Some("from-file"), "not the target's");

        let file_only = Env::given(&[("PGPASSFILE", &passfile)], None, "login");
        let u = PgUrl::resolve(url, &file_only)?;
        assert_eq!(pw(&u).as_deref(), Some("from-file"));
        assert_eq!(u.password_from, Some(PasswordFrom::File(file.clone())));

        // The lookup uses what the environment filled in.
        let from_env = Env::given(
            &[
                ("PGPASSFILE", &passfile),
                ("PGHOST", "db.internal"),
                ("PGUSER", "app"),
                ("PGDATABASE", "shop"),
            ],
            None,
            "login",
        );
        let u = PgUrl::resolve("postgres://", &from_env)?;
        assert_eq!(pw(&u).as_deref(), Some("from-file"));
        // No line for another user: no password.
        let u = PgUrl::resolve("postgres://bob@db.internal/shop", &file_only)?;
        assert_eq!(u.password_from, None);

        // ~/.pgpass when PGPASSFILE is not set.
        let home = tempfile::tempdir()?;
        std::fs::copy(&file, home.path().join(".pgpass"))?;
        let u = PgUrl::resolve(url, &Env::given(&[], Some(home.path().into()), "login"))?;
        assert_eq!(pw(&u).as_deref(), Some("from-file"));

        // A file others may read is not read, and the operator is told.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
            let u = PgUrl::resolve(url, &file_only)?;
            assert_eq!(u.password_from, None);
            assert!(
                u.warnings.iter().any(|w| w.contains("0600")),
                "{:?}",
                u.warnings
            );
        }
        Ok(())
    }

    #[test]
    fn tls_settings_follow_libpq() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not read until a connection is made")?;
        let ca_s = ca.display().to_string();
        let env = |v: &[(&str, &str)]| Env::given(v, None, "login");
        let u = PgUrl::resolve(
            &format!("postgres://a@h/d?sslmode=verify-ca&sslrootcert={ca_s}"),
            &env(&[]),
        )?;
        assert_eq!(u.tls.check(), super::super::tls::Check::Chain);
        assert_eq!(u.tls.roots, Some(Roots::File(ca.clone())));
        // require with a root certificate verifies the chain, as libpq.
        let u = PgUrl::resolve(
            "postgres://a@h/d?sslmode=require",
            &env(&[("PGSSLROOTCERT", &ca_s)]),
        )?;
        assert_eq!(u.tls.check(), super::super::tls::Check::Chain);
        let u = PgUrl::resolve("postgres://a@h/d?sslmode=require", &env(&[]))?;
        assert_eq!(u.tls.check(), super::super::tls::Check::Nothing);
        // ~/.postgresql/root.crt is the default root certificate.
        let home = tempfile::tempdir()?;
        std::fs::create_dir(home.path().join(".postgresql"))?;
        std::fs::copy(&ca, home.path().join(".postgresql/root.crt"))?;
        let u = PgUrl::resolve(
            "postgres://a@h/d?sslmode=verify-full",
            &Env::given(&[], Some(home.path().into()), "login"),
        )?;
        assert_eq!(u.tls.check(), super::super::tls::Check::ChainAndName);
        // sslrootcert=system asks for verify-full.
        let u = PgUrl::resolve("postgres://a@h/d?sslrootcert=system", &env(&[]))?;
        assert_eq!(u.tls.mode, SslMode::VerifyFull);
        assert_eq!(u.tls.roots, Some(Roots::System));
        // SNI is on unless sslsni=0.
        assert!(u.tls.sni);
        let u = PgUrl::resolve("postgres://a@h/d?sslsni=0", &env(&[]))?;
        assert!(!u.tls.sni);
        // A Unix socket is never encrypted.
        let u = PgUrl::resolve(
            "postgres://a@%2Fvar%2Frun%2Fpostgresql/d?sslmode=require",
            &env(&[]),
        )?;
        assert_eq!(
            u.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        Ok(())
    }
}
