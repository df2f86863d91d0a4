//! Connecting to MySQL/MariaDB: every session strict, in UTC, utf8mb4 and
//! untimed; a reader read-only on one snapshot; TLS modes honoured as far as
//! a server without TLS shows them; Unix sockets; and errors in one line
//! that name the URL without its password and say what to do.

mod support;

use anyhow::Result;
use cutover::db::Access;
use cutover::db::credentials::Env;
use cutover::db::mysql::scan::Scan;
use cutover::db::mysql::url::MyUrl;
use cutover::db::mysql::{Flavor, MySql};
use support::mysql::TestDb;

/// The one value of a query through the engine.
fn one(db: &MySql, sql: &str) -> Result<Option<String>> {
    let rows = db.query_text(sql, Vec::new())?;
    assert_eq!(rows.len(), 1, "{sql}");
    Ok(rows[0][0].clone())
}

#[test]
fn every_session_is_strict_utc_utf8mb4_and_untimed() -> Result<()> {
    let Some(db) = TestDb::new("connect_session") else {
        return Ok(());
    };
    let version = db.value("SELECT VERSION()");
    for access in [Access::Read, Access::Write] {
        let e = MySql::open(&db.url, access, cutover::spec::Side::Source)?;
        assert_eq!(e.server().version_text, version);
        assert_eq!(
            e.server().flavor == Flavor::MariaDb,
            version.contains("MariaDB")
        );
        let mode = one(&e, "SELECT @@SESSION.sql_mode")?.unwrap_or_default();
        for m in [
            "STRICT_ALL_TABLES",
            "STRICT_TRANS_TABLES",
            "NO_ZERO_DATE",
            "NO_ZERO_IN_DATE",
            "ERROR_FOR_DIVISION_BY_ZERO",
            "NO_ENGINE_SUBSTITUTION",
            "NO_AUTO_VALUE_ON_ZERO",
        ] {
            assert!(mode.split(',').any(|x| x == m), "{m} not in {mode}");
        }
        assert_eq!(
            one(&e, "SELECT @@SESSION.time_zone")?.as_deref(),
            Some("+00:00")
        );
        for v in [
            "character_set_client",
            "character_set_results",
            "character_set_connection",
        ] {
            assert_eq!(
                one(&e, &format!("SELECT @@SESSION.{v}"))?.as_deref(),
                Some("utf8mb4"),
                "{v}"
            );
        }
        if e.server().flavor == Flavor::MariaDb {
            assert_eq!(
                one(&e, "SELECT @@SESSION.max_statement_time")?.as_deref(),
                Some("0")
            );
            assert_eq!(
                one(&e, "SELECT @@SESSION.tx_isolation")?.as_deref(),
                Some("REPEATABLE-READ")
            );
        }
        assert_eq!(
            one(&e, "SELECT @@SESSION.max_sort_length")?.as_deref(),
            Some("8388608")
        );
        let read_only = one(&e, "SELECT @@SESSION.tx_read_only")?;
        assert_eq!(read_only.as_deref() == Some("1"), access == Access::Read);
    }
    Ok(())
}

#[test]
fn a_reader_writes_nothing_and_reads_one_snapshot() -> Result<()> {
    let Some(db) = TestDb::new("connect_snapshot") else {
        return Ok(());
    };
    db.exec("CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1), (2)");
    let app = db.app_user();
    // The application's grants are enough to read.
    let reader = MySql::open(&app.url(), Access::Read, cutover::spec::Side::Source)?;
    let e = reader
        .execute("INSERT INTO t VALUES (?)", vec![3.into()])
        .expect_err("a reader's session is read-only");
    let e = format!("{e:#}");
    assert!(
        e.contains("READ ONLY") && e.contains("opened for reading"),
        "{e}"
    );
    assert!(
        !e.contains('\n') && e.contains(":***@") && !e.contains(&app.password),
        "{e}"
    );
    let e = format!("{:#}", reader.count("missing").expect_err("no such table"));
    assert!(
        e.contains("counting table 'missing'") && e.contains("check the spec's names"),
        "{e}"
    );
    reader.begin()?;
    assert_eq!(reader.count("t")?, 2);
    app.exec("INSERT INTO t VALUES (3)")
        .expect("the application writes");
    let scan = Scan::new(&reader, "t", &["id"], 1)?;
    let mut seen = 0;
    reader.scan(&scan, None, 10, &mut |b| {
        seen += b.rows();
        Ok(true)
    })?;
    assert_eq!(
        (reader.count("t")?, seen),
        (2, 2),
        "one snapshot for the transaction"
    );
    reader.commit()?;
    assert_eq!(reader.count("t")?, 3);
    // A writer with the same grants writes, in a transaction it commits.
    let writer = MySql::open(&app.url(), Access::Write, cutover::spec::Side::Target)?;
    writer.begin()?;
    writer.execute("INSERT INTO t VALUES (?)", vec![4.into()])?;
    writer.rollback();
    assert_eq!(db.value("SELECT COUNT(*) FROM t"), "3");
    Ok(())
}

#[test]
fn failures_are_one_line_naming_the_url_without_its_password() -> Result<()> {
    let Some(db) = TestDb::new("connect_errors") else {
        return Ok(());
    };
    let app = db.app_user();
    let bad = app.url().replace(&app.password, "not-the-password");
    let e = format!(
        "{:#}",
        MySql::open(&bad, Access::Read, cutover::spec::Side::Source)
            .err()
            .expect("refused")
    );
    assert!(
        !e.contains("not-the-password") && !e.contains(&app.password),
        "{e}"
    );
    assert!(e.contains(":***@") && e.contains("Access denied"), "{e}");
    assert!(
        e.contains("source database")
            && e.contains("check the user and the password (it came from the URL)"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    // The password from MYSQL_PWD when the URL has none.
    let no_pw = app.url().replace(&format!(":{}@", app.password), "@");
    let env = |pw: &str| Env::given(&[("MYSQL_PWD", pw)], None, "login");
    let u = MyUrl::resolve(&no_pw, &env(&app.password))?;
    MySql::open_url(&u, Access::Read, cutover::spec::Side::Source)?;
    let u = MyUrl::resolve(&no_pw, &env("wrong"))?;
    let e = format!(
        "{:#}",
        MySql::open_url(&u, Access::Read, cutover::spec::Side::Source)
            .err()
            .expect("refused")
    );
    assert!(
        e.contains("it came from MYSQL_PWD") && !e.contains("wrong"),
        "{e}"
    );
    let missing = db.url.replace(&db.name, "cutover_no_such_db");
    let e = format!(
        "{:#}",
        MySql::open(&missing, Access::Read, cutover::spec::Side::Target)
            .err()
            .expect("no db")
    );
    assert!(
        e.contains("cutover_no_such_db") && e.contains("check the database name"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        MySql::open(
            "mysql://root@127.0.0.1:1/test",
            Access::Read,
            cutover::spec::Side::Source
        )
        .err()
        .expect("no server")
    );
    assert!(
        e.contains("127.0.0.1:1") && e.contains("is the server running"),
        "{e}"
    );
    Ok(())
}

#[test]
fn tls_modes_are_honoured_and_said() -> Result<()> {
    let Some(db) = TestDb::new("connect_tls") else {
        return Ok(());
    };
    let have_ssl = db.value("SELECT @@have_ssl") == "YES";
    let with = |mode: &str| format!("{}?ssl-mode={mode}", db.url);
    let plain = MySql::open(&with("DISABLED"), Access::Read, cutover::spec::Side::Source)?;
    assert!(
        plain
            .transport()?
            .contains("not encrypted, ssl-mode=DISABLED")
    );
    let preferred = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let required = MySql::open(&with("REQUIRED"), Access::Read, cutover::spec::Side::Source);
    if have_ssl {
        assert!(
            preferred.transport()?.contains(" encrypted ("),
            "{}",
            preferred.transport()?
        );
        let t = required?.transport()?;
        assert!(
            t.contains(" encrypted (") && t.contains("not verified"),
            "{t}"
        );
    } else {
        // This server offers no TLS: PREFERRED goes on in plaintext and says
        // so; REQUIRED refuses before anything is read.
        let t = preferred.transport()?;
        assert!(
            t.contains("not encrypted, ssl-mode=PREFERRED (the server does not offer TLS)"),
            "{t}"
        );
        let e = format!("{:#}", required.err().expect("REQUIRED without TLS"));
        assert!(
            e.contains("ssl-mode=REQUIRED") && e.contains("does not offer TLS"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            MySql::open(
                &with("VERIFY_IDENTITY"),
                Access::Read,
                cutover::spec::Side::Source
            )
            .err()
            .expect("refused")
        );
        assert!(e.contains("ssl-mode=VERIFY_IDENTITY"), "{e}");
    }
    Ok(())
}

#[test]
fn a_unix_socket_connects_and_is_never_encrypted() -> Result<()> {
    let Some(db) = TestDb::new("connect_socket") else {
        return Ok(());
    };
    let socket = db.value("SELECT @@socket");
    if !std::path::Path::new(&socket).exists() {
        println!("skipping the socket part: the server's socket {socket} is not on this machine");
        return Ok(());
    }
    let app = db.app_user();
    let url = format!(
        "mysql://{}:{}@/{}?socket={socket}",
        app.name, app.password, db.name
    );
    let e = MySql::open(&url, Access::Read, cutover::spec::Side::Source)?;
    assert_eq!(
        one(&e, "SELECT CURRENT_USER()")?,
        Some(format!("{}@localhost", app.name))
    );
    let t = e.transport()?;
    assert!(
        t.contains(&format!("socket {socket} not encrypted")) && t.contains("(a Unix socket)"),
        "{t}"
    );
    Ok(())
}
