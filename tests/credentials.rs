//! Where a connection's password comes from, driven through the binary
//! (`cutover init`, which opens both sides): a MySQL option file
//! (`~/.my.cnf`, `[client]` then `[cutover]`), the URL above the
//! environment above the file, and each side's own variable
//! (`CUTOVER_SOURCE_PASSWORD`, `CUTOVER_TARGET_PASSWORD`) for two users
//! with two passwords. And every connection failure that can be caused
//! here, on MySQL and PostgreSQL, says so in words: exit 2, no Rust debug
//! shapes on stderr.

mod support;

use std::path::Path;

use support::mysql::TestDb as MyDb;
use support::postgres::TestDb as PgDb;
use support::run::{Output, cutover};

/// `cutover init` from `source` to `target` with `HOME` at `home`, every
/// password variable empty unless `env` sets it.
fn init(source: &str, target: &str, home: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = cutover(&["init", "--source", source, "--target", target]);
    c.env("HOME", home.to_str().expect("a UTF-8 path"));
    for k in [
        "MYSQL_PWD",
        "PGPASSWORD",
        "CUTOVER_SOURCE_PASSWORD",
        "CUTOVER_TARGET_PASSWORD",
        "CUTOVER_MYSQL_OPTION_FILE",
    ] {
        c.env(k, "");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
}

/// The shapes of Rust's debug formatting, none of which a message may hold.
fn debug_shapes(text: &str) -> Vec<&'static str> {
    ["{ ", "Error {", "Some(", "\\\"", "Err(", "Ok("]
        .into_iter()
        .filter(|s| text.contains(s))
        .collect()
}

#[track_caller]
fn refused(out: &Output, words: &[&str]) {
    assert_eq!(out.code, Some(2), "{out}");
    for w in words {
        assert!(out.stderr.contains(w), "'{w}' not said:\n{out}");
    }
    assert!(
        debug_shapes(&out.stderr).is_empty(),
        "debug shapes {:?}:\n{out}",
        debug_shapes(&out.stderr)
    );
}

fn write_my_cnf(home: &Path, text: &str) {
    let path = home.join(".my.cnf");
    std::fs::write(&path, text).expect("writing .my.cnf");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .expect("chmod 0600");
    }
}

#[test]
fn a_mysql_option_file_gives_the_password_below_the_url_and_the_environment() {
    let (Some(source), Some(target)) = (MyDb::new("creds_file_s"), MyDb::new("creds_file_t"))
    else {
        return;
    };
    source.exec("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))");
    target.exec("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))");
    let pw = format!("file pw #{}", std::process::id());
    let app = source.app_user_with(&pw);
    target.exec(&format!(
        "GRANT SELECT ON `{0}`.* TO '{1}'@'%'; GRANT SELECT ON `{0}`.* TO '{1}'@'localhost'",
        target.name, app.name
    ));
    let server = source.server();
    let s_url = server.url_for(&app.name, None, &source.name);
    let t_url = server.url_for(&app.name, None, &target.name);
    let with_pw = |db: &str, p: &str| {
        let encoded = p
            .replace('%', "%25")
            .replace(' ', "%20")
            .replace('#', "%23");
        server.url_for(&app.name, Some(&encoded), db)
    };
    let home = tempfile::tempdir().expect("a home");
    let h = home.path();

    // No password anywhere: refused, and told where one may be given.
    refused(
        &init(&s_url, &t_url, h, &[]),
        &["Access denied", "~/.my.cnf", "CUTOVER_SOURCE_PASSWORD"],
    );

    // The file's [client] password, quoted because it holds a '#'.
    write_my_cnf(
        h,
        &format!("[mysqld]\npassword=no\n[client]\npassword = \"{pw}\" # the app's\n"),
    );
    let out = init(&s_url, &t_url, h, &[]);
    assert_eq!(out.code, Some(0), "{out}");
    assert!(out.stdout.contains("[[tables]]"), "{out}");

    // [cutover] wins over [client].
    write_my_cnf(
        h,
        &format!("[client]\npassword=wrong\n[cutover]\npassword='{pw}'\n"),
    );
    assert_eq!(init(&s_url, &t_url, h, &[]).code, Some(0));
    write_my_cnf(
        h,
        &format!("[client]\npassword='{pw}'\n[cutover]\npassword=wrong\n"),
    );
    refused(
        &init(&s_url, &t_url, h, &[]),
        &["Access denied", "it came from the option file", ".my.cnf"],
    );

    // The URL wins over the file.
    let out = init(
        &with_pw(&source.name, &pw),
        &with_pw(&target.name, &pw),
        h,
        &[],
    );
    assert_eq!(out.code, Some(0), "{out}");
    // The environment wins over the file, both ways.
    assert_eq!(init(&s_url, &t_url, h, &[("MYSQL_PWD", &pw)]).code, Some(0));
    write_my_cnf(h, &format!("[client]\npassword='{pw}'\n"));
    assert_eq!(init(&s_url, &t_url, h, &[]).code, Some(0));
    refused(
        &init(&s_url, &t_url, h, &[("MYSQL_PWD", "wrong")]),
        &["Access denied", "it came from MYSQL_PWD"],
    );
    // The URL wins over the environment.
    let out = init(
        &with_pw(&source.name, &pw),
        &with_pw(&target.name, &pw),
        h,
        &[("MYSQL_PWD", "wrong")],
    );
    assert_eq!(out.code, Some(0), "{out}");

    // CUTOVER_MYSQL_OPTION_FILE is read instead of ~/.my.cnf.
    let other = h.join("cutover.cnf");
    std::fs::write(&other, format!("[cutover]\npassword='{pw}'\n")).expect("writing");
    write_my_cnf(h, "[client]\npassword=wrong\n");
    let named = other.to_str().expect("UTF-8");
    assert_eq!(
        init(&s_url, &t_url, h, &[("CUTOVER_MYSQL_OPTION_FILE", named)]).code,
        Some(0)
    );

    // What cannot be honoured is refused, naming the file.
    write_my_cnf(h, "[client]\n!includedir /etc/mysql/conf.d/\n");
    refused(&init(&s_url, &t_url, h, &[]), &[".my.cnf", "!includedir"]);
    write_my_cnf(h, "[client]\npassword\n");
    refused(&init(&s_url, &t_url, h, &[]), &[".my.cnf", "never prompts"]);
    // A file anyone may write is not read, as the mysql client does not
    // read it, and the operator is told why before the refusal.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        write_my_cnf(h, &format!("[client]\npassword='{pw}'\n"));
        std::fs::set_permissions(h.join(".my.cnf"), std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        refused(
            &init(&s_url, &t_url, h, &[]),
            &[
                "warning: the MySQL option file",
                "chmod 0600",
                "Access denied",
            ],
        );
    }
}

#[test]
fn each_side_has_its_own_password_variable() {
    let (Some(source), Some(target)) = (MyDb::new("creds_side_s"), MyDb::new("creds_side_t"))
    else {
        return;
    };
    source.exec("CREATE TABLE t (id INT PRIMARY KEY)");
    target.exec("CREATE TABLE t (id INT PRIMARY KEY)");
    let s_app = source.app_user_with("source-secret");
    let t_app = target.app_user_with("target-secret");
    let server = source.server();
    let s_url = server.url_for(&s_app.name, None, &source.name);
    let t_url = server.url_for(&t_app.name, None, &target.name);
    let home = tempfile::tempdir().expect("a home");
    let h = home.path();
    let out = init(
        &s_url,
        &t_url,
        h,
        &[
            ("CUTOVER_SOURCE_PASSWORD", "source-secret"),
            ("CUTOVER_TARGET_PASSWORD", "target-secret"),
        ],
    );
    assert_eq!(out.code, Some(0), "{out}");
    // Swapped: the source is refused, and told which variable it read.
    let out = init(
        &s_url,
        &t_url,
        h,
        &[
            ("CUTOVER_SOURCE_PASSWORD", "target-secret"),
            ("CUTOVER_TARGET_PASSWORD", "source-secret"),
        ],
    );
    refused(
        &out,
        &["source database", "it came from CUTOVER_SOURCE_PASSWORD"],
    );
    assert!(!out.all().contains("secret"), "{out}");
    // The side's variable is above MYSQL_PWD (the source's password here)
    // and the option file.
    write_my_cnf(h, "[client]\npassword=source-secret\n");
    let out = init(
        &s_url,
        &t_url,
        h,
        &[
            ("MYSQL_PWD", "source-secret"),
            ("CUTOVER_TARGET_PASSWORD", "target-secret"),
        ],
    );
    assert_eq!(out.code, Some(0), "{out}");
    let out = init(&s_url, &t_url, h, &[("MYSQL_PWD", "source-secret")]);
    refused(&out, &["target database", "it came from MYSQL_PWD"]);
}

#[test]
fn connection_failures_are_sentences_without_debug_shapes() {
    let (Some(my), Some(pg)) = (MyDb::new("creds_errors"), PgDb::new("creds_errors")) else {
        return;
    };
    my.exec("CREATE TABLE t (id INT PRIMARY KEY)");
    let app = my.app_user();
    let server = my.server();
    let home = tempfile::tempdir().expect("a home");
    let h = home.path();
    let ca = h.join("another-ca.pem");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().expect("a key");
    let cert = params.self_signed(&key).expect("a certificate");
    std::fs::write(&ca, cert.pem()).expect("writing the CA");
    let ca = ca.to_str().expect("UTF-8");

    let good_my = app.url();
    let (pg_base, _) = pg.url.rsplit_once('/').expect("a database");
    let my_tls = format!("{good_my}?ssl-mode=REQUIRED");
    let mut failures: Vec<(String, Vec<&str>)> = vec![
        (
            "mysql://root@no-such-host.invalid:3306/db".into(),
            vec!["no-such-host.invalid"],
        ),
        ("mysql://root@127.0.0.1:1/db".into(), vec!["127.0.0.1:1"]),
        (
            good_my.replace(&app.password, "not-it"),
            vec!["Access denied"],
        ),
        (
            server.url_for(&app.name, Some(&app.password), "cutover_no_such_db"),
            vec!["cutover_no_such_db"],
        ),
        (
            "postgres://postgres@no-such-host.invalid:5432/db".into(),
            vec!["no-such-host.invalid"],
        ),
        (
            "postgres://postgres@127.0.0.1:1/db".into(),
            vec!["127.0.0.1:1"],
        ),
        (
            format!("{pg_base}/cutover_no_such_db"),
            vec!["cutover_no_such_db"],
        ),
        (
            format!("{}?sslmode=verify-full&sslrootcert={ca}", pg.url),
            vec!["TLS failed"],
        ),
    ];
    let offers_tls = my.value("SELECT @@have_ssl") == "YES";
    if !offers_tls {
        failures.push((my_tls, vec!["does not offer TLS"]));
    }
    for (url, words) in &failures {
        let out = init(url, &good_my, h, &[]);
        refused(&out, words);
        assert!(out.stderr.contains("source"), "{out}");
        assert!(!out.stderr.contains(&app.password), "{out}");
    }
    // The target side too, on each engine.
    refused(
        &init(&good_my, "mysql://root@127.0.0.1:1/db", h, &[]),
        &["target database"],
    );
    refused(
        &init(&good_my, "postgres://postgres@127.0.0.1:1/db", h, &[]),
        &["target database"],
    );
}

/// PostgreSQL here trusts every connection, so a wrong password cannot be
/// refused: what is tested is that each side's variable is the password
/// the connection was given, as `check` says.
#[test]
fn each_postgres_side_is_given_its_own_variable() {
    let (Some(source), Some(target)) = (PgDb::new("creds_pg_s"), PgDb::new("creds_pg_t")) else {
        return;
    };
    for db in [&source, &target] {
        db.client()
            .batch_execute("CREATE TABLE t (id bigint PRIMARY KEY)")
            .expect("a table");
    }
    let home = tempfile::tempdir().expect("a home");
    let h = home.path();
    let s_url = format!("{}?schema=public&sslmode=disable", source.url);
    let t_url = format!("{}?schema=public&sslmode=disable", target.url);
    let out = init(&s_url, &t_url, h, &[]);
    assert_eq!(out.code, Some(0), "{out}");
    std::fs::write(h.join("spec.toml"), &out.stdout).expect("the spec");
    let check = |env: &[(&str, &str)]| {
        let mut c = cutover(&[
            "check",
            "--spec",
            h.join("spec.toml").to_str().expect("UTF-8"),
        ]);
        c.env("HOME", h.to_str().expect("UTF-8"));
        for k in [
            "PGPASSWORD",
            "CUTOVER_SOURCE_PASSWORD",
            "CUTOVER_TARGET_PASSWORD",
        ] {
            c.env(k, "");
        }
        for (k, v) in env {
            c.env(k, v);
        }
        c.output()
    };
    let out = check(&[
        ("PGPASSWORD", "shared"),
        ("CUTOVER_SOURCE_PASSWORD", "s-secret"),
        ("CUTOVER_TARGET_PASSWORD", "t-secret"),
    ]);
    assert_eq!(out.code, Some(0), "{out}");
    let said: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.contains("password from"))
        .collect();
    assert_eq!(said.len(), 2, "{out}");
    assert!(
        said[0].contains("password from CUTOVER_SOURCE_PASSWORD"),
        "{out}"
    );
    assert!(
        said[1].contains("password from CUTOVER_TARGET_PASSWORD"),
        "{out}"
    );
    assert!(!out.all().contains("secret"), "{out}");
    // Without them, both sides share PGPASSWORD.
    let out = check(&[("PGPASSWORD", "shared")]);
    assert_eq!(out.code, Some(0), "{out}");
    assert_eq!(
        out.stdout.matches("password from PGPASSWORD").count(),
        2,
        "{out}"
    );
}
