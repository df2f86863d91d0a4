//! `cutover sync` with watermarks in each engine's own types, at volume:
//! PostgreSQL `timestamptz` (a touch trigger), `timestamp(p)` and `date`,
//! MySQL `DATETIME(6)` (`ON UPDATE`) and `TIMESTAMP`, SQLite ISO-8601 text.
//! Each scenario loads, lets the application write through the source
//! engine's own client, syncs, and compares the target row for row with
//! the source as that engine's client reads it (times spelt by the engine's
//! own formatting function), then passes the gate. The first sync starts
//! from the cursor `load` left. `tests/sync.rs` holds the cursor's rules,
//! late rows, drift and quality checks on the CSV and integer fixtures.
//!
//! The large runs copy 20,000 rows; `CUTOVER_FULL=1` makes it 100,000.

mod support;

use support::{Dir, Layout, Rows, Spec, Table, each_layout};

/// Rows the large scenarios start with: a multiple of 500, so that the
/// application's 500 updates are every `rows() / 500`-th row.
fn rows() -> i64 {
    if std::env::var_os("CUTOVER_FULL").is_some_and(|v| v == "1") {
        100_000
    } else {
        20_000
    }
}

/// `1 ..= n` as `n` in SQL every engine takes: a cross join of digits
/// (`n` at most 100,000).
fn numbers(n: i64) -> String {
    let digit = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    format!(
        "(SELECT 1 + a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS n \
         FROM {digit} a, {digit} b, {digit} c, {digit} e, {digit} f \
         WHERE a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d < {n}) ns"
    )
}

fn customers_spec() -> Spec {
    Spec::new().table(
        Table::new("customers")
            .key(["id"])
            .watermark("updated_at")
            .copy("updated_at")
            .copy("email")
            .copy("name"),
    )
}

/// The customers of `db` with their times (of a time type: `typed`)
/// spelt by the engine itself, in key order: the oracle, read without
/// cutover.
fn customers(d: &Dir, db: &str, typed: bool) -> Rows {
    let at = match d.engine_of(db) {
        "postgres" if typed => "to_char(updated_at, 'YYYY-MM-DD HH24:MI:SS.US')",
        "mysql" if typed => "DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f')",
        _ => "updated_at",
    };
    d.query(
        db,
        &format!("SELECT id, email, name, {at} FROM customers ORDER BY id"),
    )
}

/// The application's writes: 500 customers renamed, with a new email (the
/// engine's touch moves their watermark), and 200 new ones.
fn application_writes(d: &Dir) {
    let step = rows() / 500;
    let n = rows();
    let (concat, new_email) = match d.engine_of("source.db") {
        "mysql" => (
            "CONCAT(name, ' (moved)')",
            "CONCAT('moved', id, '@shop.example')",
        ),
        _ => ("name || ' (moved)'", "'moved' || id || '@shop.example'"),
    };
    let new = match d.engine_of("source.db") {
        "mysql" => "CONCAT('new', n, '@shop.example'), CONCAT('New ', n)",
        _ => "'new' || n || '@shop.example', 'New ' || n",
    };
    d.client(
        "source.db",
        &format!(
            "UPDATE customers SET name = {concat}, email = {new_email} WHERE id % {step} = 7;
             INSERT INTO customers (id, email, name) SELECT {n} + n, {new} FROM {};",
            numbers(200)
        ),
    );
}

/// Load, the application's writes, sync, then the target equals the
/// source row for row and the gate passes; the first sync carried only
/// the application's rows, from the cursor the load left. `typed`: the
/// watermark is of a time type on both sides.
fn load_write_sync_gate(d: &Dir, typed: bool) {
    let customers = |db: &str| customers(d, db, typed);
    let n = rows();
    let started = std::time::Instant::now();
    d.run(&["load"], 0);
    // The gate passes a loaded table with a watermark.
    d.run(&["gate"], 0);
    let loaded = customers("source.db");
    assert_eq!(customers("target.db"), loaded);
    application_writes(d);
    let j = d.json(&["sync"], 0);
    let t = &j["tables"][0];
    assert!(!t["cursor_before"].is_null(), "load left no cursor: {j:#}");
    assert_eq!(t["candidates"], 700, "{j:#}");
    assert_eq!(t["changed"], 700, "{j:#}");
    let source = customers("source.db");
    assert_eq!(source.len() as i64, n + 200);
    assert_eq!(customers("target.db"), source);
    let moved = source
        .iter()
        .filter(|r| matches!(&r[2], rusqlite::types::Value::Text(t) if t.ends_with(" (moved)")))
        .count();
    assert_eq!(moved, 500);
    d.run(&["gate"], 0);
    // Nothing past the cursor now.
    let j = d.json(&["sync"], 0);
    assert_eq!(j["tables"][0]["changed"], 0, "{j:#}");
    eprintln!("{n} rows: {:?}", started.elapsed());
}

/// PostgreSQL → PostgreSQL: `updated_at timestamptz` moved by a touch
/// trigger, an identity key, `email UNIQUE`. Times a second and a half
/// apart, so that the server prints some with a fraction and some without.
// See: 86add15 (sync from a PostgreSQL source past a few thousand rows).
fn timestamptz_with_a_touch_trigger(layout: Layout) {
    let d = Dir::on(layout, "wm-timestamptz");
    d.spec(&customers_spec());
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE customers (
               id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
               email text NOT NULL UNIQUE,
               name text NOT NULL,
               updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN NEW.updated_at := clock_timestamp(); RETURN NEW; END $$;
             CREATE TRIGGER customers_touch BEFORE UPDATE ON customers
               FOR EACH ROW EXECUTE FUNCTION touch();
             INSERT INTO customers (id, email, name, updated_at)
               SELECT g, 'c' || g || '@shop.example', 'Customer ' || g,
                      timestamptz '2024-01-01 00:00:00+02' + g * interval '1.5 seconds'
               FROM generate_series(1, {}) g;",
            rows()
        ),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE customers (
           id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
           email text NOT NULL UNIQUE,
           name text NOT NULL,
           updated_at timestamptz NOT NULL);",
    );
    load_write_sync_gate(&d, true);
}
each_layout!(timestamptz_with_a_touch_trigger: [pg_to_pg]);

/// MySQL → PostgreSQL: `DATETIME(6) ON UPDATE CURRENT_TIMESTAMP(6)` into a
/// PostgreSQL `timestamp(6)`.
fn datetime6_on_update(layout: Layout) {
    let d = Dir::on(layout, "wm-datetime6");
    d.spec(&customers_spec());
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE customers (
               id BIGINT AUTO_INCREMENT PRIMARY KEY,
               email VARCHAR(191) NOT NULL UNIQUE,
               name VARCHAR(191) NOT NULL,
               updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
                 ON UPDATE CURRENT_TIMESTAMP(6));
             INSERT INTO customers (id, email, name, updated_at)
               SELECT n, CONCAT('c', n, '@shop.example'), CONCAT('Customer ', n),
                      TIMESTAMPADD(MICROSECOND, n * 1500000, '2024-01-01 00:00:00')
               FROM {};",
            numbers(rows())
        ),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE customers (
           id bigint PRIMARY KEY,
           email text NOT NULL UNIQUE,
           name text NOT NULL,
           updated_at timestamp(6) NOT NULL);",
    );
    load_write_sync_gate(&d, true);
}
each_layout!(datetime6_on_update: [my_to_pg]);

/// SQLite → PostgreSQL: ISO-8601 text in UTC, moved by a trigger.
fn iso_text_with_a_touch_trigger(layout: Layout) {
    let d = Dir::on(layout, "wm-iso-text");
    d.spec(&customers_spec());
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE customers (
               id INTEGER PRIMARY KEY,
               email TEXT NOT NULL UNIQUE,
               name TEXT NOT NULL,
               updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')));
             CREATE TRIGGER customers_touch AFTER UPDATE OF email, name ON customers
             BEGIN
               UPDATE customers SET updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
               WHERE id = NEW.id;
             END;
             INSERT INTO customers (id, email, name, updated_at)
               SELECT n, 'c' || n || '@shop.example', 'Customer ' || n,
                      strftime('%Y-%m-%dT%H:%M:%fZ', '2024-01-01', '+' || (n * 1.5) || ' seconds')
               FROM {};",
            numbers(rows())
        ),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE customers (
           id bigint PRIMARY KEY,
           email text NOT NULL UNIQUE,
           name text NOT NULL,
           updated_at text NOT NULL);",
    );
    load_write_sync_gate(&d, false);
}
each_layout!(iso_text_with_a_touch_trigger: [sqlite_to_pg]);

/// `id, what` and the watermark `col` of `table` in `db`, the time spelt
/// by the engine itself to the microsecond, in key order.
fn spelt(d: &Dir, db: &str, table: &str, col: &str) -> Rows {
    let at = match d.engine_of(db) {
        "postgres" => format!("to_char({col}, 'YYYY-MM-DD HH24:MI:SS.US')"),
        "mysql" => format!("DATE_FORMAT({col}, '%Y-%m-%d %H:%i:%s.%f')"),
        _ => col.to_string(),
    };
    d.query(
        db,
        &format!("SELECT id, what, {at} FROM {table} ORDER BY id"),
    )
}

/// PostgreSQL `timestamp(3)` (fractions of a quarter second, printed as
/// `.25`, `.5`, `.75` or none) and `date` watermarks. The first sync after
/// the load starts at the load's cursor: a row the application moved just
/// behind it is a late row (exit 1) until `--lookback` reaches it.
fn timestamp_p_and_date(layout: Layout) {
    let d = Dir::on(layout, "wm-timestamp-date");
    d.spec(
        &Spec::new()
            .table(
                Table::new("events")
                    .key(["id"])
                    .watermark("at")
                    .copy("at")
                    .copy("what"),
            )
            .table(
                Table::new("days")
                    .key(["id"])
                    .watermark("day")
                    .copy("day")
                    .copy("what"),
            ),
    );
    let tables = "CREATE TABLE events (id integer PRIMARY KEY, at timestamp(3) NOT NULL, what text NOT NULL);
                  CREATE TABLE days (id integer PRIMARY KEY, day date NOT NULL, what text NOT NULL);";
    d.create_db(
        "source.db",
        &format!(
            "{tables}
             INSERT INTO events SELECT g, timestamp '2024-01-01 00:00:00' + g * interval '0.25 seconds', 'e' || g
               FROM generate_series(1, 1000) g;
             INSERT INTO days SELECT g, date '2024-01-01' + g / 10, 'd' || g FROM generate_series(1, 1000) g;"
        ),
    );
    d.create_db("target.db", tables);
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    // The largest loaded: event 1000 at 00:04:10, day 100 after 2024-01-01.
    // Each table's row 5 moved just behind it, as by a transaction that
    // began before the load read and committed after.
    d.client(
        "source.db",
        "UPDATE events SET what = 'late', at = timestamp '2024-01-01 00:04:09.5' WHERE id = 5;
         UPDATE days SET what = 'late', day = date '2024-04-09' WHERE id = 5;",
    );
    let before = d.image("target.db");
    let j = d.json(&["sync"], 1);
    for t in 0..2 {
        let t = &j["tables"][t];
        assert!(!t["cursor_before"].is_null(), "{j:#}");
        assert_eq!(t["late"], 1, "{j:#}");
        assert_eq!(t["late_keys"], serde_json::json!([[5]]), "{j:#}");
    }
    d.assert_db_unchanged("target.db", &before, &"a sync that found only late rows");
    let j = d.json(&["sync", "--table", "events", "--lookback", "1s"], 0);
    assert_eq!(j["tables"][0]["changed"], 1, "{j:#}");
    let j = d.json(&["sync", "--table", "days", "--lookback", "2d"], 0);
    assert_eq!(j["tables"][0]["changed"], 1, "{j:#}");
    d.client(
        "source.db",
        "UPDATE events SET what = 'moved', at = timestamp '2030-01-01 00:00:00.1' + id * interval '1 millisecond'
           WHERE id % 100 = 3;
         INSERT INTO events VALUES (1001, timestamp '2030-06-01 00:00:00', 'new');
         UPDATE days SET what = 'moved', day = date '2030-01-01' WHERE id % 100 = 3;
         INSERT INTO days VALUES (1001, date '2030-06-01', 'new');",
    );
    let j = d.json(&["sync"], 0);
    for t in 0..2 {
        assert_eq!(j["tables"][t]["changed"], 11, "{j:#}");
    }
    assert_eq!(
        spelt(&d, "target.db", "events", "at"),
        spelt(&d, "source.db", "events", "at")
    );
    assert_eq!(
        spelt(&d, "target.db", "days", "day"),
        spelt(&d, "source.db", "days", "day")
    );
    d.run(&["gate"], 0);
}
each_layout!(timestamp_p_and_date: [pg_to_pg]);

/// MySQL `TIMESTAMP(3) ON UPDATE` (an instant, read in UTC) into a
/// PostgreSQL `timestamptz(3)`.
fn mysql_timestamp(layout: Layout) {
    let d = Dir::on(layout, "wm-mysql-timestamp");
    d.spec(
        &Spec::new().table(
            Table::new("events")
                .key(["id"])
                .watermark("at")
                .copy("at")
                .copy("what"),
        ),
    );
    d.create_db(
        "source.db",
        &format!(
            "CREATE TABLE events (id BIGINT PRIMARY KEY, what VARCHAR(40) NOT NULL,
               at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3));
             INSERT INTO events (id, what, at)
               SELECT n, CONCAT('e', n), TIMESTAMPADD(MICROSECOND, n * 250000, '2024-01-01 00:00:00')
               FROM {};",
            numbers(1000)
        ),
    );
    d.create_db(
        "target.db",
        "CREATE TABLE events (id bigint PRIMARY KEY, what text NOT NULL, at timestamptz(3) NOT NULL);",
    );
    d.run(&["load"], 0);
    d.run(&["gate"], 0);
    d.client(
        "source.db",
        &format!(
            "UPDATE events SET what = CONCAT(what, ' moved') WHERE id % 100 = 3;
             INSERT INTO events (id, what) SELECT 1000 + n, CONCAT('new ', n) FROM {};",
            numbers(5)
        ),
    );
    let j = d.json(&["sync"], 0);
    assert!(!j["tables"][0]["cursor_before"].is_null(), "{j:#}");
    assert_eq!(j["tables"][0]["changed"], 15, "{j:#}");
    assert_eq!(
        spelt(&d, "target.db", "events", "at"),
        spelt(&d, "source.db", "events", "at")
    );
    d.run(&["gate"], 0);
}
each_layout!(mysql_timestamp: [my_to_pg]);
