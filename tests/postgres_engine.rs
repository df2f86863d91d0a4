//! The PostgreSQL engine against a real server: values read exactly (NUMERIC
//! never through a float, every integer width, bytes, NULLs, dates), key
//! order byte-wise whatever the database's collation, large scans in
//! blocks, binary COPY loads, the catalogue and the URL's schema.
//!
//! Each test makes its own database (`cutover_t_…`) and drops it at the end.
//! The server is `CUTOVER_TEST_PG` (a URL to an administrative database),
//! else `postgres://root@127.0.0.1:5432/postgres`, else the same as user
//! `postgres`. Without a server the tests say so and pass, except under CI
//! (`CI` set), where a missing server is a failure.

mod support;

use cutover::db::{CatalogueExt, RowsExt};
use support::postgres::TestDb;

use anyhow::Result;
use cutover::db::postgres::Postgres;
use cutover::db::{
    Access, Catalogue, Connection, Fence, Fixtures, ForeignKey, ForeignKeyViolation, Rows,
    Savepoint, SideEffects, TableSql, Transaction,
};
use cutover::value::{Block, CellRef, Value, key_cmp};

/// Runs `f` in one write transaction of `db`, committed when it returns `Ok`.
fn write<T>(db: &Postgres, f: impl FnOnce() -> Result<T>) -> Result<T> {
    Transaction::begin(db, true)?.run(f)
}

type Db = Postgres;

/// Every row of a scan, with the number of blocks it came in.
fn read_all(db: &Db, sql: &TableSql, block_rows: usize) -> Result<(Vec<Vec<Value>>, usize)> {
    let mut rows = Vec::new();
    let mut blocks = 0;
    db.scan_into(sql, None, block_rows, &mut |b| {
        blocks += 1;
        for r in 0..b.rows() {
            rows.push(b.values(r, b.width()));
        }
        Ok(true)
    })?;
    Ok((rows, blocks))
}

/// Every row after `after`, in order.
fn read_after(db: &Db, sql: &TableSql, after: &[Value]) -> Result<Vec<Vec<Value>>> {
    let mut rows = Vec::new();
    db.scan_into(sql, Some(after), 7, &mut |b| {
        for r in 0..b.rows() {
            rows.push(b.values(r, b.width()));
        }
        Ok(true)
    })?;
    Ok(rows)
}

/// Columns `names` of the row under `key` (`key_names`), read as a scan
/// reads them: the spec's way to read columns it does not carry.
fn get_columns(
    db: &(impl Rows + ?Sized),
    table: &str,
    key_names: &[&str],
    key: &[Value],
    names: &[&str],
) -> Result<Option<Vec<Value>>> {
    let columns: Vec<&str> = key_names.iter().chain(names).copied().collect();
    let sql = db.table_sql(table, &columns, key_names.len(), None);
    Ok(db
        .get_row(&sql, key)?
        .map(|mut r| r.split_off(key_names.len())))
}

fn text(s: &str) -> Value {
    Value::Text(s.to_string())
}

/// Rows as one block, for loading.
fn block_of(rows: &[Vec<Value>]) -> Block {
    let mut b = Block::new(rows[0].len(), rows.len());
    for row in rows {
        for v in row {
            b.push(v.as_cell());
        }
    }
    b
}

/// Each row's key (its first `k` values) strictly after the one before, in
/// cutover's order.
fn assert_key_ordered(rows: &[Vec<Value>], k: usize) {
    for w in rows.windows(2) {
        assert_eq!(
            key_cmp(&w[0][..k], &w[1][..k]),
            std::cmp::Ordering::Less,
            "{:?} then {:?}",
            &w[0][..k],
            &w[1][..k]
        );
    }
}

#[test]
fn numeric_is_read_and_written_exactly() -> Result<()> {
    let Some(t) = TestDb::new("numeric_is_read_and_written_exactly") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE money (id int PRIMARY KEY, amount numeric(16,2), free numeric);
         INSERT INTO money VALUES
           (1, 12.50, 12.50), (2, -0.00, -0.00), (3, 99999999999999.99, 99999999999999.99),
           (4, -99999999999999.99, 123456789012345678901234567890.123456789012345678901234567890),
           (5, 0.01, 0.000000000000000000000000000001), (6, NULL, 'NaN'),
           (7, 1, 'Infinity'), (8, 100, '-Infinity'), (9, 0, 1e30), (10, 0, 10000.00010);
         CREATE VIEW money_text AS SELECT id, amount::text AS a, free::text AS f FROM money;",
    )?;
    let sql = db.table_sql("money", &["id", "amount", "free"], 1, None);
    let (rows, _) = read_all(&db, &sql, 4)?;
    assert_eq!(rows.len(), 10);
    assert_eq!(
        rows[0],
        vec![Value::Integer(1), text("12.50"), text("12.50")]
    );
    assert_eq!(rows[1], vec![Value::Integer(2), text("0.00"), text("0.00")]);
    assert_eq!(rows[2][1], text("99999999999999.99"));
    assert_eq!(rows[3][1], text("-99999999999999.99"));
    assert_eq!(
        rows[3][2],
        text("123456789012345678901234567890.123456789012345678901234567890")
    );
    assert_eq!(rows[4][2], text("0.000000000000000000000000000001"));
    assert_eq!(rows[5], vec![Value::Integer(6), Value::Null, text("NaN")]);
    assert_eq!(rows[6][2], text("Infinity"));
    assert_eq!(rows[7][2], text("-Infinity"));
    assert_eq!(rows[8][2], text("1000000000000000000000000000000"));
    assert_eq!(rows[9][2], text("10000.00010"));
    // The binary decoding gives exactly the server's own text.
    let text_sql = db.table_sql("money_text", &["id", "a", "f"], 1, None);
    let (texts, _) = read_all(&db, &text_sql, 100)?;
    assert_eq!(rows, texts);

    // Written back through COPY, read back the same.
    db.execute_script(
        "CREATE TABLE copy (id int PRIMARY KEY, amount numeric(16,2), free numeric)",
    )?;
    let copy = db.table_sql("copy", &["id", "amount", "free"], 1, None);
    assert_eq!(write(&db, || db.copy_in(&copy, [&block_of(&rows)]))?, 10);
    assert_eq!(read_all(&db, &copy, 100)?.0, rows);

    // A fraction the column's scale would round is refused, and nothing is written.
    let round = block_of(&[vec![Value::Integer(11), text("12.505"), Value::Null]]);
    let err = write(&db, || db.copy_in(&copy, [&round])).unwrap_err();
    assert!(format!("{err:#}").contains("round"), "{err:#}");
    // An integer is an exact numeric; a real is not taken.
    let int = block_of(&[vec![
        Value::Integer(12),
        Value::Integer(7),
        Value::Integer(-3),
    ]]);
    db.copy_in(&copy, [&int])?;
    assert_eq!(
        db.get_row(&copy, &[Value::Integer(12)])?,
        Some(vec![Value::Integer(12), text("7.00"), text("-3")])
    );
    let real = block_of(&[vec![Value::Integer(13), Value::Real(0.1), Value::Null]]);
    assert!(db.copy_in(&copy, [&real]).is_err());
    assert_eq!(db.count_rows(&copy)?, 11);
    Ok(())
}

#[test]
fn integers_of_every_width_and_booleans_keep_their_bounds() -> Result<()> {
    let Some(t) = TestDb::new("integers_of_every_width_and_booleans_keep_their_bounds") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE ints (id bigint PRIMARY KEY, s smallint, i integer, b bigint, f boolean);
         INSERT INTO ints VALUES
           (-9223372036854775808, -32768, -2147483648, -9223372036854775808, false),
           (0, 0, 0, 0, NULL),
           (9223372036854775807, 32767, 2147483647, 9223372036854775807, true);",
    )?;
    let cols = ["id", "s", "i", "b", "f"];
    let sql = db.table_sql("ints", &cols, 1, None);
    let (rows, _) = read_all(&db, &sql, 2)?;
    let row = |v: [i64; 4], f: Value| {
        let mut r: Vec<Value> = v.iter().map(|&i| Value::Integer(i)).collect();
        r.push(f);
        r
    };
    assert_eq!(
        rows,
        vec![
            row([i64::MIN, -32768, -2147483648, i64::MIN], Value::Integer(0)),
            row([0, 0, 0, 0], Value::Null),
            row([i64::MAX, 32767, 2147483647, i64::MAX], Value::Integer(1)),
        ]
    );
    db.execute_script(
        "CREATE TABLE back (id bigint PRIMARY KEY, s smallint, i integer, b bigint, f boolean)",
    )?;
    let back = db.table_sql("back", &cols, 1, None);
    db.copy_in(&back, [&block_of(&rows)])?;
    assert_eq!(read_all(&db, &back, 100)?.0, rows);
    // One past each bound, and a boolean that is not 0 or 1, are refused.
    for (col, v) in [
        (1, 32768),
        (1, -32769),
        (2, 2147483648),
        (2, -2147483649),
        (4, 2),
    ] {
        let mut r = row([1, 0, 0, 0], Value::Integer(0));
        r[col] = Value::Integer(v);
        assert!(db.copy_in(&back, [&block_of(&[r])]).is_err(), "{col} {v}");
    }
    assert_eq!(db.count_rows(&back)?, 3);
    Ok(())
}

#[test]
fn text_keys_are_ordered_by_bytes() -> Result<()> {
    let Some(t) = TestDb::new("text_keys_are_ordered_by_bytes") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    let keys = [
        "z",
        "é",
        "a",
        "B",
        "",
        "Z",
        "ab",
        "a b",
        "ä",
        "\u{1F600}",
        "a\tb",
        "0",
        "~",
    ];
    db.execute_script("CREATE TABLE words (w text PRIMARY KEY, n int)")?;
    let sql = db.table_sql("words", &["w", "n"], 1, None);
    let rows: Vec<Vec<Value>> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| vec![text(k), Value::Integer(i as i64)])
        .collect();
    db.copy_in(&sql, [&block_of(&rows)])?;
    let (read, _) = read_all(&db, &sql, 3)?;
    let mut want: Vec<&str> = keys.to_vec();
    want.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    let got: Vec<Value> = read.iter().map(|r| r[0].clone()).collect();
    assert_eq!(got, want.iter().map(|w| text(w)).collect::<Vec<_>>());
    assert!(want.iter().position(|w| *w == "B") < want.iter().position(|w| *w == "a"));
    assert!(want.iter().position(|w| *w == "z") < want.iter().position(|w| *w == "é"));
    assert_key_ordered(&read, 1);

    // Resuming after a key gives exactly the keys past it.
    let after: Vec<Value> = read_after(&db, &sql, &[text("a")])?
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(
        after,
        got[got.iter().position(|k| *k == text("a")).unwrap() + 1..]
    );

    // A quote in the key is a literal, not SQL.
    db.execute_script("INSERT INTO words VALUES ('it''s', 99)")?;
    let n = read_after(&db, &sql, &[text("it's")])?.len();
    assert_eq!(
        n,
        keys.iter()
            .filter(|k| k.as_bytes() > b"it's".as_slice())
            .count()
    );
    Ok(())
}

#[test]
fn composite_and_typed_keys_follow_cutovers_order() -> Result<()> {
    let Some(t) = TestDb::new("composite_and_typed_keys_follow_cutovers_order") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
         CREATE TABLE k (region char(3), code varchar(10), amount numeric(8,2), day date,
                         feel mood, v int, PRIMARY KEY (region, code));
         INSERT INTO k VALUES ('b', 'x', 10, '2024-01-02', 'sad', 1), ('a', 'y', 9.5, '2023-12-31', 'happy', 2),
                              ('a', 'X', -1, '0044-03-15 BC', 'ok', 3), ('a ', 'Y', 100, '2024-01-01', NULL, 4);
         CREATE TABLE by_amount (amount numeric(8,2) PRIMARY KEY, v int);
         INSERT INTO by_amount SELECT amount, v FROM k;
         CREATE TABLE by_feel (feel mood UNIQUE, v int);
         INSERT INTO by_feel SELECT feel, v FROM k;",
    )?;
    let sql = db.table_sql(
        "k",
        &["region", "code", "amount", "day", "feel", "v"],
        2,
        None,
    );
    let (rows, _) = read_all(&db, &sql, 10)?;
    assert_key_ordered(&rows, 2);
    // char(3) keeps its padding.
    assert_eq!(rows[0][..2], [text("a  "), text("X")]);
    assert_eq!(rows[0][3], text("0044-03-15 BC"));
    // Numeric and enum keys go in the order of their text, as they are read.
    let (rows, _) = read_all(
        &db,
        &db.table_sql("by_amount", &["amount", "v"], 1, None),
        10,
    )?;
    assert_key_ordered(&rows, 1);
    assert_eq!(rows[0][0], text("-1.00"));
    let (rows, _) = read_all(&db, &db.table_sql("by_feel", &["feel", "v"], 1, None), 10)?;
    assert_eq!(rows[0], vec![Value::Null, Value::Integer(4)]);
    assert_key_ordered(&rows, 1);
    assert_eq!(rows[1][0], text("happy"));
    Ok(())
}

#[test]
fn bytes_nulls_floats_and_other_types_are_read_as_stored() -> Result<()> {
    let Some(t) = TestDb::new("bytes_nulls_floats_and_other_types_are_read_as_stored") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE b (k bytea UNIQUE, r real, d double precision, t text, u uuid, j jsonb);
         INSERT INTO b VALUES ('\\x00ff', 0.5, '-0', 'x', '00000000-0000-0000-0000-000000000001', '{\"a\": 1}'),
                              ('\\x', 'Infinity', 1e308, '', NULL, NULL),
                              ('\\x00', NULL, 'NaN', NULL, NULL, NULL),
                              ('\\xff', -1.5, 0.1, 'é', NULL, NULL),
                              (NULL, NULL, NULL, NULL, NULL, NULL);",
    )?;
    let cols = ["k", "r", "d", "t", "u", "j"];
    let sql = db.table_sql("b", &cols, 1, None);
    let (rows, _) = read_all(&db, &sql, 2)?;
    assert_key_ordered(&rows, 1);
    let keys: Vec<Value> = rows.iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        keys,
        vec![
            Value::Null,
            Value::Blob(vec![]),
            Value::Blob(vec![0]),
            Value::Blob(vec![0, 255]),
            Value::Blob(vec![255]),
        ]
    );
    assert_eq!(rows[0], vec![Value::Null; 6]);
    let row = &rows[3];
    assert_eq!(row[1], Value::Real(0.5));
    assert!(matches!(row[2], Value::Real(z) if z == 0.0 && z.is_sign_negative()));
    assert_eq!(row[4], text("00000000-0000-0000-0000-000000000001"));
    assert_eq!(row[5], text("{\"a\": 1}"));
    assert_eq!(rows[1][1], Value::Real(f64::INFINITY));
    assert_eq!(rows[1][2], Value::Real(1e308));
    assert!(matches!(rows[2][2], Value::Real(n) if n.is_nan()));
    assert_eq!(rows[4][2], Value::Real(0.1));
    assert_eq!(rows[4][3], text("é"));

    // A key resumed after a blob, and a keyed read of a blob.
    let after: Vec<Value> = read_after(&db, &sql, &[Value::Blob(vec![0])])?
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(after, keys[3..]);
    assert_eq!(
        db.get_row(&sql, &[Value::Blob(vec![255])])?,
        Some(rows[4].clone())
    );
    assert_eq!(db.get_row(&sql, &[Value::Null])?, None);

    // Bytes and floats load back; a uuid column is refused by the binary load.
    db.execute_script("CREATE TABLE b2 (k bytea UNIQUE, r real, d double precision, t text)")?;
    let b2 = db.table_sql("b2", &cols[..4], 1, None);
    let narrow: Vec<Vec<Value>> = rows.iter().map(|r| r[..4].to_vec()).collect();
    db.copy_in(&b2, [&block_of(&narrow)])?;
    let (back, _) = read_all(&db, &b2, 100)?;
    assert_eq!(back.len(), 5);
    for (a, b) in back.iter().zip(&narrow) {
        for (x, y) in a.iter().zip(b) {
            match (x, y) {
                (Value::Real(p), Value::Real(q)) => assert_eq!(p.to_bits(), q.to_bits()),
                _ => assert_eq!(x, y),
            }
        }
    }
    let err = db.copy_in(&sql, [&block_of(&rows[..1])]).unwrap_err();
    assert!(err.to_string().contains("column 'u'"), "{err:#}");
    // A real that single precision would round is refused.
    let bad = block_of(&[vec![
        Value::Blob(vec![9]),
        Value::Real(0.1),
        Value::Null,
        Value::Null,
    ]]);
    assert!(db.copy_in(&b2, [&bad]).is_err());
    Ok(())
}

#[test]
fn dates_and_timestamps_read_as_the_server_prints_them_in_utc() -> Result<()> {
    let Some(t) = TestDb::new("dates_and_timestamps_read_as_the_server_prints_them_in_utc") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "BEGIN; SET LOCAL TimeZone = 'Europe/Paris';
         CREATE TABLE ts (id int PRIMARY KEY, d date, t timestamp, z timestamptz);
         INSERT INTO ts VALUES
           (1, '2024-02-29', '2024-02-29 13:45:00', '2024-02-29 13:45:00+01'),
           (2, '1999-12-31', '1999-12-31 23:59:59.999999', '1970-01-01 00:00:00.5+00'),
           (3, '0044-03-15 BC', '0044-03-15 12:00:00 BC', '0001-01-01 00:00:00+00 BC'),
           (4, 'infinity', '-infinity', 'infinity'),
           (5, '10000-01-01', '294276-12-31 23:59:59.999999', '4713-11-24 00:00:00+00 BC');
         COMMIT;
         CREATE VIEW ts_text AS SELECT id, d::text, t::text, z::text FROM ts;",
    )?;
    let cols = ["id", "d", "t", "z"];
    let sql = db.table_sql("ts", &cols, 1, None);
    let (rows, _) = read_all(&db, &sql, 100)?;
    assert_eq!(
        rows[0],
        vec![
            Value::Integer(1),
            text("2024-02-29"),
            text("2024-02-29 13:45:00"),
            text("2024-02-29 12:45:00+00")
        ]
    );
    assert_eq!(rows[1][3], text("1970-01-01 00:00:00.5+00"));
    let (texts, _) = read_all(&db, &db.table_sql("ts_text", &cols, 1, None), 100)?;
    assert_eq!(rows, texts);
    db.execute_script("CREATE TABLE ts2 (id int PRIMARY KEY, d date, t timestamp, z timestamptz)")?;
    let ts2 = db.table_sql("ts2", &cols, 1, None);
    db.copy_in(&ts2, [&block_of(&rows)])?;
    assert_eq!(read_all(&db, &ts2, 100)?.0, rows);
    // Another spelling of the same instant is refused rather than reread differently.
    let other = block_of(&[vec![
        Value::Integer(9),
        Value::Null,
        Value::Null,
        text("2024-02-29T12:45:00Z"),
    ]]);
    assert!(db.copy_in(&ts2, [&other]).is_err());
    Ok(())
}

#[test]
fn a_hundred_thousand_rows_stream_in_blocks() -> Result<()> {
    let Some(t) = TestDb::new("a_hundred_thousand_rows_stream_in_blocks") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE big (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2));
         INSERT INTO big SELECT g, 'name ' || g, g / 100.0 FROM generate_series(1, 100000) g;",
    )?;
    let sql = db.table_sql("big", &["id", "name", "amount"], 1, None);
    assert_eq!(db.count_rows(&sql)?, 100_000);
    let mut blocks = 0;
    let mut next = 1i64;
    db.scan_into(&sql, None, 1000, &mut |b| {
        blocks += 1;
        assert_eq!(b.rows(), 1000);
        for r in 0..b.rows() {
            assert_eq!(b.get(r, 0), CellRef::Integer(next));
            next += 1;
        }
        Ok(true)
    })?;
    assert_eq!((blocks, next), (100, 100_001));
    assert_eq!(
        db.get_row(&sql, &[Value::Integer(12345)])?,
        Some(vec![
            Value::Integer(12345),
            text("name 12345"),
            text("123.45")
        ])
    );

    // A scan stopped early leaves the connection usable.
    let mut seen = 0;
    db.scan_into(&sql, None, 500, &mut |b| {
        seen += b.rows();
        Ok(seen < 1500)
    })?;
    assert_eq!(seen, 1500);
    assert_eq!(db.count_rows(&sql)?, 100_000);

    // Resumed after a key, and loaded back through COPY in one transaction.
    db.execute_script(
        "CREATE TABLE big2 (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2))",
    )?;
    let big2 = db.table_sql("big2", &["id", "name", "amount"], 1, None);
    let mut buffered = Vec::new();
    db.scan_into(&sql, Some(&[Value::Integer(50_000)]), 4096, &mut |b| {
        buffered.push(b);
        Ok(true)
    })?;
    assert_eq!(write(&db, || db.copy_in(&big2, &buffered))?, 50_000);
    let mut first = None;
    db.scan_into(&big2, None, 1, &mut |b| {
        first = Some(b.values(0, b.width()));
        Ok(false)
    })?;
    assert_eq!(
        first,
        Some(vec![
            Value::Integer(50_001),
            text("name 50001"),
            text("500.01")
        ])
    );
    Ok(())
}

#[test]
fn a_failed_load_in_a_transaction_leaves_nothing() -> Result<()> {
    let Some(t) = TestDb::new("a_failed_load_in_a_transaction_leaves_nothing") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script("CREATE TABLE p (id int PRIMARY KEY, v text NOT NULL)")?;
    let sql = db.table_sql("p", &["id", "v"], 1, None);
    let first = block_of(&[
        vec![Value::Integer(1), text("a")],
        vec![Value::Integer(2), text("b")],
    ]);
    let dup = block_of(&[
        vec![Value::Integer(3), text("c")],
        vec![Value::Integer(1), text("again")],
    ]);
    let err = write(&db, || {
        db.copy_in(&sql, [&first])?;
        db.copy_in(&sql, [&dup])
    })
    .unwrap_err();
    assert!(format!("{err:#}").contains("duplicate key"), "{err:#}");
    assert_eq!(db.count_rows(&sql)?, 0);
    // NOT NULL is the server's to enforce; still nothing is written.
    let null = block_of(&[vec![Value::Integer(4), Value::Null]]);
    assert!(db.copy_in(&sql, [&null]).is_err());
    assert_eq!(db.count_rows(&sql)?, 0);
    write(&db, || db.copy_in(&sql, [&first]))?;
    assert_eq!(db.count_rows(&sql)?, 2);
    // A reader's transactions cannot write.
    let reader = t.engine(Access::Read, cutover::spec::Side::Target);
    let rsql = reader.table_sql("p", &["id", "v"], 1, None);
    assert!(reader.copy_in(&rsql, [&dup]).is_err());
    Ok(())
}

#[test]
fn a_bulk_insert_that_collides_writes_nothing_and_leaves_the_transaction_usable() -> Result<()> {
    let Some(t) = TestDb::new("bulk_insert_collides") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script("CREATE TABLE p (id int PRIMARY KEY, v text NOT NULL)")?;
    let sql = db.table_sql("p", &["id", "v"], 1, None);
    let first = block_of(&[
        vec![Value::Integer(1), text("a")],
        vec![Value::Integer(2), text("b")],
    ]);
    let dup = block_of(&[
        vec![Value::Integer(3), text("c")],
        vec![Value::Integer(1), text("again")],
    ]);
    let n = write(&db, || {
        assert_eq!(db.bulk_insert(&sql, std::slice::from_ref(&first))?, Some(2));
        // The collision: nothing of the second batch is written, and the
        // same transaction still takes a row.
        assert_eq!(db.bulk_insert(&sql, std::slice::from_ref(&dup))?, None);
        db.insert_row(&sql, &[Value::Integer(3), text("c")])
    })?;
    assert_eq!(n, 1);
    assert_eq!(db.count_rows(&sql)?, 3);
    // Any other refusal is an error, and still nothing of it is written.
    let null = block_of(&[vec![Value::Integer(4), Value::Null]]);
    assert!(write(&db, || db.bulk_insert(&sql, &[null])).is_err());
    assert_eq!(db.count_rows(&sql)?, 3);
    Ok(())
}

#[test]
fn the_catalogue_describes_the_schema() -> Result<()> {
    let Some(t) = TestDb::new("the_catalogue_describes_the_schema") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE parent (a int, b text, note text, PRIMARY KEY (b, a));
         CREATE TABLE child (id int PRIMARY KEY, pa int, pb text, email text, code text,
                             total numeric(10,2) GENERATED ALWAYS AS (id * 2) STORED,
                             FOREIGN KEY (pb, pa) REFERENCES parent (b, a));
         CREATE UNIQUE INDEX ON child (email);
         CREATE UNIQUE INDEX ON child (code) WHERE code IS NOT NULL;
         CREATE TABLE _cutover_load (tbl text);
         CREATE TABLE events (id int, at date) PARTITION BY RANGE (at);
         CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
         CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
         CREATE TRIGGER audit BEFORE INSERT ON child FOR EACH ROW EXECUTE FUNCTION noop();
         CREATE TRIGGER _cutover_journal_insert BEFORE INSERT ON child FOR EACH ROW EXECUTE FUNCTION noop();
         ALTER TABLE child DISABLE TRIGGER audit;",
    )?;
    assert_eq!(db.tables(false)?, ["child", "events", "parent"]);
    let cols: Vec<(String, String, i64)> = db
        .table_columns("parent")?
        .into_iter()
        .map(|c| (c.name, c.decl_type, c.pk))
        .collect();
    assert_eq!(
        cols,
        [
            ("a".to_string(), "integer".to_string(), 2),
            ("b".to_string(), "text".to_string(), 1),
            ("note".to_string(), "text".to_string(), 0),
        ]
    );
    assert_eq!(db.table_columns("child")?[5].decl_type, "numeric(10,2)");
    assert!(db.table_columns("nope")?.is_empty());
    assert_eq!(
        db.generated_columns("child")?,
        [cutover::db::Generated {
            name: "total".to_string(),
            stored: true
        }]
    );
    assert!(db.key_is_unique("parent", &["a", "b"])?);
    assert!(!db.key_is_unique("parent", &["a"])?);
    assert!(db.key_is_unique("child", &["email"])?);
    assert!(!db.key_is_unique("child", &["code"])?);
    assert_eq!(
        db.foreign_keys("child")?,
        [ForeignKey {
            name: Some("child_pb_pa_fkey".to_string()),
            parent: "parent".to_string(),
            columns: vec![
                ("pb".to_string(), Some("b".to_string())),
                ("pa".to_string(), Some("a".to_string()))
            ],
            deferrable: false,
        }]
    );
    assert!(db.has_foreign_keys("child")? && !db.has_foreign_keys("parent")?);
    let triggers: Vec<String> = db
        .side_effects("child")?
        .into_iter()
        .filter(|e| e.kind == cutover::db::SideEffectKind::Trigger)
        .map(|e| e.name)
        .collect();
    assert_eq!(triggers, ["audit"]);
    assert_eq!(
        db.trigger_states("child")?,
        [("audit".to_string(), "D".to_string())]
    );
    // A column the table does not have is named; an empty name reads as NULL.
    let bad = db.table_sql("parent", &["a", "nope"], 1, None);
    let err = db.count_rows(&bad).unwrap_err();
    assert!(err.to_string().contains("no column 'nope'"), "{err:#}");
    let sql = db.table_sql("parent", &["b", "a", ""], 2, None);
    db.execute_script("INSERT INTO parent VALUES (1, 'x', 'n')")?;
    assert_eq!(
        read_all(&db, &sql, 10)?.0,
        [vec![text("x"), Value::Integer(1), Value::Null]]
    );
    db.execute_script("CREATE TABLE parent2 (a int, b text, PRIMARY KEY (b, a))")?;
    let p2 = db.table_sql("parent2", &["b", "a", ""], 2, None);
    db.copy_in(
        &p2,
        [&block_of(&[vec![
            text("y"),
            Value::Integer(2),
            text("ignored"),
        ]])],
    )?;
    assert_eq!(
        db.get_row(&p2, &[text("y"), Value::Integer(2)])?
            .map(|r| r.len()),
        Some(3)
    );
    Ok(())
}

#[test]
fn the_url_schema_chooses_the_tables() -> Result<()> {
    let Some(t) = TestDb::new("the_url_schema_chooses_the_tables") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE SCHEMA \"Sales Q\";
         CREATE TABLE public.t (id int PRIMARY KEY, v text);
         CREATE TABLE \"Sales Q\".t (id int PRIMARY KEY, v text);
         CREATE TABLE \"Sales Q\".\"Odd \"\"name\" (id int PRIMARY KEY);
         INSERT INTO public.t VALUES (1, 'public');
         INSERT INTO \"Sales Q\".t VALUES (1, 'sales'), (2, 'sales');",
    )?;
    let sales = t.engine_in("Sales%20Q", Access::Write)?;
    assert_eq!(sales.schema(), "Sales Q");
    assert_eq!(sales.tables(false)?, ["Odd \"name", "t"]);
    let sql = sales.table_sql("t", &["id", "v"], 1, None);
    assert_eq!(sales.count_rows(&sql)?, 2);
    assert_eq!(
        sales.get_row(&sql, &[Value::Integer(1)])?,
        Some(vec![Value::Integer(1), text("sales")])
    );
    let odd = sales.table_sql("Odd \"name", &["id"], 1, None);
    assert_eq!(sales.count_rows(&odd)?, 0);
    let public = db.table_sql("t", &["id", "v"], 1, None);
    assert_eq!(db.count_rows(&public)?, 1);
    let missing = db.table_sql("Odd \"name", &["id"], 1, None);
    assert!(db.count_rows(&missing).is_err());

    let err = t
        .engine_in("nowhere", Access::Write)
        .err()
        .expect("a missing schema is refused");
    assert!(
        err.to_string().contains("schema 'nowhere' does not exist"),
        "{err:#}"
    );
    let err = Postgres::open(
        "postgres://nobody@127.0.0.1:1/x",
        Access::Read,
        cutover::spec::Side::Source,
    )
    .err()
    .expect("no server on port 1");
    assert!(
        err.to_string().contains("connecting to source database"),
        "{err:#}"
    );
    Ok(())
}

#[test]
fn keyed_reads_match_exactly() -> Result<()> {
    let Some(t) = TestDb::new("keyed_reads_match_exactly") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE m (amount numeric(10,2), who text, v int, PRIMARY KEY (amount, who));
         INSERT INTO m VALUES (12.50, 'a', 1), (12.50, 'A', 2);",
    )?;
    let sql = db.table_sql("m", &["amount", "who", "v"], 2, None);
    assert_eq!(
        db.get_row(&sql, &[text("12.50"), text("A")])?,
        Some(vec![text("12.50"), text("A"), Value::Integer(2)])
    );
    assert_eq!(db.get_row(&sql, &[text("12.5"), text("A")])?, None);
    assert_eq!(db.get_row(&sql, &[Value::Integer(12), text("A")])?, None);
    assert_eq!(db.get_row(&sql, &[text("nonsense"), text("A")])?, None);
    assert!(db.get_row(&sql, &[text("12.50")]).is_err());
    Ok(())
}

#[test]
fn keyed_writes_and_row_by_row_inserts() -> Result<()> {
    let Some(t) = TestDb::new("keyed_writes_and_row_by_row_inserts") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE acct (id int PRIMARY KEY, amount numeric(10,2), tag uuid, note text, seen_at timestamp);
         INSERT INTO acct VALUES (1, 1.00, NULL, 'one', '2024-01-01 00:00:00');",
    )?;
    let cols = ["id", "amount", "tag", "note"];
    let sql = db.table_sql("acct", &cols, 1, None);
    let row = |id: i64, amount: &str, note: &str| {
        vec![
            Value::Integer(id),
            text(amount),
            text("00000000-0000-0000-0000-00000000000a"),
            text(note),
        ]
    };
    assert_eq!(db.insert_row(&sql, &row(2, "2.50", "two"))?, 1);
    assert_eq!(
        db.get_row(&sql, &[Value::Integer(2)])?,
        Some(row(2, "2.50", "two"))
    );
    // The key stays: only the other columns; the key moves: the whole row.
    assert_eq!(
        db.update_row(&sql, &[Value::Integer(2)], &row(2, "3.00", "deux"))?,
        1
    );
    assert_eq!(
        db.update_row(&sql, &[Value::Integer(2)], &row(5, "3.00", "cinq"))?,
        1
    );
    assert_eq!(db.get_row(&sql, &[Value::Integer(2)])?, None);
    assert_eq!(
        db.get_row(&sql, &[Value::Integer(5)])?,
        Some(row(5, "3.00", "cinq"))
    );
    // A rounded amount is refused; a key the column cannot hold changes nothing.
    assert!(
        db.update_row(&sql, &[Value::Integer(5)], &row(5, "3.005", "x"))
            .is_err()
    );
    assert_eq!(db.update_row(&sql, &[text("5")], &row(5, "3.00", "x"))?, 0);
    assert_eq!(db.delete_row(&sql, &[Value::Integer(99_999_999_999)])?, 0);

    // Row by row: a colliding key is skipped and said so.
    let mut ins = db.inserter(&sql)?;
    let b = block_of(&[row(6, "6.00", "six"), row(1, "9.99", "clash")]);
    assert!(ins.insert(&b, 0)?);
    assert!(!ins.insert(&b, 1)?);
    drop(ins);
    assert_eq!(
        db.get_row(&sql, &[Value::Integer(1)])?
            .map(|r| r[3].clone()),
        Some(text("one"))
    );

    // Columns outside the spec, read and written by key.
    let got = get_columns(
        &db,
        "acct",
        &["id"],
        &[Value::Integer(1)],
        &["seen_at", "note"],
    )?;
    assert_eq!(got, Some(vec![text("2024-01-01 00:00:00"), text("one")]));
    // The way the apply engine writes back columns the spec does not carry.
    let kept = db.table_sql("acct", &["id", "seen_at", "tag"], 1, None);
    let n = db.update_row(
        &kept,
        &[Value::Integer(1)],
        &[
            Value::Integer(1),
            text("2025-06-30 12:00:00"),
            text("00000000-0000-0000-0000-0000000000ff"),
        ],
    )?;
    assert_eq!(n, 1);
    assert_eq!(
        get_columns(
            &db,
            "acct",
            &["id"],
            &[Value::Integer(1)],
            &["seen_at", "tag"]
        )?,
        Some(vec![
            text("2025-06-30 12:00:00"),
            text("00000000-0000-0000-0000-0000000000ff")
        ])
    );
    assert_eq!(db.max_integer("acct", "id")?, Some(6));
    assert_eq!(db.max_integer("acct", "note")?, None);
    assert_eq!(db.delete_row(&sql, &[Value::Integer(6)])?, 1);
    assert_eq!(db.clear_table(&sql)?, 2);
    assert_eq!(db.count_rows(&sql)?, 0);
    Ok(())
}

#[test]
fn a_watermark_orders_the_scan_before_the_key() -> Result<()> {
    let Some(t) = TestDb::new("a_watermark_orders_the_scan_before_the_key") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE ev (id int PRIMARY KEY, updated timestamp);
         INSERT INTO ev VALUES (1, '2024-01-03 00:00:00'), (2, '2024-01-01 00:00:00'),
                               (3, NULL), (4, '2024-01-01 00:00:00.5'), (5, '2024-01-01 00:00:00');",
    )?;
    let sql = db.table_sql("ev", &["id", "updated"], 1, Some(1));
    let ids: Vec<Value> = read_all(&db, &sql, 2)?
        .0
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(ids, [3, 2, 5, 4, 1].map(Value::Integer));
    Ok(())
}

#[test]
fn transactions_savepoints_and_the_change_token() -> Result<()> {
    let Some(t) = TestDb::new("transactions_savepoints_and_the_change_token") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script("CREATE TABLE s (id int PRIMARY KEY)")?;
    let sql = db.table_sql("s", &["id"], 1, None);
    let tx = Transaction::begin(&db, true)?;
    db.insert_row(&sql, &[Value::Integer(1)])?;
    let sp = Savepoint::open(&db)?;
    db.insert_row(&sql, &[Value::Integer(2)])?;
    sp.rollback();
    let sp = Savepoint::open(&db)?;
    db.insert_row(&sql, &[Value::Integer(3)])?;
    sp.release()?;
    tx.commit()?;
    let ids: Vec<Value> = read_all(&db, &sql, 10)?
        .0
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(ids, [Value::Integer(1), Value::Integer(3)]);

    // The token follows what could get past a fence: a row written (which a
    // fence's triggers would have refused) leaves it; a trigger made,
    // switched off or a table changed moves it.
    let before = db.change_token()?;
    assert_eq!(db.change_token()?, before);
    let other = t.engine(Access::Write, cutover::spec::Side::Target);
    other.execute_script("INSERT INTO s VALUES (9)")?;
    assert_eq!(db.change_token()?, before);
    other.execute_script(
        "CREATE FUNCTION no() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE 'no'; END $$;
         CREATE TRIGGER no BEFORE INSERT ON s FOR EACH ROW EXECUTE FUNCTION no();",
    )?;
    let with_trigger = db.change_token()?;
    assert_ne!(with_trigger, before);
    other.execute_script("ALTER TABLE s DISABLE TRIGGER no")?;
    assert_ne!(db.change_token()?, with_trigger);

    // The server's own settings, by their own names, as the server has them.
    let facts = db.facts()?;
    let d = facts.durability;
    let names: Vec<&str> = d.settings.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["synchronous_commit", "fsync", "wal_level"], "{d:?}");
    let mut c = t.client();
    for (k, v) in &d.settings {
        let server: String = c.query_one(&format!("SHOW {k}"), &[])?.get(0);
        assert_eq!(*v, server, "{k}");
    }
    assert!(!facts.read_only);
    assert!(db.location().contains(&t.name));
    Ok(())
}

#[test]
fn violations_schema_text_sequences_and_snapshots() -> Result<()> {
    let Some(t) = TestDb::new("violations_schema_text_sequences_and_snapshots") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE artist (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, name text);
         CREATE TABLE album (code text PRIMARY KEY, artist_id int REFERENCES artist (id));
         INSERT INTO artist (name) VALUES ('a'), ('b');
         ALTER TABLE album DISABLE TRIGGER ALL;
         INSERT INTO album VALUES ('x1', 1), ('x2', 7), ('x3', NULL);
         ALTER TABLE album ENABLE TRIGGER ALL;",
    )?;
    assert_eq!(
        db.foreign_key_violations("album", &["code"])?,
        [ForeignKeyViolation {
            child: "album".to_string(),
            key: Some(vec![text("x2")]),
            parent: "artist".to_string(),
            constraint: None,
        }]
    );
    let schema = db.schema_of(&["album"])?;
    let names: Vec<&str> = schema.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "constraint album.album_artist_id_fkey",
            "constraint album.album_pkey",
            "index album_pkey",
            "table album"
        ]
    );
    assert_eq!(
        schema[3].definition,
        "code text NOT NULL, artist_id integer"
    );
    assert_eq!(db.sequence("artist")?, Some(2));
    assert_eq!(db.sequence("album")?, None);
    db.raise_sequence("artist", 100)?;
    db.raise_sequence("artist", 50)?;
    assert_eq!(db.sequence("artist")?, Some(100));
    db.execute_script("INSERT INTO artist (name) VALUES ('c')")?;
    let snap = support::postgres::as_db(db).snapshot()?;
    assert_eq!(snap[0].0, "album");
    assert_eq!(snap[0].1, [r#"["x1",1]"#, r#"["x2",7]"#, r#"["x3",null]"#]);
    assert_eq!(snap[1].1, [r#"[1,"a"]"#, r#"[101,"c"]"#, r#"[2,"b"]"#]);
    Ok(())
}

/// Replay's one-statement write matches only the row it expects as the
/// long way reads it back: a `numeric` by value and scale (`12.5` is not the
/// stored `12.50`), a float by its bits (`-0` is not `0`), text by its bytes
/// (`A` is not `a`, under any collation); a table with a trigger of its own
/// has no such write, since a statement that changes no row may have done
/// something there.
#[test]
fn conditional_writes_match_only_the_row_read_back_exactly() -> Result<()> {
    let Some(t) = TestDb::new("conditional_writes_match_exactly") else {
        return Ok(());
    };
    let db = t.engine(Access::Write, cutover::spec::Side::Target);
    db.execute_script(
        "CREATE TABLE cw (id int PRIMARY KEY, free numeric, f float8, t text COLLATE \"und-x-icu\");
         INSERT INTO cw VALUES (1, 12.50, 0, 'a');
         CREATE TABLE cw_trig (id int PRIMARY KEY, v text);
         CREATE FUNCTION cw_trig_fn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
         CREATE TRIGGER cw_trig BEFORE UPDATE ON cw_trig FOR EACH ROW EXECUTE FUNCTION cw_trig_fn();",
    )?;
    let sql = db.table_sql("cw", &["id", "free", "f", "t"], 1, None);
    let trig = db.table_sql("cw_trig", &["id", "v"], 1, None);
    assert!(
        db.conditional_writer(&trig).is_none(),
        "a table with a trigger"
    );
    let mut w = db
        .conditional_writer(&sql)
        .expect("a writer for a plain table");
    let row =
        |free: &str, f: f64, t: &str| vec![Value::Integer(1), text(free), Value::Real(f), text(t)];
    let changed = row("13.00", 1.0, "b");
    write(&db, || {
        for (expected, why) in [
            (row("12.5", 0.0, "a"), "another scale"),
            (row("12.50", -0.0, "a"), "another float's bits"),
            (row("12.50", 0.0, "A"), "other bytes"),
        ] {
            assert!(!w.write_if(Some(&expected), Some(&changed))?, "{why}");
            assert!(!w.write_if(Some(&expected), None)?, "{why}");
        }
        assert!(w.write_if(Some(&row("12.50", 0.0, "a")), Some(&changed))?);
        Ok(())
    })?;
    let (rows, _) = read_all(&db, &sql, 10)?;
    assert_eq!(rows, vec![changed]);
    Ok(())
}
