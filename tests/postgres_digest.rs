//! The gate's digest mode against a real server: two PostgreSQL databases
//! compared by digests computed inside each, with every kind of difference,
//! give exactly the streaming gate's reconciliation (counts, differences in
//! order, totals, verdict) while reading fewer rows.
//!
//! The harness is tests/postgres_engine.rs's: each test makes its own
//! databases and drops them; without a server the tests say so and pass,
//! except under CI (`CI` set).

mod support;

use support::postgres::TestDb;

use anyhow::Result;
use cutover::db::postgres::Postgres;
use cutover::db::{Access, Db, Fixtures};
use cutover::digest::{self, Mode};
use cutover::reconcile::Reconciliation;

/// A spec over the two databases (its URLs are never opened: the tests
/// open the engines themselves).
fn spec(dir: &std::path::Path, tables: &str) -> Result<cutover::spec::Spec> {
    let path = dir.join("spec.toml");
    std::fs::write(
        &path,
        format!(
            "[source]\nurl = \"sqlite://s.db\"\n\n[target]\nurl = \"sqlite://t.db\"\n\n{tables}"
        ),
    )?;
    cutover::spec::load(&path)
}

const ORDERS: &str = r#"
[[tables]]
name = "orders"
key = ["id"]
currency = "currency"

[[tables.columns]]
source = "dollars"
target = "cents"
transform = "decimal_to_minor"
scale = 2

[[tables.columns]]
source = "status"
transform = "map"
map = { A = "active", C = "closed" }

[[tables.columns]]
source = "currency"

[[tables.columns]]
source = "at"

[[tables.columns]]
source = "ratio"

[[tables.columns]]
source = "note"

[[tables.columns]]
source = "price"

[[tables.columns]]
target = "origin"
value = "legacy"

[[tables.columns]]
source = "fee"
target = "fee_cents"
transform = "decimal_to_minor"
scale = 2

[[tables]]
name = "items"
key = ["region", "code"]

[[tables.columns]]
source = "qty"
min = 0

[[tables.columns]]
source = "day"

[[tables]]
name = "refs"
key = ["id"]

[[tables.columns]]
source = "ref"

[[tables]]
name = "codes"
key = ["code"]

[[tables.columns]]
source = "label"

[[tables]]
name = "days"
key = ["day"]

[[tables.columns]]
source = "n"
"#;

/// Orders, items and refs with every kind of difference.
fn fixtures(source: &Postgres, target: &Postgres) -> Result<()> {
    source.execute_script(
        "CREATE TABLE orders (id int PRIMARY KEY, dollars text, status text, currency text,
                              at timestamp(3), ratio double precision, note text, price real,
                              fee numeric);
         INSERT INTO orders
           SELECT g, (g / 100) || '.' || lpad((g % 100)::text, 2, '0'),
                  CASE WHEN g % 3 = 0 THEN 'C' ELSE 'A' END,
                  CASE WHEN g % 2 = 0 THEN 'EUR' ELSE 'USD' END,
                  timestamp '2024-01-01 00:00:00' + g * interval '1.5 second',
                  g / 8.0, CASE WHEN g % 7 = 0 THEN NULL ELSE 'n' || g END, g / 4.0,
                  round(g / 100.0, 2)
           FROM generate_series(1, 6000) g;
         UPDATE orders SET dollars = NULL WHERE id = 10;
         UPDATE orders SET dollars = '-0.00' WHERE id = 4000;
         UPDATE orders SET dollars = '012.50' WHERE id = 4100;
         UPDATE orders SET dollars = '12.345' WHERE id = 3000;
         UPDATE orders SET dollars = '1e3' WHERE id = 3001;
         UPDATE orders SET dollars = '92233720368547758.08' WHERE id = 3002;
         UPDATE orders SET status = 'Z' WHERE id = 3500;
         UPDATE orders SET status = NULL WHERE id = 3600;
         UPDATE orders SET ratio = '-0' WHERE id = 1200;
         UPDATE orders SET ratio = 'NaN' WHERE id = 1201;
         UPDATE orders SET at = '2024-05-05 10:00:00.123' WHERE id = 1300;
         UPDATE orders SET note = '' WHERE id = 1400;
         UPDATE orders SET fee = 12.5 WHERE id = 4200;
         UPDATE orders SET fee = 12.345 WHERE id = 4201;
         UPDATE orders SET fee = 'NaN' WHERE id = 4202;
         UPDATE orders SET fee = 1e30 WHERE id = 4203;
         UPDATE orders SET fee = -0.50 WHERE id = 4204;
         UPDATE orders SET fee = NULL WHERE id = 4205;
         CREATE TABLE items (region text COLLATE \"en-x-icu\", code text COLLATE \"en-x-icu\",
                             qty int, day date, PRIMARY KEY (region, code));
         INSERT INTO items
           SELECT r, c || g, g, date '2024-01-01' + g
           FROM unnest(ARRAY['B', 'a', 'b', 'Z', 'é', 'e']) r,
                unnest(ARRAY['x', 'Y', 'y']) c, generate_series(1, 200) g;
         UPDATE items SET qty = -1 WHERE region = 'b' AND code = 'y7';
         CREATE TABLE refs (id int PRIMARY KEY, ref text);
         INSERT INTO refs VALUES (1, '1250'), (2, NULL), (3, 'x');
         CREATE TABLE codes (code text COLLATE \"en-x-icu\" PRIMARY KEY, label text);
         INSERT INTO codes
           SELECT c || g, 'l' || g
           FROM unnest(ARRAY['a', 'B', 'b', 'é', 'E', 'z']) c, generate_series(1, 500) g;
         CREATE TABLE days (day date PRIMARY KEY, n int);
         INSERT INTO days SELECT date '2000-01-01' + g, g FROM generate_series(1, 4000) g;",
    )?;
    target.execute_script(
        "CREATE TABLE orders (id bigint PRIMARY KEY, cents bigint, status text, currency text,
                              at timestamp(6), ratio double precision, note text, price double precision,
                              origin text, fee_cents bigint);
         INSERT INTO orders
           SELECT g, g, CASE WHEN g % 3 = 0 THEN 'closed' ELSE 'active' END,
                  CASE WHEN g % 2 = 0 THEN 'EUR' ELSE 'USD' END,
                  timestamp '2024-01-01 00:00:00' + g * interval '1.5 second',
                  g / 8.0, CASE WHEN g % 7 = 0 THEN NULL ELSE 'n' || g END, g / 4.0, 'legacy', g
           FROM generate_series(1, 6000) g WHERE g <> 100;
         INSERT INTO orders VALUES (20000, 5, 'active', 'EUR', NULL, NULL, NULL, NULL, 'legacy', 1);
         UPDATE orders SET fee_cents = 1250 WHERE id = 4200;
         UPDATE orders SET fee_cents = -50 WHERE id = 4204;
         UPDATE orders SET fee_cents = NULL WHERE id = 4205;
         UPDATE orders SET fee_cents = 4000 WHERE id = 4000;
         UPDATE orders SET cents = NULL WHERE id = 10;
         UPDATE orders SET cents = 0 WHERE id = 4000;
         UPDATE orders SET cents = 1250 WHERE id = 4100;
         UPDATE orders SET cents = cents + 1 WHERE id = 2500;
         UPDATE orders SET status = NULL WHERE id = 3600;
         UPDATE orders SET ratio = 0 WHERE id = 1200;
         UPDATE orders SET ratio = 'NaN' WHERE id = 1201;
         UPDATE orders SET at = '2024-05-05 10:00:00.1234' WHERE id = 1300;
         UPDATE orders SET note = NULL WHERE id = 1400;
         UPDATE orders SET origin = 'new' WHERE id = 5000;
         UPDATE orders SET price = 0.1 WHERE id = 5100;
         CREATE TABLE items (region text, code text, qty int, day date,
                             PRIMARY KEY (region, code));
         INSERT INTO items
           SELECT r, c || g, g, date '2024-01-01' + g
           FROM unnest(ARRAY['B', 'a', 'b', 'Z', 'é', 'e']) r,
                unnest(ARRAY['x', 'Y', 'y']) c, generate_series(1, 200) g;
         UPDATE items SET qty = -1 WHERE region = 'b' AND code = 'y7';
         UPDATE items SET qty = 8 WHERE region = 'é' AND code = 'Y9';
         DELETE FROM items WHERE region = 'B' AND code = 'x1';
         INSERT INTO items VALUES ('a', 'Z', 1, NULL);
         CREATE TABLE refs (id int PRIMARY KEY, ref bigint);
         INSERT INTO refs VALUES (1, 1250), (2, NULL), (3, NULL);
         CREATE TABLE codes (code text PRIMARY KEY, label text);
         INSERT INTO codes
           SELECT c || g, 'l' || g
           FROM unnest(ARRAY['a', 'B', 'b', 'é', 'E', 'z']) c, generate_series(1, 500) g;
         UPDATE codes SET label = 'changed' WHERE code = 'é17';
         DELETE FROM codes WHERE code = 'B300';
         INSERT INTO codes VALUES ('Z0', 'extra');
         CREATE TABLE days (day date PRIMARY KEY, n int);
         INSERT INTO days SELECT date '2000-01-01' + g, g FROM generate_series(1, 4000) g;
         UPDATE days SET n = 0 WHERE day = date '2004-05-06';",
    )?;
    Ok(())
}

/// The parts of two reconciliations that must be equal, as JSON (the
/// differences with their display forms).
fn comparable(rec: &Reconciliation) -> serde_json::Value {
    serde_json::json!({
        "tables": rec.tables,
        "diffs": rec.diffs,
        "shown": rec.diffs.iter().map(|d| d.shown.clone()).collect::<Vec<_>>(),
        "diffs_found": rec.diffs_found,
        "clean": rec.clean(),
    })
}

/// Two databases with the fixtures, or `None` without a server.
fn pair(test: &str) -> Option<(TestDb, TestDb)> {
    Some((TestDb::new(test)?, TestDb::new(test)?))
}

#[test]
fn digest_mode_equals_stream_mode_and_reads_fewer_rows() -> Result<()> {
    let Some((s, t)) = pair("digest_mode_equals_stream_mode_and_reads_fewer_rows") else {
        return Ok(());
    };
    fixtures(
        &s.engine(Access::Write, cutover::spec::Side::Source),
        &t.engine(Access::Write, cutover::spec::Side::Target),
    )?;
    let dir = tempfile::tempdir()?;
    let spec = spec(dir.path(), ORDERS)?;
    let mut src = s.engine(Access::Read, cutover::spec::Side::Source);
    let mut tgt = t.engine(Access::Read, cutover::spec::Side::Target);
    for max_diffs in [0, 3, 10_000] {
        let stream = digest::reconcile_engines(&spec, &mut src, &mut tgt, max_diffs, Mode::Stream)?;
        let dig = digest::reconcile_engines(&spec, &mut src, &mut tgt, max_diffs, Mode::Digest)?;
        assert_eq!(
            comparable(&dig),
            comparable(&stream),
            "max_diffs {max_diffs}"
        );
        assert!(stream.modes.is_empty());
        assert_eq!(dig.modes.len(), 5);
        // The big tables are digested; `refs`, most of whose few key ranges
        // differ, is streamed whole, which reads less than splitting them.
        let modes: Vec<&str> = dig.modes.iter().map(|m| m.mode.as_str()).collect();
        assert_eq!(
            modes,
            ["digest", "digest", "stream", "digest", "digest"],
            "{:?}",
            dig.modes
        );
        assert!(
            dig.modes[2]
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("first key ranges differ")),
            "{:?}",
            dig.modes[2]
        );
        // Fewer rows read: the orders' 12,000 rows are mostly digested.
        let orders = &dig.modes[0];
        let all = stream.tables[0].source_rows + stream.tables[0].target_rows;
        assert!(
            orders.rows_streamed * 4 < all,
            "{} rows streamed of {all}",
            orders.rows_streamed
        );
        assert!(orders.segments > orders.segments_streamed);
    }
    let rec = digest::reconcile_engines(&spec, &mut src, &mut tgt, 10_000, Mode::Digest)?;
    let o = &rec.tables[0];
    // Every kind of difference is there.
    assert_eq!((o.missing, o.extra), (1, 1), "{o:?}");
    // 2500 (cents), 1300 (timestamp precision), 1400 ('' vs NULL), 5000
    // (constant), 5100 (real).
    assert_eq!(o.changed, 5, "{o:?}");
    // 3000, 3001, 3002 (decimal text), 3500 (map code), 4201, 4202, 4203
    // (NUMERIC: a third decimal, NaN, beyond 64 bits).
    assert_eq!(o.invalid, 7, "{o:?}");
    // '-0.00', '012.50', and the NUMERIC 12.5 of scale 1.
    assert_eq!(o.non_canonical, 3, "{o:?}");
    // -0 is 0 and NaN is NaN for a real, as the merge compares them.
    assert!(
        !rec.diffs
            .iter()
            .any(|d| d.key == serde_json::json!(1200) || d.key == serde_json::json!(1201))
    );
    assert_eq!(o.totals.len(), 4, "{:?}", o.totals);
    let items = &rec.tables[1];
    assert_eq!(
        (items.missing, items.extra, items.changed, items.invalid),
        (1, 1, 1, 1),
        "{items:?}"
    );
    let refs = &rec.tables[2];
    // The text '1250' is not the integer 1250.
    assert_eq!((refs.changed, refs.matched), (2, 1), "{refs:?}");
    // A text key cut by `width_bucket` in byte order, whatever collation
    // the source's column declares; a date key by its text.
    let codes = &rec.tables[3];
    assert_eq!(
        (codes.changed, codes.missing, codes.extra, codes.matched),
        (1, 1, 1, 2998),
        "{codes:?}"
    );
    let days = &rec.tables[4];
    assert_eq!((days.changed, days.matched), (1, 3999), "{days:?}");
    assert!(!rec.clean());
    Ok(())
}

#[test]
fn equal_databases_pass_by_digests_alone() -> Result<()> {
    let Some((s, t)) = pair("equal_databases_pass_by_digests_alone") else {
        return Ok(());
    };
    let schema = "CREATE TABLE orders (id int PRIMARY KEY, dollars numeric(12,2), status text);
         INSERT INTO orders SELECT g, g / 100.0, CASE WHEN g % 2 = 0 THEN 'A' ELSE 'C' END
         FROM generate_series(1, 20000) g;";
    s.engine(Access::Write, cutover::spec::Side::Source)
        .execute_script(schema)?;
    t.engine(Access::Write, cutover::spec::Side::Target)
        .execute_script(
            "CREATE TABLE orders (id int PRIMARY KEY, cents bigint, status text);
         INSERT INTO orders SELECT g, g, CASE WHEN g % 2 = 0 THEN 'active' ELSE 'closed' END
         FROM generate_series(1, 20000) g;",
        )?;
    let dir = tempfile::tempdir()?;
    let spec = spec(
        dir.path(),
        r#"[[tables]]
name = "orders"
key = ["id"]

[[tables.columns]]
source = "dollars"
target = "cents"
transform = "decimal_to_minor"
scale = 2

[[tables.columns]]
source = "status"
transform = "map"
map = { A = "active", C = "closed" }
"#,
    )?;
    let mut src = s.engine(Access::Read, cutover::spec::Side::Source);
    let mut tgt = t.engine(Access::Read, cutover::spec::Side::Target);
    let stream = digest::reconcile_engines(&spec, &mut src, &mut tgt, 20, Mode::Stream)?;
    let dig = digest::reconcile_engines(&spec, &mut src, &mut tgt, 20, Mode::Auto)?;
    assert_eq!(comparable(&dig), comparable(&stream));
    assert!(dig.clean());
    assert_eq!(dig.tables[0].matched, 20000);
    assert_eq!(
        dig.tables[0].totals[0].source,
        (1..=20000i128).sum::<i128>()
    );
    assert_eq!(dig.modes[0].rows_streamed, 0, "{:?}", dig.modes);
    assert_eq!(dig.modes[0].segments_streamed, 0);
    Ok(())
}

#[test]
fn tables_the_databases_cannot_digest_are_streamed_and_say_why() -> Result<()> {
    let Some((s, t)) = pair("tables_the_databases_cannot_digest_are_streamed_and_say_why") else {
        return Ok(());
    };
    s.engine(Access::Write, cutover::spec::Side::Source)
        .execute_script(
            "CREATE TABLE codes (id int PRIMARY KEY, code text);
         INSERT INTO codes VALUES (1, 'EUR'), (2, 'usd');
         CREATE TABLE loose (id int, v text);
         INSERT INTO loose VALUES (1, 'a'), (2, 'b');
         CREATE TABLE reals (r double precision PRIMARY KEY, v text);
         INSERT INTO reals VALUES ('-0', 'a');",
        )?;
    t.engine(Access::Write, cutover::spec::Side::Target)
        .execute_script(
            "CREATE TABLE codes (id int PRIMARY KEY, code text);
         INSERT INTO codes VALUES (1, 'EUR'), (2, 'usd');
         CREATE TABLE loose (id int PRIMARY KEY, v text);
         INSERT INTO loose VALUES (1, 'a'), (2, 'c');
         CREATE TABLE reals (r double precision PRIMARY KEY, v text);
         INSERT INTO reals VALUES ('0', 'a');",
        )?;
    let dir = tempfile::tempdir()?;
    let spec = spec(
        dir.path(),
        r#"[[tables]]
name = "codes"
key = ["id"]

[[tables.columns]]
source = "code"
pattern = "^[A-Z]{3}$"

[[tables]]
name = "loose"
key = ["id"]

[[tables.columns]]
source = "v"

[[tables]]
name = "reals"
key = ["r"]

[[tables.columns]]
source = "v"
"#,
    )?;
    let mut src = s.engine(Access::Read, cutover::spec::Side::Source);
    let mut tgt = t.engine(Access::Read, cutover::spec::Side::Target);
    let stream = digest::reconcile_engines(&spec, &mut src, &mut tgt, 20, Mode::Stream)?;
    let dig = digest::reconcile_engines(&spec, &mut src, &mut tgt, 20, Mode::Digest)?;
    assert_eq!(comparable(&dig), comparable(&stream));
    let why: Vec<(&str, &str)> = dig
        .modes
        .iter()
        .map(|m| (m.mode.as_str(), m.reason.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(why[0].0, "stream");
    assert!(why[0].1.contains("pattern"), "{why:?}");
    assert_eq!(why[1].0, "stream");
    assert!(why[1].1.contains("NOT NULL and unique"), "{why:?}");
    assert_eq!(why[2].0, "stream");
    assert!(why[2].1.contains("double precision"), "{why:?}");
    // -0 and 0 are two keys to the merge: missing and extra.
    assert_eq!((dig.tables[2].missing, dig.tables[2].extra), (1, 1));
    let text = cutover::commands::gate::render_modes(&dig);
    assert!(text.contains("'codes' streamed whole"), "{text}");
    Ok(())
}

#[test]
fn digest_mode_is_refused_where_a_database_cannot_digest() -> Result<()> {
    let dir = tempfile::tempdir()?;
    for f in ["s.db", "t.db"] {
        Db::create(
            &dir.path().join(f),
            "CREATE TABLE refs (id INTEGER PRIMARY KEY, ref TEXT); INSERT INTO refs VALUES (1, 'a');",
        )?;
    }
    let spec = spec(
        dir.path(),
        "[[tables]]\nname = \"refs\"\nkey = [\"id\"]\n\n[[tables.columns]]\nsource = \"ref\"\n",
    )?;
    let mut s = Db::open(&spec.source, Access::Read, cutover::spec::Side::Source)?;
    let mut t = Db::open(&spec.target, Access::Read, cutover::spec::Side::Target)?;
    assert!(s.rows().digests().is_none());
    let err = digest::reconcile(&spec, &mut s, &mut t, 20, Mode::Digest).unwrap_err();
    assert!(err.to_string().contains("--mode digest"), "{err:#}");
    let auto = digest::reconcile(&spec, &mut s, &mut t, 20, Mode::Auto)?;
    assert!(auto.clean() && auto.modes.is_empty());
    Ok(())
}
