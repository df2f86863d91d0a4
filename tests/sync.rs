//! `cutover sync`: incremental copy from CSV snapshots and SQLite tables,
//! with the cursor, late rows, drift and quality checks. Each test drives the
//! binary in a temporary folder and checks the target's rows and cursor.

use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::Connection;
use serde_json::Value as Json;

const SPEC: &str = include_str!("../fixtures/customers/spec.toml");
const TARGET: &str = include_str!("../fixtures/customers/target.sql");
const SNAP1: &str = include_str!("../fixtures/customers/snapshot-1.csv");
const SNAP2: &str = include_str!("../fixtures/customers/snapshot-2.csv");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Json {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    fn customers() -> Dir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().to_path_buf();
        std::fs::write(path.join("spec.toml"), SPEC).expect("spec");
        Connection::open(path.join("target.db"))
            .expect("target")
            .execute_batch(TARGET)
            .expect("ddl");
        std::fs::write(path.join("snapshot-1.csv"), SNAP1).expect("snap");
        std::fs::write(path.join("snapshot-2.csv"), SNAP2).expect("snap");
        Dir { _tmp: tmp, path }
    }

    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path.join(name), bytes).expect("write");
    }

    fn sync(&self, args: &[&str]) -> Run {
        let out = Command::new(env!("CARGO_BIN_EXE_cutover"))
            .current_dir(&self.path)
            .args(["sync", "--spec", "spec.toml", "--format", "json"])
            .args(args)
            .output()
            .expect("running cutover");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        }
    }

    fn rows(&self, sql: &str) -> Vec<Vec<rusqlite::types::Value>> {
        let c = Connection::open(self.path.join("target.db")).expect("open");
        let mut st = c.prepare(sql).expect("prepare");
        let n = st.column_count();
        st.query_map([], |r| (0..n).map(|i| r.get(i)).collect())
            .expect("query")
            .map(|r| r.expect("row"))
            .collect()
    }

    fn count(&self) -> i64 {
        match self.rows("SELECT count(*) FROM customers")[0][0] {
            rusqlite::types::Value::Integer(n) => n,
            _ => -1,
        }
    }

    /// Every table of the target, for before/after comparisons.
    fn snapshot(&self) -> Vec<u8> {
        std::fs::read(self.path.join("target.db")).expect("read")
    }

    fn dump(&self) -> Vec<Vec<Vec<rusqlite::types::Value>>> {
        let tables: Vec<String> = self
            .rows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
            .into_iter()
            .map(|r| match &r[0] {
                rusqlite::types::Value::Text(t) => t.clone(),
                _ => String::new(),
            })
            .collect();
        tables
            .iter()
            .map(|t| self.rows(&format!("SELECT * FROM \"{t}\" ORDER BY 1, 2")))
            .collect()
    }
}

fn table(r: &Run) -> Json {
    r.json()["tables"][0].clone()
}

#[test]
fn first_sync_applies_all_rows_with_exact_values() {
    let d = Dir::customers();
    let r = d.sync(&["--snapshot", "snapshot-1.csv"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(table(&r)["changed"], 20);
    assert_eq!(d.count(), 20);
    // Quoted fields with a comma, quotes and a newline arrive exactly.
    assert_eq!(
        d.rows("SELECT name FROM customers WHERE id = 5")[0][0],
        rusqlite::types::Value::Text("Liskov, Barbara \"Babs\"".into())
    );
    assert_eq!(
        d.rows("SELECT name FROM customers WHERE id = 10")[0][0],
        rusqlite::types::Value::Text("Ken\nThompson".into())
    );
    // The id column is an integer column: the CSV text became an integer.
    assert_eq!(
        d.rows("SELECT typeof(id) FROM customers WHERE id = 1")[0][0],
        rusqlite::types::Value::Text("integer".into())
    );
}

#[test]
fn a_second_identical_sync_changes_nothing() {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    let before = d.dump();
    let r = d.sync(&["--snapshot", "snapshot-1.csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(table(&r)["changed"], 0);
    assert_eq!(d.dump(), before, "target and cursor unchanged");
}

#[test]
fn rows_sharing_the_last_watermark_all_arrive_even_one_batch_at_a_time() {
    let d = Dir::customers();
    // Ids 19 and 20 share the last watermark; with batches of one row the
    // cursor stops between them.
    let r = d.sync(&["--snapshot", "snapshot-1.csv", "--batch", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(d.count(), 20);
    // A later snapshot adds a row at that same last watermark, with a higher key.
    let mut snap = SNAP1.to_string();
    snap.push_str("25,2026-01-10T09:00:00Z,Same Mark,US\n");
    d.write("s.csv", snap.as_bytes());
    let r = d.sync(&["--snapshot", "s.csv"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(table(&r)["changed"], 1);
    assert_eq!(d.count(), 21);
}

#[test]
fn a_late_row_is_reported_then_picked_up_with_lookback() {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    let r = d.sync(&["--snapshot", "snapshot-2.csv", "--evolve"]);
    assert_eq!(r.code, 1, "late rows are a finding: {}", r.stdout);
    let t = table(&r);
    assert_eq!(t["late"], 1);
    assert_eq!(t["late_keys"][0], serde_json::json!([23]));
    assert!(
        d.rows("SELECT id FROM customers WHERE id = 23").is_empty(),
        "a late row is not applied silently"
    );
    let r = d.sync(&["--snapshot", "snapshot-2.csv", "--lookback", "30d"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(table(&r)["changed"], 1);
    assert_eq!(
        d.rows("SELECT name FROM customers WHERE id = 23")[0][0],
        rusqlite::types::Value::Text("Anita Borg".into())
    );
    // The lookback did not move the cursor back.
    assert_eq!(
        table(&r)["cursor_after"]["watermark"],
        "2026-01-14T12:00:00Z"
    );
}

#[test]
fn drift_stops_the_run_before_any_write_and_prints_the_spec_lines() {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    let before = d.snapshot();
    let r = d.sync(&["--snapshot", "snapshot-2.csv"]);
    assert_eq!(r.code, 1);
    assert_eq!(table(&r)["drift"]["new"], serde_json::json!(["email"]));
    assert_eq!(
        d.snapshot(),
        before,
        "the target file is byte-for-byte unchanged"
    );
    let text = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .current_dir(&d.path)
        .args([
            "sync",
            "--spec",
            "spec.toml",
            "--snapshot",
            "snapshot-2.csv",
        ])
        .output()
        .expect("run");
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("[[tables.columns]]") && out.contains("source = \"email\""),
        "{out}"
    );
}

#[test]
fn a_missing_mapped_column_is_drift_that_evolve_does_not_paper_over() {
    let d = Dir::customers();
    d.write(
        "s.csv",
        b"id,src_updated,name\n1,2026-01-01T09:00:00Z,Ada\n",
    );
    let r = d.sync(&["--snapshot", "s.csv", "--evolve"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        table(&r)["drift"]["missing"],
        serde_json::json!(["country"])
    );
    assert_eq!(d.count(), 0);
}

#[test]
fn evolve_adds_the_new_column_to_the_target_and_carries_it() {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    d.sync(&["--snapshot", "snapshot-2.csv", "--evolve"]);
    let cols = d.rows("SELECT name FROM pragma_table_info('customers') ORDER BY cid");
    assert_eq!(
        cols.last().expect("columns")[0],
        rusqlite::types::Value::Text("email".into())
    );
    assert_eq!(
        d.rows("SELECT email FROM customers WHERE id = 21")[0][0],
        rusqlite::types::Value::Text("sophie@example.org".into())
    );
    assert_eq!(
        d.rows("SELECT count(*) FROM _cutover_evolved")[0][0],
        rusqlite::types::Value::Integer(1)
    );
}

fn quality_refusal(extra_rows: &str, what: &str) {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    let before = d.dump();
    let mut snap = SNAP1.to_string();
    snap.push_str("30,2026-02-01T09:00:00Z,Fine Row,US\n");
    snap.push_str(extra_rows);
    d.write("bad.csv", snap.as_bytes());
    let r = d.sync(&["--snapshot", "bad.csv"]);
    assert_eq!(r.code, 1, "{what}: {}{}", r.stdout, r.stderr);
    assert_eq!(
        d.dump(),
        before,
        "{what}: target and cursor must be unchanged (the fine row too)"
    );
}

#[test]
fn quality_null_key_fails_the_batch_and_changes_nothing() {
    quality_refusal(",2026-02-01T09:00:00Z,No Key,US\n", "null key");
}

#[test]
fn quality_duplicate_key_fails_the_batch_and_changes_nothing() {
    quality_refusal(
        "31,2026-02-01T09:00:00Z,One,US\n31,2026-02-02T09:00:00Z,Two,US\n",
        "duplicate key",
    );
}

#[test]
fn quality_empty_watermark_fails_the_batch_and_changes_nothing() {
    quality_refusal("32,,Empty Mark,US\n", "empty watermark");
}

#[test]
fn quality_mixed_width_or_non_iso_watermarks_fail_the_batch() {
    quality_refusal("33,2026-2-1T09:00:00Z,Short,US\n", "mixed widths");
    quality_refusal("34,yesterday,Words,US\n", "non-ISO text");
}

#[test]
fn quality_a_row_the_transform_refuses_fails_the_batch() {
    quality_refusal(
        "35,2026-02-01T09:00:00Z,Lower Country,us\n",
        "country fails its pattern",
    );
}

#[test]
fn csv_a_ragged_row_is_refused_naming_the_line() {
    let d = Dir::customers();
    d.write("s.csv", b"id,src_updated,name,country\n1,2026-01-01T09:00:00Z,Ada,GB\n2,2026-01-01T09:00:00Z,Grace\n");
    let r = d.sync(&["--snapshot", "s.csv"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("line 3") && r.stderr.contains("3 fields"),
        "{}",
        r.stderr
    );
    assert_eq!(d.count(), 0);
}

#[test]
fn csv_a_header_with_a_duplicate_or_empty_name_is_refused() {
    let d = Dir::customers();
    d.write("dup.csv", b"id,src_updated,name,name\n");
    let r = d.sync(&["--snapshot", "dup.csv"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("'name' appears twice"), "{}", r.stderr);
    d.write("empty.csv", b"id,,name,country\n");
    let r = d.sync(&["--snapshot", "empty.csv"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("empty name"), "{}", r.stderr);
}

#[test]
fn csv_a_byte_order_mark_is_accepted() {
    let d = Dir::customers();
    assert!(
        SNAP1.as_bytes().starts_with(b"\xef\xbb\xbf"),
        "the fixture starts with a BOM"
    );
    let r = d.sync(&["--snapshot", "snapshot-1.csv"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn csv_invalid_utf8_is_refused_naming_the_line() {
    let d = Dir::customers();
    d.write(
        "s.csv",
        b"id,src_updated,name,country\n1,2026-01-01T09:00:00Z,Ad\xff,GB\n",
    );
    let r = d.sync(&["--snapshot", "s.csv"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("line 2") && r.stderr.contains("UTF-8"),
        "{}",
        r.stderr
    );
    assert_eq!(d.count(), 0);
}

#[test]
fn csv_an_empty_file_is_refused() {
    let d = Dir::customers();
    d.write("s.csv", b"");
    let r = d.sync(&["--snapshot", "s.csv"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("empty"), "{}", r.stderr);
}

#[test]
fn a_missing_snapshot_writes_nothing_and_keeps_the_cursor() {
    let d = Dir::customers();
    assert_eq!(d.sync(&["--snapshot", "snapshot-1.csv"]).code, 0);
    let before = d.snapshot();
    let r = d.sync(&["--snapshot", "nope.csv"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("nope.csv"), "{}", r.stderr);
    assert_eq!(d.snapshot(), before);
}

/// A spec for `items(id, v, price)` → `items(id, v, cents)`, watermark `v`.
fn items_spec(p: &Path) {
    std::fs::write(
        p.join("spec.toml"),
        "[source]\nurl = \"sqlite://s.db\"\n[target]\nurl = \"sqlite://t.db\"\n[[tables]]\nname = \"items\"\nkey = [\"id\"]\nwatermark = \"v\"\n[[tables.columns]]\nsource = \"v\"\n[[tables.columns]]\nsource = \"price\"\ntarget = \"cents\"\ntransform = \"decimal_to_minor\"\nscale = 2\n",
    )
    .expect("spec");
}

/// `cutover sync` in `p`: its exit code and JSON report.
fn sync_in(p: &Path) -> (i32, Json) {
    let o = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .current_dir(p)
        .args(["sync", "--spec", "spec.toml", "--format", "json"])
        .output()
        .expect("run");
    (
        o.status.code().unwrap_or(-1),
        serde_json::from_slice::<Json>(&o.stdout).unwrap_or(Json::Null),
    )
}

#[test]
fn a_sqlite_source_with_an_integer_watermark_syncs_incrementally() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p: &Path = tmp.path();
    items_spec(p);
    let s = Connection::open(p.join("s.db")).expect("s");
    s.execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price TEXT); INSERT INTO items VALUES (1, 10, '1.00'), (2, 11, '2.50');").expect("src");
    Connection::open(p.join("t.db"))
        .expect("t")
        .execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, cents INTEGER);")
        .expect("tgt");
    let run = || sync_in(p);
    let (code, j) = run();
    assert_eq!(
        (code, j["tables"][0]["changed"].clone()),
        (0, Json::from(2))
    );
    // A newer version of item 1, and a new item.
    s.execute_batch("UPDATE items SET v = 12, price = '1.25' WHERE id = 1; INSERT INTO items VALUES (3, 13, '3.00');").expect("update");
    let (code, j) = run();
    assert_eq!(
        (code, j["tables"][0]["changed"].clone()),
        (0, Json::from(2))
    );
    let t = Connection::open(p.join("t.db")).expect("t");
    let cents: i64 = t
        .query_row("SELECT cents FROM items WHERE id = 1", [], |r| r.get(0))
        .expect("row");
    assert_eq!(cents, 125);
    let (code, j) = run();
    assert_eq!(
        (code, j["tables"][0]["changed"].clone()),
        (0, Json::from(0))
    );
}

#[test]
fn drill_customers_runs_every_step_and_its_output_is_pinned() {
    let out = Command::new(env!("CARGO_BIN_EXE_cutover"))
        .args(["drill", "--scenario", "customers"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/customers/drill.golden");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, text.as_bytes()).expect("write golden");
    }
    let expected = std::fs::read_to_string(&golden)
        .expect("fixtures/customers/drill.golden (UPDATE_GOLDEN=1 writes it)");
    assert_eq!(
        text, expected,
        "the customers drill's output changed; UPDATE_GOLDEN=1 rewrites the golden file"
    );
}

#[test]
fn a_column_whose_declared_type_changed_is_drift_before_any_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p: &Path = tmp.path();
    items_spec(p);
    let s = Connection::open(p.join("s.db")).expect("s");
    s.execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price TEXT); INSERT INTO items VALUES (1, 10, '1.00');").expect("src");
    Connection::open(p.join("t.db"))
        .expect("t")
        .execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, cents INTEGER);")
        .expect("tgt");
    let run = || sync_in(p);
    assert_eq!(run().0, 0);
    // The source is rebuilt with price as REAL: the next sync must stop.
    s.execute_batch(
        "DROP TABLE items; CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, price REAL); INSERT INTO items VALUES (1, 10, 1.0), (2, 11, 2.5);",
    )
    .expect("rebuild");
    let before = std::fs::read(p.join("t.db")).expect("read");
    let (code, j) = run();
    assert_eq!(code, 1, "{j:#}");
    assert_eq!(
        j["tables"][0]["drift"]["retyped"],
        serde_json::json!(["price: TEXT → REAL"])
    );
    assert_eq!(
        std::fs::read(p.join("t.db")).expect("read"),
        before,
        "nothing written"
    );
}

#[test]
fn quality_watermarks_in_two_zones_of_one_length_fail_the_batch() {
    // "+02:00" and "-05:00" have one length but sort as text in another order
    // than as times: one zone per table.
    let d = Dir::customers();
    d.write(
        "zones.csv",
        b"id,src_updated,name,country\n1,2026-01-01T09:00:00+02:00,Ada,GB\n2,2026-01-01T08:00:00-05:00,Grace,US\n",
    );
    let r = d.sync(&["--snapshot", "zones.csv"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert_eq!(table(&r)["quality"]["bad_watermarks"], 1);
    assert_eq!(d.count(), 0);
}

#[test]
fn quality_a_duplicate_key_across_a_block_boundary_is_found() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p: &Path = tmp.path();
    items_spec(p);
    // No primary key in the source: id 1024 ends the first block of 1,024
    // rows read and starts the second.
    let s = Connection::open(p.join("s.db")).expect("s");
    s.execute_batch(
        "CREATE TABLE items (id INTEGER, v INTEGER, price TEXT);
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 1500)
         INSERT INTO items SELECT i, i, '1.00' FROM c;
         INSERT INTO items VALUES (1024, 5000, '2.00');",
    )
    .expect("src");
    Connection::open(p.join("t.db"))
        .expect("t")
        .execute_batch("CREATE TABLE items (id INTEGER PRIMARY KEY, v INTEGER, cents INTEGER);")
        .expect("tgt");
    let (code, j) = sync_in(p);
    assert_eq!(code, 1, "{j:#}");
    assert_eq!(j["tables"][0]["quality"]["duplicate_keys"], 1, "{j:#}");
    assert_eq!(j["tables"][0]["quality"]["rows"], 1501);
}
