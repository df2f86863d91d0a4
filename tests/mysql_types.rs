//! MySQL/MariaDB column types read and written exactly: the application
//! writes every type's edge values through the `mariadb` client, the engine
//! reads them back, and each value is compared with the one this test
//! expects, written out here; values written back through the engine are
//! compared with the originals by the client. Values that are no value (a
//! zero date, an unsigned integer past 2^63) are refused, naming table,
//! key, column and value.

mod support;

use anyhow::Result;
use cutover::db::Access;
use cutover::db::mysql::MySql;
use cutover::db::mysql::scan::Scan;
use cutover::db::mysql::types::{self, BadValue, Kind};
use cutover::value::Value;
use support::mysql::TestDb;

fn int(i: i64) -> Value {
    Value::Integer(i)
}

fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

fn real(r: f64) -> Value {
    Value::Real(r)
}

fn blob(b: &[u8]) -> Value {
    Value::Blob(b.to_vec())
}

/// Every row of `table`'s `columns` (the first `key_len` its key), read
/// through the engine's scan in blocks of `block_rows`.
fn read_all(
    db: &MySql,
    table: &str,
    columns: &[&str],
    key_len: usize,
    block_rows: usize,
) -> Result<Vec<Vec<Value>>> {
    let scan = Scan::new(db, table, columns, key_len)?;
    let mut rows = Vec::new();
    db.scan(&scan, None, block_rows, &mut |b| {
        for i in 0..b.rows() {
            rows.push(b.values(i, b.width()));
        }
        Ok(true)
    })?;
    Ok(rows)
}

const COLUMNS: &[&str] = &[
    "id", "ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu", "flag", "b", "d", "m",
    "f", "g", "c", "vc", "tx", "l1", "bn", "vb", "bl", "e", "s", "dt", "dtm", "dtm6", "ts", "tm",
    "tm6", "y", "j", "bt", "b64",
];

const TABLE: &str = "CREATE TABLE t (
    id INT PRIMARY KEY,
    ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED,
    mi MEDIUMINT, miu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED,
    bi BIGINT, biu BIGINT UNSIGNED, flag TINYINT(1), b BOOLEAN,
    d DECIMAL(65,30), m DECIMAL(12,2), f FLOAT, g DOUBLE,
    c CHAR(5), vc VARCHAR(20), tx TEXT, l1 VARCHAR(10) CHARACTER SET latin1,
    bn BINARY(3), vb VARBINARY(10), bl BLOB,
    e ENUM('a','B','c d'), s SET('x','y','z'),
    dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME, tm6 TIME(6),
    y YEAR, j JSON, bt BIT(10), b64 BIT(64)
)";

/// The application's rows: the low edges, the high edges, NULLs, and
/// text and bytes that a careless reader would change. The TIMESTAMP is
/// written at +02:00 and must read in UTC.
const ROWS: &str = "SET time_zone = '+02:00';
INSERT INTO t VALUES
 (1, -128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0, FALSE,
  '-99999999999999999999999999999999999.999999999999999999999999999999', '-9999999999.99',
  -3.4028234663852886e38, -1.7976931348623157e308, '', '', '', '', x'', x'', x'', 'a', '',
  '1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00.000001', '1970-01-01 02:00:01.000',
  '-838:59:59', '-00:00:00.000001', 1901, '{}', b'0', b'0'),
 (2, 127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295,
  9223372036854775807, 9223372036854775807, 1, TRUE,
  '99999999999999999999999999999999999.999999999999999999999999999999', '12.50',
  0.5, 0.1, 'ab  ', 'a  ', 'tab\\there\\nnew ''q'' \\\\ 🦀', 'café', x'0001', x'00FF20',
  x'DEADBEEF', 'B', 'z,x', '9999-12-31', '9999-12-31 23:59:59', '2024-03-15 13:45:00.500000',
  '2024-03-15 15:45:00.250', '838:59:59', '12:30:00.120000', 2155, '{\"a\":  [1, 2.50, \"x\"]}',
  b'1111111111', b'0111111111111111111111111111111111111111111111111111111111111111'),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL),
 (4, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 0, '0.000000000000000000000000000001', '-0.05',
  -0.0, 5e-324, 'c d', 'x', 'a', 'ÿ', x'000000', x'20', x'00', 'c d', 'x,y,z',
  '2024-02-29', '2024-02-29 00:00:00', '2024-02-29 00:00:00.000000', '2038-01-19 05:14:07.999',
  '00:00:00', '100:00:00.5', 0, '[]', b'1000000000', b'1');";

fn expected() -> Vec<Vec<Value>> {
    let row1 = vec![
        int(1),
        int(-128),
        int(0),
        int(-32768),
        int(0),
        int(-8388608),
        int(0),
        int(-2147483648),
        int(0),
        int(i64::MIN),
        int(0),
        int(0),
        int(0),
        text("-99999999999999999999999999999999999.999999999999999999999999999999"),
        text("-9999999999.99"),
        real(f64::from(f32::MIN)),
        real(-1.7976931348623157e308),
        text(""),
        text(""),
        text(""),
        text(""),
        blob(&[0, 0, 0]),
        blob(b""),
        blob(b""),
        text("a"),
        text(""),
        text("1000-01-01"),
        text("1000-01-01 00:00:00"),
        text("1000-01-01 00:00:00.000001"),
        text("1970-01-01 00:00:01+00"),
        text("-838:59:59"),
        text("-00:00:00.000001"),
        int(1901),
        text("{}"),
        int(0),
        int(0),
    ];
    let row2 = vec![
        int(2),
        int(127),
        int(255),
        int(32767),
        int(65535),
        int(8388607),
        int(16777215),
        int(2147483647),
        int(4294967295),
        int(i64::MAX),
        int(i64::MAX),
        int(1),
        int(1),
        text("99999999999999999999999999999999999.999999999999999999999999999999"),
        text("12.50"),
        real(0.5),
        real(0.1),
        text("ab"),
        text("a  "),
        text("tab\there\nnew 'q' \\ 🦀"),
        text("café"),
        blob(&[0, 1, 0]),
        blob(&[0, 0xff, 0x20]),
        blob(&[0xde, 0xad, 0xbe, 0xef]),
        text("B"),
        text("x,z"),
        text("9999-12-31"),
        text("9999-12-31 23:59:59"),
        text("2024-03-15 13:45:00.5"),
        text("2024-03-15 13:45:00.25+00"),
        text("838:59:59"),
        text("12:30:00.12"),
        int(2155),
        text("{\"a\":  [1, 2.50, \"x\"]}"),
        int(1023),
        int(i64::MAX),
    ];
    let mut row3 = vec![Value::Null; COLUMNS.len()];
    row3[0] = int(3);
    let row4 = vec![
        int(4),
        int(0),
        int(1),
        int(0),
        int(1),
        int(0),
        int(1),
        int(0),
        int(1),
        int(0),
        int(1),
        int(2),
        int(0),
        text("0.000000000000000000000000000001"),
        text("-0.05"),
        // MariaDB stores -0 as 0.
        real(0.0),
        real(5e-324),
        text("c d"),
        text("x"),
        text("a"),
        text("ÿ"),
        blob(&[0, 0, 0]),
        blob(b" "),
        blob(&[0]),
        text("c d"),
        text("x,y,z"),
        text("2024-02-29"),
        text("2024-02-29 00:00:00"),
        text("2024-02-29 00:00:00"),
        text("2038-01-19 03:14:07.999+00"),
        text("00:00:00"),
        text("100:00:00.5"),
        int(0),
        text("[]"),
        int(512),
        int(1),
    ];
    vec![row1, row2, row3, row4]
}

#[test]
fn every_type_reads_as_the_value_it_holds() -> Result<()> {
    let Some(db) = TestDb::new("types_read") else {
        return Ok(());
    };
    db.exec(TABLE);
    let app = db.app_user();
    app.exec(ROWS).expect("the application's rows");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let rows = read_all(&engine, "t", COLUMNS, 1, 3)?;
    let want = expected();
    assert_eq!(rows.len(), want.len());
    for (got, want) in rows.iter().zip(&want) {
        for (c, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g, w, "row {}, column {}", want[0], COLUMNS[c]);
            // Same kind and bits: -0.0 and 0.0 are == but not the same value.
            if let (Value::Real(a), Value::Real(b)) = (g, w) {
                assert_eq!(a.to_bits(), b.to_bits(), "column {}", COLUMNS[c]);
            }
        }
    }
    // The text is the server's own text for every column it prints alike.
    assert_eq!(
        db.value("SELECT d FROM t WHERE id = 2"),
        "99999999999999999999999999999999999.999999999999999999999999999999"
    );
    Ok(())
}

#[test]
fn values_written_back_through_the_engine_are_the_values_read() -> Result<()> {
    let Some(db) = TestDb::new("types_write") else {
        return Ok(());
    };
    db.exec(TABLE);
    db.exec("CREATE TABLE t2 LIKE t");
    db.app_user().exec(ROWS).expect("the application's rows");
    let reader = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let rows = read_all(&reader, "t", COLUMNS, 1, 100)?;
    let writer = MySql::open(&db.url, Access::Write, cutover::spec::Side::Target)?;
    let kinds: Vec<Kind> = writer
        .columns("t2")?
        .iter()
        .map(Kind::of)
        .collect::<Result<_>>()?;
    let insert = format!(
        "INSERT INTO t2 VALUES ({})",
        vec!["?"; COLUMNS.len()].join(", ")
    );
    writer.begin()?;
    for row in &rows {
        let params = row
            .iter()
            .zip(&kinds)
            .map(|(v, k)| types::encode(k, v.as_cell()))
            .collect::<Result<Vec<_>, String>>()
            .map_err(anyhow::Error::msg)?;
        writer.execute(&insert, params)?;
    }
    writer.commit()?;
    // The client's own reading of both tables, every column as its bytes.
    let hexed = COLUMNS
        .iter()
        .map(|c| format!("HEX(`{c}`), `{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let original = db.rows(&format!("SELECT {hexed} FROM t ORDER BY id"));
    let copy = db.rows(&format!("SELECT {hexed} FROM t2 ORDER BY id"));
    assert_eq!(original.len(), 4);
    assert_eq!(copy, original);
    assert_eq!(read_all(&reader, "t2", COLUMNS, 1, 7)?, rows);
    Ok(())
}

#[test]
fn the_session_refuses_what_it_would_truncate_and_the_engine_what_it_would_round() -> Result<()> {
    let Some(db) = TestDb::new("types_strict") else {
        return Ok(());
    };
    db.exec("CREATE TABLE w (id INT PRIMARY KEY, vc VARCHAR(3), m DECIMAL(5,2), dt DATETIME)");
    let writer = MySql::open(&db.url, Access::Write, cutover::spec::Side::Target)?;
    let e = writer
        .execute(
            "INSERT INTO w (id, vc) VALUES (?, ?)",
            vec![1.into(), "abcd".into()],
        )
        .expect_err("too long for VARCHAR(3)");
    assert!(format!("{e:#}").contains("Data too long"), "{e:#}");
    let e = writer
        .execute(
            "INSERT INTO w (id, dt) VALUES (?, ?)",
            vec![2.into(), "0000-00-00".into()],
        )
        .expect_err("a zero date");
    assert!(
        format!("{e:#}").contains("Incorrect datetime value"),
        "{e:#}"
    );
    let kinds: Vec<Kind> = writer
        .columns("w")?
        .iter()
        .map(Kind::of)
        .collect::<Result<_>>()?;
    let e = types::encode(&kinds[2], Value::Text("12.505".into()).as_cell()).expect_err("rounds");
    assert!(e.contains("round"), "{e}");
    assert_eq!(db.value("SELECT COUNT(*) FROM w"), "0");
    Ok(())
}

/// The first error of a scan, as the [`BadValue`] it carries.
fn bad_value(db: &MySql, table: &str, columns: &[&str]) -> BadValue {
    let e = read_all(db, table, columns, 1, 10).expect_err("a value that is no value");
    let bad = e
        .chain()
        .find_map(|c| c.downcast_ref::<BadValue>())
        .unwrap_or_else(|| panic!("not a BadValue: {e:#}"))
        .clone();
    let line = format!("{e:#}");
    for part in [&bad.table, &bad.key, &bad.column] {
        assert!(line.contains(part.as_str()), "{part} not in {line}");
    }
    bad
}

#[test]
fn zero_dates_are_reported_naming_table_key_and_column() -> Result<()> {
    let Some(db) = TestDb::new("types_zero") else {
        return Ok(());
    };
    db.exec("CREATE TABLE z (id INT PRIMARY KEY, d DATE, dt DATETIME)");
    // A server outside strict mode stores these; the application's session is.
    db.app_user()
        .exec(
            "SET SESSION sql_mode = '';
             INSERT INTO z VALUES (1, '2024-01-01', '2024-01-01 10:00:00'), (2, '2024-01-02', '0000-00-00 00:00:00');",
        )
        .expect("non-strict rows");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let bad = bad_value(&engine, "z", &["id", "d", "dt"]);
    assert_eq!(
        (bad.table.as_str(), bad.key.as_str(), bad.column.as_str()),
        ("z", "2", "dt")
    );
    assert_eq!(bad.value, "0000-00-00");
    assert!(bad.why.contains("zero date"), "{}", bad.why);
    for (id, d, says) in [
        (3, "2024-00-10", "zero month or day"),
        (4, "2024-05-00", "zero month or day"),
    ] {
        db.exec(&format!(
            "SET SESSION sql_mode = ''; DELETE FROM z; INSERT INTO z VALUES ({id}, '{d}', NULL)"
        ));
        let bad = bad_value(&engine, "z", &["id", "d"]);
        assert_eq!(
            (bad.key.as_str(), bad.column.as_str()),
            (id.to_string().as_str(), "d")
        );
        assert_eq!(bad.value, d);
        assert!(bad.why.contains(says), "{}", bad.why);
    }
    db.exec(
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES'; DELETE FROM z; INSERT INTO z VALUES (5, '2024-02-30', NULL)",
    );
    let bad = bad_value(&engine, "z", &["id", "d"]);
    assert_eq!(bad.value, "2024-02-30");
    assert!(
        bad.why.contains("not a date on the calendar"),
        "{}",
        bad.why
    );
    // A zero date in the key itself is named as the server prints it.
    db.exec("CREATE TABLE zk (d DATE PRIMARY KEY, n INT)");
    db.exec("SET SESSION sql_mode = ''; INSERT INTO zk VALUES ('0000-00-00', 1)");
    let bad = bad_value(&engine, "zk", &["d", "n"]);
    assert_eq!((bad.key.as_str(), bad.column.as_str()), ("0000-00-00", "d"));
    Ok(())
}

#[test]
fn unsigned_integers_past_the_signed_range_are_refused_with_their_value() -> Result<()> {
    let Some(db) = TestDb::new("types_unsigned") else {
        return Ok(());
    };
    db.exec("CREATE TABLE u (id BIGINT UNSIGNED PRIMARY KEY, n BIGINT UNSIGNED, b BIT(64))");
    db.app_user()
        .exec("INSERT INTO u VALUES (1, 9223372036854775807, b'0'), (2, 9223372036854775808, b'0')")
        .expect("rows");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let bad = bad_value(&engine, "u", &["id", "n", "b"]);
    assert_eq!((bad.key.as_str(), bad.column.as_str()), ("2", "n"));
    assert_eq!(bad.value, "9223372036854775808");
    assert!(bad.why.contains("BIGINT UNSIGNED"), "{}", bad.why);
    db.exec("UPDATE u SET n = 0 WHERE id = 2; UPDATE u SET b = b'1000000000000000000000000000000000000000000000000000000000000000' WHERE id = 1");
    let bad = bad_value(&engine, "u", &["id", "n", "b"]);
    assert_eq!((bad.key.as_str(), bad.column.as_str()), ("1", "b"));
    db.exec("UPDATE u SET b = b'0'; UPDATE u SET id = 18446744073709551615 WHERE id = 2");
    let bad = bad_value(&engine, "u", &["id", "n"]);
    assert_eq!(
        (bad.key.as_str(), bad.column.as_str()),
        ("18446744073709551615", "id")
    );
    Ok(())
}
