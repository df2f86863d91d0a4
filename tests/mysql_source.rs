//! MySQL (MariaDB here) as the source of a migration, through the binary:
//! `check`, `load` and `gate` from a MySQL database into PostgreSQL and
//! into SQLite, with the application writing through the `mariadb` client
//! as a user with ordinary grants, and the target's rows compared with an
//! oracle the test computes from what the client prints (never from the
//! tool's decoding). Then MySQL the other way round: a MySQL target
//! behind a SQLite source takes the journal and the fence (MySQL as a
//! target is `tests/mysql_target.rs`, `tests/mysql_journal.rs` and
//! `tests/mysql_fence.rs`).

mod support;

use support::mysql::{TestDb as MyDb, cents};
use support::postgres::TestDb as PgDb;
use support::run::{cutover, cutover_in};

/// The application's table on MySQL: every kind the migration carries.
const SOURCE: &str = "CREATE TABLE orders (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    dollars DECIMAL(12,2) NOT NULL,
    status ENUM('A','C') NOT NULL,
    paid TINYINT(1) NOT NULL,
    note VARCHAR(100) CHARACTER SET utf8mb4,
    code VARBINARY(8),
    due DATE,
    at DATETIME(6),
    seen TIMESTAMP(6) NULL
) ENGINE = InnoDB";

/// What the application writes, as its own user.
const APP_WRITES: &str = "INSERT INTO orders VALUES
    (1, 12.50, 'A', 1, 'héllo \u{1F600}', x'00ff10', '2024-03-15', '2024-03-15 13:45:00.5', '2024-03-15 13:45:00.123456'),
    (2, 0.01, 'C', 0, NULL, NULL, NULL, NULL, NULL),
    (3, 99999.99, 'A', 0, 'a''quote', x'', '1999-12-31', '2000-01-01 00:00:00', '2038-01-19 03:14:07'),
    (9223372036854775807, -5.25, 'C', 1, '', x'41', '2024-02-29', '2024-02-29 23:59:59.999999', NULL);";

const PG_TARGET: &str = "CREATE TABLE orders (
    id bigint PRIMARY KEY, cents bigint NOT NULL, status text NOT NULL, paid integer NOT NULL,
    note text, code bytea, due date, at timestamp, seen timestamptz)";

const SQLITE_TARGET: &str = "CREATE TABLE orders (
    id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL, paid INTEGER NOT NULL,
    note TEXT, code BLOB, due TEXT, at TEXT, seen TEXT)";

fn spec(source: &str, target: &str) -> String {
    support::mysql::orders_spec(
        source,
        target,
        &["paid", "note", "code", "due", "at", "seen"],
        "",
    )
}

/// The oracle: each source row as the target must hold it, from what the
/// `mariadb` client prints (`id`, cents, status word, paid, note, hex of
/// code, due, at, seen in UTC), in key order.
fn oracle(my: &MyDb) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = my
        .rows(
            "SET time_zone = '+00:00';
             SELECT id, dollars, status, paid, IFNULL(note, 'NULL!'), IFNULL(LOWER(HEX(code)), 'NULL!'),
                    IFNULL(due, 'NULL!'), IFNULL(at, 'NULL!'), IFNULL(seen, 'NULL!') FROM orders ORDER BY id",
        )
        .into_iter()
        .map(|r| {
            vec![
                r[0].clone(),
                cents(&r[1]).to_string(),
                match r[2].as_str() {
                    "A" => "active".to_string(),
                    _ => "closed".to_string(),
                },
                r[3].clone(),
                r[4].clone(),
                r[5].clone(),
                r[6].clone(),
                trim_fraction(&r[7]),
                trim_fraction(&r[8]),
            ]
        })
        .collect();
    rows.sort_by_key(|r| r[0].parse::<i64>().unwrap());
    rows
}

/// `13:45:00.500000` as PostgreSQL prints it, `13:45:00.5`.
fn trim_fraction(t: &str) -> String {
    match t.split_once('.') {
        Some((a, f)) => {
            let f = f.trim_end_matches('0');
            if f.is_empty() {
                a.to_string()
            } else {
                format!("{a}.{f}")
            }
        }
        None => t.to_string(),
    }
}

fn pg_rows(pg: &PgDb) -> Vec<Vec<String>> {
    let mut c = pg.client();
    c.batch_execute("SET TimeZone = 'UTC'").unwrap();
    c.query(
        "SELECT id::text, cents::text, status, paid::text, coalesce(note, 'NULL!'),
                coalesce(encode(code, 'hex'), 'NULL!'), coalesce(due::text, 'NULL!'),
                coalesce(at::text, 'NULL!'), coalesce(to_char(seen, 'YYYY-MM-DD HH24:MI:SS.US'), 'NULL!')
         FROM orders ORDER BY id",
        &[],
    )
    .unwrap()
    .iter()
    .map(|r| {
        let mut v: Vec<String> = (0..9).map(|i| r.get::<_, String>(i)).collect();
        v[8] = trim_fraction(&v[8]);
        v
    })
    .collect()
}

#[test]
fn a_mysql_source_loads_into_postgres_exactly_and_the_gate_sees_a_later_write() {
    let Some(my) = MyDb::new("mysql_source_pg") else {
        return;
    };
    let Some(pg) = PgDb::new("mysql_source_pg") else {
        return;
    };
    my.exec(SOURCE);
    let app = my.app_user();
    app.exec(APP_WRITES).expect("the application's writes");
    pg.client().batch_execute(PG_TARGET).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec(&app.url(), &format!("{}?schema=public", pg.url)),
    )
    .unwrap();
    let run = |args: &[&str], code: i32| cutover_in(dir.path(), args).expect(code);

    let check = run(&["check"], 0);
    check.assert_mentions(&["orders", "check: pass", "innodb_flush_log_at_trx_commit"]);
    assert!(
        !check.all().contains(&app.password),
        "the password never shows\n{check}"
    );
    run(&["load"], 0);
    let expected = oracle(&my);
    assert_eq!(expected.len(), 4);
    assert_eq!(pg_rows(&pg), expected, "the target holds the oracle's rows");
    run(&["gate"], 0).assert_mentions(&["verdict: PASS"]);

    // A later write of the application's: the gate fails, naming the key.
    app.exec("UPDATE orders SET dollars = 12.51 WHERE id = 1")
        .expect("an update");
    let gate = run(&["gate"], 1);
    gate.assert_mentions(&["[1]", "changed", "cents", "1250", "1251", "verdict: FAIL"]);
    // A second load resumes: nothing is written twice.
    run(&["load"], 0);
    assert_eq!(pg_rows(&pg).len(), 4);
}

#[test]
fn a_mysql_source_loads_into_sqlite_and_gates_in_stream_mode() {
    let Some(my) = MyDb::new("mysql_source_sqlite") else {
        return;
    };
    my.exec(SOURCE);
    let app = my.app_user();
    app.exec(APP_WRITES).expect("the application's writes");
    let dir = tempfile::tempdir().unwrap();
    rusqlite::Connection::open(dir.path().join("target.db"))
        .unwrap()
        .execute_batch(SQLITE_TARGET)
        .unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec(&app.url(), "sqlite://target.db"),
    )
    .unwrap();
    let run = |args: &[&str], code: i32| cutover_in(dir.path(), args).expect(code);
    run(&["check"], 0);
    run(&["load"], 0);
    run(&["gate", "--mode", "stream"], 0).assert_mentions(&["verdict: PASS"]);
    let conn = rusqlite::Connection::open(dir.path().join("target.db")).unwrap();
    let got: Vec<(i64, i64, String)> = conn
        .prepare("SELECT id, cents, status FROM orders ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let want: Vec<(i64, i64, String)> = oracle(&my)
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap(), r[2].clone()))
        .collect();
    assert_eq!(got, want);
    // A row deleted by the application: missing on the source side.
    app.exec("DELETE FROM orders WHERE id = 2").unwrap();
    run(&["gate"], 1).assert_mentions(&["[2]", "extra"]);
}

/// `init` reads a MySQL schema: the draft takes the money's scale from
/// the declared `DECIMAL(10,2)`, shows an `ENUM`'s values, passes `check`
/// as drafted, and loads and gates exactly; drafting wrote nothing.
#[test]
fn init_drafts_a_spec_from_a_mysql_schema_that_checks_loads_and_gates() {
    let Some(my) = MyDb::new("mysql_init") else {
        return;
    };
    let Some(pg) = PgDb::new("mysql_init") else {
        return;
    };
    my.exec(
        "CREATE TABLE orders (id INT PRIMARY KEY AUTO_INCREMENT, total DECIMAL(10,2) NOT NULL,
             status ENUM('A','C') NOT NULL, note VARCHAR(20)) ENGINE = InnoDB",
    );
    let app = my.app_user();
    app.exec("INSERT INTO orders (total, status, note) VALUES (1.50, 'A', 'x'), (2.00, 'C', NULL), (0.07, 'A', '')")
        .expect("the application's writes");
    pg.client()
        .batch_execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, total bigint NOT NULL, status text NOT NULL, note text)",
        )
        .unwrap();
    let tables_of_my = || {
        my.exec("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() ORDER BY 1")
    };
    let my_before = tables_of_my();
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{}?schema=public", pg.url);
    let out = dir.path().join("draft.toml");
    cutover(&[
        "init",
        "--source",
        &app.url(),
        "--target",
        &target,
        "--out",
        out.to_str().unwrap(),
    ])
    .expect(0);
    let without_password = |url: &str| {
        let (scheme, rest) = url.split_once("://").unwrap();
        let (auth, host) = rest.rsplit_once('@').unwrap();
        format!("{scheme}://{}@{host}", auth.split(':').next().unwrap())
    };
    assert_eq!(
        tables_of_my(),
        my_before,
        "init writes nothing to the source"
    );
    let draft = std::fs::read_to_string(dir.path().join("draft.toml")).unwrap();
    assert!(
        !draft.contains(&app.password),
        "no password in the draft\n{draft}"
    );
    assert!(
        draft.contains("transform = \"decimal_to_minor\"") && draft.contains("scale = 2"),
        "the scale from the declared type\n{draft}"
    );
    assert!(draft.contains("\"A\", \"C\""), "the ENUM's values\n{draft}");
    assert!(
        draft.contains(&format!("url = \"{}\"", without_password(&app.url())))
            && draft.contains("MYSQL_PWD"),
        "the URL without its password, and where the password comes from\n{draft}"
    );
    std::fs::write(dir.path().join("spec.toml"), &draft).unwrap();
    let run = |args: &[&str], code: i32| {
        cutover_in(dir.path(), args)
            .env("MYSQL_PWD", &app.password)
            .expect(code)
    };
    run(&["check"], 0);
    run(&["load"], 0);
    run(&["gate"], 0).assert_mentions(&["verdict: PASS"]);
    let mut got: Vec<(i64, i64, String, Option<String>)> = pg
        .client()
        .query(
            "SELECT id, total, status, note FROM orders ORDER BY id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (1, 150, "A".to_string(), Some("x".to_string())),
            (2, 200, "C".to_string(), None),
            (3, 7, "A".to_string(), Some(String::new())),
        ]
    );
}

/// A `BIGINT UNSIGNED` past the largest 64-bit integer is refused by
/// `check`, naming table, key and column, and nothing is written.
#[test]
fn an_unsigned_value_past_i64_is_refused_naming_its_row() {
    let Some(my) = MyDb::new("mysql_source_unsigned") else {
        return;
    };
    my.exec(&format!(
        "{SOURCE}; INSERT INTO orders (id, dollars, status, paid) VALUES (18446744073709551615, 1.00, 'A', 0)"
    ));
    let dir = tempfile::tempdir().unwrap();
    rusqlite::Connection::open(dir.path().join("target.db"))
        .unwrap()
        .execute_batch(SQLITE_TARGET)
        .unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec(&my.url, "sqlite://target.db"),
    )
    .unwrap();
    let out = cutover_in(dir.path(), &["check"]).output();
    assert_ne!(out.code, Some(0), "{out}");
    out.assert_mentions(&["orders", "18446744073709551615", "id"]);
    let n: i64 = rusqlite::Connection::open(dir.path().join("target.db"))
        .unwrap()
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

/// A MySQL target behind a SQLite source takes the journal and the fence
/// (tests/mysql_fence.rs runs the fence's contract); lifted, nothing of
/// the fence is left.
#[test]
fn a_mysql_target_behind_a_sqlite_source_takes_the_journal_and_the_fence() {
    let Some(my) = MyDb::new("mysql_target_refuses") else {
        return;
    };
    my.exec(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, cents BIGINT NOT NULL, status VARCHAR(10) NOT NULL,
             paid INT NOT NULL, note TEXT, code BLOB, due DATE, at DATETIME(6), seen TIMESTAMP(6) NULL)",
    );
    let dir = tempfile::tempdir().unwrap();
    rusqlite::Connection::open(dir.path().join("source.db"))
        .unwrap()
        .execute_batch(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL,
                 paid INTEGER NOT NULL, note TEXT, code BLOB, due TEXT, at TEXT, seen TEXT)",
        )
        .unwrap();
    std::fs::write(
        dir.path().join("spec.toml"),
        spec("sqlite://source.db", &my.url),
    )
    .unwrap();
    cutover_in(dir.path(), &["journal", "install"]).expect(0);
    let fence_triggers = "SELECT COUNT(*) FROM information_schema.TRIGGERS
         WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME LIKE '\\_cutover\\_fence\\_%'";
    cutover_in(dir.path(), &["fence", "on"]).expect(0);
    // Three on orders, on each of the journal's tables and on the fence row.
    for table in ["orders", "_cutover_journal_tables", "_cutover_fence"] {
        assert_eq!(
            my.value(&format!(
                "{fence_triggers} AND EVENT_OBJECT_TABLE = '{table}'"
            )),
            "3",
            "{table}"
        );
    }
    cutover_in(dir.path(), &["fence", "status"]).expect(0);
    cutover_in(dir.path(), &["fence", "off", "--force"]).expect(0);
    assert_eq!(my.value(fence_triggers), "0");
}

/// A spatial column, whose values cutover does not read, no longer stops
/// `init`: the draft ignores it in the source and leaves it to the
/// target's default, each with a `DECIDE` naming what that costs, and
/// the rest of the table and of the database checks, loads and gates as
/// drafted (MariaDB into MariaDB, the rows compared with what the client
/// prints of the source).
#[test]
fn init_leaves_a_spatial_column_out_and_drafts_the_rest() {
    let Some(my) = MyDb::new("mysql_spatial") else {
        return;
    };
    let Some(target) = MyDb::new("mysql_spatial_t") else {
        return;
    };
    let schema = |null: &str| {
        format!(
            "CREATE TABLE address (id INT PRIMARY KEY, street VARCHAR(50) NOT NULL, location POINT {null}) ENGINE = InnoDB;
             CREATE TABLE city (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL) ENGINE = InnoDB;"
        )
    };
    my.exec(&schema("NOT NULL"));
    target.exec(&schema("NULL"));
    my.app_user()
        .exec(
            "INSERT INTO address VALUES (1, 'Elm', POINT(1, 2)), (2, 'Oak', POINT(-3.5, 4));
             INSERT INTO city VALUES (1, 'Lethbridge'), (2, 'Woodridge');",
        )
        .expect("the application's writes");
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    cutover(&[
        "init",
        "--source",
        &my.url,
        "--target",
        &target.url,
        "--out",
        spec.to_str().unwrap(),
    ])
    .expect(0);
    let draft = std::fs::read_to_string(&spec).unwrap();
    assert!(
        draft.contains("ignore = [\"location\"]")
            && draft.contains("neither migrated nor checked")
            && draft.contains("address.location: column 'location' is of type point")
            && draft.contains("target = \"location\"\ndefault = true"),
        "{draft}"
    );
    cutover_in(dir.path(), &["check"])
        .expect(0)
        .assert_mentions(&["location"]);
    cutover_in(dir.path(), &["load"]).expect(0);
    let rows = |db: &MyDb| {
        db.exec(
            "SELECT id, street, location IS NULL FROM address ORDER BY id;
             SELECT id, name FROM city ORDER BY id",
        )
    };
    assert_eq!(
        rows(&target),
        "1\tElm\t1\n2\tOak\t1\n1\tLethbridge\n2\tWoodridge\n"
    );
    assert_eq!(
        rows(&my),
        "1\tElm\t0\n2\tOak\t0\n1\tLethbridge\n2\tWoodridge\n"
    );
    cutover_in(dir.path(), &["gate"]).expect(0);
}
