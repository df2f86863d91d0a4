//! Key-ordered scans of MySQL/MariaDB tables: keys come back in cutover's
//! order (text by its bytes, with no padding; numbers by value), computed
//! here by sorting the keys the test wrote, whatever the column's
//! collation; a scan resumed after any key returns exactly the keys after
//! it; a scan stopped early stops; counts count.

mod support;

use anyhow::Result;
use cutover::db::Access;
use cutover::db::mysql::MySql;
use cutover::db::mysql::scan::Scan;
use cutover::value::{Value, key_cmp};
use support::mysql::TestDb;

/// The keys of `table` (its first `key_len` columns of `columns`), in the
/// order the scan gives, resumed after `after` when given.
fn keys(
    db: &MySql,
    table: &str,
    columns: &[&str],
    key_len: usize,
    after: Option<&[Value]>,
) -> Result<Vec<Vec<Value>>> {
    let scan = Scan::new(db, table, columns, key_len)?;
    let mut out = Vec::new();
    db.scan(&scan, after, 3, &mut |b| {
        for i in 0..b.rows() {
            out.push(b.values(i, key_len));
        }
        Ok(true)
    })?;
    Ok(out)
}

/// The scan returns `want` in order, and resumed after each key, exactly
/// the keys after it.
fn assert_order(db: &MySql, table: &str, columns: &[&str], key_len: usize, want: &[Vec<Value>]) {
    let got = keys(db, table, columns, key_len, None).expect("a scan");
    assert_eq!(got, want, "the order of {table}");
    for (i, k) in want.iter().enumerate() {
        let rest = keys(db, table, columns, key_len, Some(k)).expect("a resumed scan");
        assert_eq!(rest, &want[i + 1..], "{table} resumed after {k:?}");
    }
}

fn text(t: &str) -> Value {
    Value::Text(t.to_string())
}

/// Text keys a collation would put in another order, or call equal.
const HARD: &[&str] = &["b", "b\t", "b ", "B", "🦀", "", "a", "é", "e", "b  ", "Z"];

fn sql_text(t: &str) -> String {
    format!("'{}'", t.replace('\\', "\\\\").replace('\'', "''"))
}

#[test]
fn text_keys_come_in_byte_order_whatever_the_collation() -> Result<()> {
    let Some(db) = TestDb::new("scan_text") else {
        return Ok(());
    };
    // A NO PAD binary key is ordered by the column itself; the others, whose
    // collations fold case or pad, by their bytes (a second key column keeps
    // values the collation calls equal apart).
    db.exec(
        "CREATE TABLE exact (k VARCHAR(10) COLLATE utf8mb4_nopad_bin PRIMARY KEY, v INT);
         CREATE TABLE folded (k VARCHAR(10) COLLATE utf8mb4_general_ci, n INT, PRIMARY KEY (k, n));
         CREATE TABLE padded (k VARCHAR(10) COLLATE utf8mb4_bin, n INT, PRIMARY KEY (k, n));
         CREATE TABLE latin (k VARCHAR(10) CHARACTER SET latin1, n INT, PRIMARY KEY (k, n));",
    );
    let app = db.app_user();
    let rows = HARD
        .iter()
        .enumerate()
        .map(|(n, k)| format!("({}, {n})", sql_text(k)))
        .collect::<Vec<_>>()
        .join(", ");
    for t in ["exact", "folded", "padded"] {
        app.exec(&format!("INSERT INTO {t} VALUES {rows}"))
            .expect("the keys");
    }
    let latin: Vec<&str> = HARD.iter().copied().filter(|k| *k != "🦀").collect();
    app.exec(&format!(
        "INSERT INTO latin VALUES {}",
        latin
            .iter()
            .enumerate()
            .map(|(n, k)| format!("({}, {n})", sql_text(k)))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .expect("latin1 keys");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;

    let mut want: Vec<&str> = HARD.to_vec();
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(&want[..4], &["", "B", "Z", "a"], "the oracle sorts bytes");
    let exact: Vec<Vec<Value>> = want.iter().map(|k| vec![text(k)]).collect();
    assert_order(&engine, "exact", &["k", "v"], 1, &exact);
    let b = want.iter().position(|k| *k == "b").expect("b");
    assert_eq!(&want[b..b + 4], &["b", "b\t", "b ", "b  "]);

    let mut pairs: Vec<(&str, i64)> = HARD
        .iter()
        .enumerate()
        .map(|(n, k)| (*k, n as i64))
        .collect();
    pairs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()).then(a.1.cmp(&b.1)));
    let composite: Vec<Vec<Value>> = pairs
        .iter()
        .map(|(k, n)| vec![text(k), Value::Integer(*n)])
        .collect();
    for t in ["folded", "padded"] {
        assert_order(&engine, t, &["k", "n"], 2, &composite);
    }
    // latin1 text is read, and ordered, as its utf8mb4 bytes.
    let mut latin_pairs: Vec<(&str, i64)> = latin
        .iter()
        .enumerate()
        .map(|(n, k)| (*k, n as i64))
        .collect();
    latin_pairs.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()).then(a.1.cmp(&b.1)));
    let latin_keys: Vec<Vec<Value>> = latin_pairs
        .iter()
        .map(|(k, n)| vec![text(k), Value::Integer(*n)])
        .collect();
    assert_order(&engine, "latin", &["k", "n"], 2, &latin_keys);
    Ok(())
}

#[test]
fn bytes_numbers_and_text_made_from_numbers_keep_cutovers_order() -> Result<()> {
    let Some(db) = TestDb::new("scan_kinds") else {
        return Ok(());
    };
    db.exec(
        "CREATE TABLE vb (k VARBINARY(8) PRIMARY KEY);
         CREATE TABLE dec_k (k DECIMAL(6,2) PRIMARY KEY);
         CREATE TABLE tm (k TIME(1) PRIMARY KEY);
         CREATE TABLE en (k ENUM('z','a','m') PRIMARY KEY);
         CREATE TABLE dt (k DATETIME(3) PRIMARY KEY);
         CREATE TABLE neg (k BIGINT PRIMARY KEY, f DOUBLE);",
    );
    let app = db.app_user();
    app.exec(
        "INSERT INTO vb VALUES (x'62'), (x'6209'), (x'6220'), (x''), (x'00'), (x'FF'), (x'620000');
         INSERT INTO dec_k VALUES (-1.00), (10.00), (2.00), (0.50), (-10.25), (0.00);
         INSERT INTO tm VALUES ('-01:00:00'), ('100:00:00'), ('23:00:00'), ('00:00:00.5'), ('00:00:00'), ('-00:00:00.1');
         INSERT INTO en VALUES ('z'), ('a'), ('m');
         INSERT INTO dt VALUES ('2024-01-01 00:00:00'), ('2024-01-01 00:00:00.5'), ('2023-12-31 23:59:59.999'), ('1000-01-01 00:00:00.25');
         INSERT INTO neg VALUES (-9223372036854775808, 0), (-1, 0), (0, 0), (9223372036854775807, 0);",
    )
    .expect("the keys");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let blob = |b: &[u8]| vec![Value::Blob(b.to_vec())];
    let mut bytes: Vec<Vec<u8>> = vec![
        vec![0x62],
        vec![0x62, 0x09],
        vec![0x62, 0x20],
        vec![],
        vec![0],
        vec![0xff],
        vec![0x62, 0, 0],
    ];
    bytes.sort();
    let want: Vec<Vec<Value>> = bytes.iter().map(|b| blob(b)).collect();
    assert_order(&engine, "vb", &["k"], 1, &want);
    // A DECIMAL, a TIME and an ENUM are read as text, and ordered as it.
    for (table, values) in [
        (
            "dec_k",
            vec!["-1.00", "10.00", "2.00", "0.50", "-10.25", "0.00"],
        ),
        (
            "tm",
            vec![
                "-01:00:00",
                "100:00:00",
                "23:00:00",
                "00:00:00.5",
                "00:00:00",
                "-00:00:00.1",
            ],
        ),
        ("en", vec!["z", "a", "m"]),
        (
            "dt",
            vec![
                "2024-01-01 00:00:00",
                "2024-01-01 00:00:00.5",
                "2023-12-31 23:59:59.999",
                "1000-01-01 00:00:00.25",
            ],
        ),
    ] {
        let mut sorted = values.clone();
        sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        let want: Vec<Vec<Value>> = sorted.iter().map(|t| vec![text(t)]).collect();
        assert_order(&engine, table, &["k"], 1, &want);
    }
    let mut ints = [i64::MIN, -1, 0, i64::MAX];
    ints.sort();
    let want: Vec<Vec<Value>> = ints.iter().map(|i| vec![Value::Integer(*i)]).collect();
    assert_order(&engine, "neg", &["k", "f"], 1, &want);
    for w in want.windows(2) {
        assert!(key_cmp(&w[0], &w[1]).is_lt());
    }
    Ok(())
}

#[test]
fn a_long_scan_streams_in_blocks_stops_when_asked_and_resumes() -> Result<()> {
    let Some(db) = TestDb::new("scan_blocks") else {
        return Ok(());
    };
    db.exec(
        "CREATE TABLE big (id INT PRIMARY KEY, g INT NOT NULL, s VARCHAR(20) NOT NULL, KEY (g));
         INSERT INTO big SELECT seq, seq % 7, CONCAT('row ', seq) FROM seq_1_to_20000;",
    );
    assert_eq!(db.value("SELECT COUNT(*) FROM big"), "20000");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    assert_eq!(engine.count("big")?, 20000);
    let scan = Scan::new(&engine, "big", &["id", "g", "s"], 1)?;
    // Stopped after three blocks of 7: 21 rows, then nothing more.
    let (mut blocks, mut seen) = (0, Vec::new());
    engine.scan(&scan, None, 7, &mut |b| {
        assert_eq!(b.rows(), 7);
        blocks += 1;
        for i in 0..b.rows() {
            seen.push(b.values(i, 3));
        }
        Ok(blocks < 3)
    })?;
    assert_eq!(seen.len(), 21);
    assert_eq!(
        seen[20],
        vec![Value::Integer(21), Value::Integer(0), text("row 21")]
    );
    // The connection is free again, and the rest comes from where it stopped.
    let mut rest = 0i64;
    let mut last = 0i64;
    engine.scan(&scan, Some(&seen[20][..1]), 1000, &mut |b| {
        for i in 0..b.rows() {
            let Value::Integer(id) = b.get(i, 0).to_value() else {
                panic!("an integer key");
            };
            assert_eq!(id, last.max(21) + 1, "keys in order, none skipped");
            last = id;
            rest += 1;
        }
        Ok(true)
    })?;
    assert_eq!(rest, 20000 - 21);
    // A composite key resumes inside a run of equal first values.
    let scan = Scan::new(&engine, "big", &["g", "id"], 2)?;
    let after = [Value::Integer(3), Value::Integer(10)];
    let mut first = None;
    let mut n = 0;
    engine.scan(&scan, Some(&after), 500, &mut |b| {
        if first.is_none() {
            first = Some(b.values(0, 2));
        }
        n += b.rows();
        Ok(true)
    })?;
    assert_eq!(first, Some(vec![Value::Integer(3), Value::Integer(17)]));
    let expected: usize = db
        .value("SELECT COUNT(*) FROM big WHERE g > 3 OR (g = 3 AND id > 10)")
        .parse()?;
    assert_eq!(n, expected);
    Ok(())
}

#[test]
fn a_scan_names_what_it_cannot_read_and_a_key_it_cannot_resume_after() -> Result<()> {
    let Some(db) = TestDb::new("scan_refusals") else {
        return Ok(());
    };
    db.exec("CREATE TABLE p (id INT PRIMARY KEY, j JSON, g POINT)");
    let engine = MySql::open(&db.url, Access::Read, cutover::spec::Side::Source)?;
    let e = format!(
        "{:#}",
        Scan::new(&engine, "p", &["id", "nope"], 1).expect_err("no column")
    );
    assert!(
        e.contains("table 'p'") && e.contains("'nope'") && e.contains("id, j, g"),
        "{e}"
    );
    let e = format!(
        "{:#}",
        Scan::new(&engine, "p", &["id", "g"], 1).expect_err("spatial")
    );
    assert!(e.contains("column 'g'") && e.contains("point"), "{e}");
    let e = format!(
        "{:#}",
        Scan::new(&engine, "gone", &["id"], 1).expect_err("no table")
    );
    assert!(e.contains("table 'gone' does not exist"), "{e}");
    let scan = Scan::new(&engine, "p", &["id", "j"], 1)?;
    let e = engine
        .scan(&scan, Some(&[text("1")]), 10, &mut |_| Ok(true))
        .expect_err("a text key for an INT column");
    assert!(format!("{e:#}").contains("column 'id'"), "{e:#}");
    let e = engine
        .scan(&scan, Some(&[Value::Null]), 10, &mut |_| Ok(true))
        .expect_err("a NULL key");
    assert!(format!("{e:#}").contains("NULL"), "{e:#}");
    Ok(())
}
