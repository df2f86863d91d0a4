//! A large value rolls back in memory bounded by about twice its size
//! (docs/journal.md, "Large values"): the gate, `fence on`
//! and replay of a table holding one large BLOB, overwritten and joined by a
//! second one after the switch, each peak at most 2.5 times the value above
//! what the same commands take with small values — and the rollback is exact.
//!
//! Each command's peak is its resident high-water mark as the kernel keeps
//! it (`ru_maxrss` of the one child a Python process waits for). The value
//! is 64 MiB; `CUTOVER_LARGE_MIB` sets another size and measures every step
//! of the runbook (450 for the figures in BENCHMARKS.md, in a release build:
//! the journal's row holds both images of an update, and two values of 500
//! MB pass SQLite's limit on a row).

mod support;

use sha2::Digest;

use support::{Dir, python};

const MIB: u64 = 1 << 20;

/// Runs the binary as the only child of a Python process; prints its exit
/// code and peak resident memory in KiB.
const PEAK: &str = r#"
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
if r.returncode != 0:
    print(r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"))
"#;

/// `cutover ARGS --spec spec.toml` in `d`, which must exit 0: its peak
/// resident memory in bytes.
fn peak(d: &Dir, args: &[&str]) -> u64 {
    let mut argv = vec![env!("CARGO_BIN_EXE_cutover")];
    argv.extend(args);
    argv.extend(["--spec", "spec.toml"]);
    let (code, out) = python(d.path(), PEAK, &argv);
    let mut words = out.split_whitespace();
    let (exit, kib) = (
        words.next(),
        words.next().and_then(|k| k.parse::<u64>().ok()),
    );
    assert!(
        code == 0 && exit == Some("0") && kib.is_some(),
        "cutover {} failed:\n{out}",
        args.join(" ")
    );
    kib.unwrap_or(0) * 1024
}

const SPEC: &str = r#"
[source]
url = "sqlite://source.db"

[target]
url = "sqlite://target.db"

[[tables]]
name = "files"
key = ["id"]

[[tables.columns]]
source = "name"

[[tables.columns]]
source = "data"
"#;

const TABLE: &str = "CREATE TABLE files (id INTEGER PRIMARY KEY, name TEXT, data BLOB);";

/// The commands whose peak is bounded, and those only measured (with
/// `CUTOVER_LARGE_MIB`, for BENCHMARKS.md).
const BOUNDED: [&str; 3] = ["gate", "fence on", "replay"];

/// The runbook on a table holding one value of `size` bytes (and four
/// small rows): load, gate, journal install; the application overwrites the
/// value with another of the same size, adds a row holding a third, and
/// renames a small one; fence on, replay. Each command's peak, in bytes,
/// in order (`every`: the runbook's other steps too), once the source holds
/// exactly what the target holds.
fn rollback(size: u64, every: bool) -> Vec<(&'static str, u64)> {
    let d = Dir::with(
        &format!("large-{size}"),
        SPEC,
        &format!(
            "{TABLE}
             INSERT INTO files VALUES (1, 'big', randomblob({size}));
             INSERT INTO files VALUES (2, 'f2', x'02'), (3, 'f3', x'03'),
               (4, 'f4', x'04'), (5, 'f5', x'05');"
        ),
        TABLE,
    );
    let mut peaks = Vec::new();
    let mut step = |what: &'static str, args: &[&str], measured: bool| match measured {
        true => peaks.push((what, peak(&d, args))),
        false => {
            d.run(args, 0);
        }
    };
    step("check", &["check"], every);
    step("load", &["load"], every);
    step("gate", &["gate"], true);
    step("journal install", &["journal", "install"], every);
    // The application's own SQLite, in another process.
    d.client(
        "target.db",
        &format!(
            "UPDATE files SET data = randomblob({size}) WHERE id = 1;
             INSERT INTO files VALUES (6, 'new', randomblob({size}));
             UPDATE files SET name = 'renamed' WHERE id = 2;"
        ),
    );
    step("fence on", &["fence", "on"], true);
    if every {
        step("replay --dry-run", &["replay", "--dry-run"], true);
    }
    step("replay", &["replay"], true);
    let q = "SELECT id, name, typeof(data), length(data), hex(substr(data, 1, 16)), hex(substr(data, -16)) FROM files ORDER BY id";
    let (source, target) = (d.query("source.db", q), d.query("target.db", q));
    assert_eq!(source, target, "the source holds what the target holds");
    assert_eq!(source.len(), 6);
    // Every byte, not only the ends: the target attached to the source.
    let conn = d.conn("source.db");
    conn.execute(
        "ATTACH ?1 AS t",
        [d.join("target.db").to_string_lossy().into_owned()],
    )
    .expect("attaching the target");
    let differing: i64 = conn
        .query_row(
            "SELECT count(*) FROM main.files s FULL JOIN t.files x USING (id)
             WHERE s.data IS NOT x.data OR s.name IS NOT x.name",
            [],
            |r| r.get(0),
        )
        .expect("comparing every byte");
    assert_eq!(differing, 0, "every byte of every value came back");
    peaks
}

#[test]
fn a_large_blob_rolls_back_in_about_twice_its_size() {
    let set = std::env::var("CUTOVER_LARGE_MIB")
        .ok()
        .and_then(|m| m.parse::<u64>().ok());
    let size = set.unwrap_or(64) * MIB;
    // What the same commands take with values of a few bytes: the
    // program, SQLite's caches, the buffers of every reader.
    let base = rollback(16, set.is_some());
    let large = rollback(size, set.is_some());
    let mut over = Vec::new();
    for ((what, small), (_, big)) in base.iter().zip(large.iter()) {
        // A few MiB more than the small run: allocator arenas and SQLite's
        // page cache filled by the large rows.
        let bound = small + size * 5 / 2 + 16 * MIB;
        let bounded = BOUNDED.contains(what);
        eprintln!(
            "{what:<17} {:>5} MiB with small values, {:>5} MiB with {} MiB values: {:.2}x the value, {:.2}x above the small run{}",
            small / MIB,
            big / MIB,
            size / MIB,
            *big as f64 / size as f64,
            big.saturating_sub(*small) as f64 / size as f64,
            match bounded {
                true => format!(" (bound {} MiB)", bound / MIB),
                false => String::new(),
            }
        );
        if bounded && *big > bound {
            over.push(format!(
                "{what} peaked at {} MiB with a {} MiB value (bound {} MiB)",
                big / MIB,
                size / MIB,
                bound / MIB
            ));
        }
    }
    assert!(over.is_empty(), "{}", over.join("; "));
}

/// SHA-256 of rows as docs/journal.md gives the fence's digests: each value
/// a class byte, then an integer's or a real's 8 bytes (little-endian), or a
/// text's or blob's length (8 bytes) and bytes.
fn hash_rows(h: &mut sha2::Sha256, rows: &mut rusqlite::Rows<'_>, width: usize) {
    use rusqlite::types::ValueRef;
    while let Some(r) = rows.next().expect("reading a row") {
        for i in 0..width {
            match r.get_ref(i).expect("reading a value") {
                ValueRef::Null => h.update([0u8]),
                ValueRef::Integer(v) => {
                    h.update([1u8]);
                    h.update(v.to_le_bytes());
                }
                ValueRef::Real(v) => {
                    h.update([2u8]);
                    h.update(v.to_le_bytes());
                }
                ValueRef::Text(b) | ValueRef::Blob(b) => {
                    let class = matches!(r.get_ref(i), Ok(ValueRef::Text(_)));
                    h.update([if class { 3u8 } else { 4 }]);
                    h.update((b.len() as u64).to_le_bytes());
                    h.update(b);
                }
            }
        }
    }
}

// A large value is read from the journal and hashed a chunk at a time, in
// each part of a table too wide for one journal table, as a text or a blob:
// the fence's digests are still the bytes docs/journal.md defines (a fence
// set before verifies alike), and the rollback is exact.
#[test]
fn large_texts_and_blobs_of_a_wide_table_fence_and_roll_back_exactly() {
    const WIDTH: usize = 1000;
    let big = 2 * MIB;
    let names: Vec<String> = (1..WIDTH).map(|j| format!("c{j}")).collect();
    let table = format!(
        "CREATE TABLE w (id INTEGER PRIMARY KEY, {});",
        names.join(", ")
    );
    let spec = format!(
        "{}{}",
        SPEC.split("[[tables]]").next().unwrap_or_default(),
        "[[tables]]\nname = \"w\"\nkey = [\"id\"]\n"
    ) + &names
        .iter()
        .map(|c| format!("\n[[tables.columns]]\nsource = \"{c}\"\n"))
        .collect::<String>();
    let d = Dir::with(
        "large-wide",
        &spec,
        &format!(
            "{table}
             INSERT INTO w (id, c1, c998, c999) VALUES
               (1, randomblob({big}), 'a', hex(randomblob({big}))),
               (2, 'small', 2.5, x'00'),
               (4, randomblob({big}), NULL, NULL);"
        ),
        &table,
    );
    d.run(&["load"], 0);
    d.run(&["journal", "install"], 0);
    d.client(
        "target.db",
        &format!(
            "UPDATE w SET c1 = randomblob({big}), c999 = hex(randomblob({big})) WHERE id = 1;
             INSERT INTO w (id, c2, c999) VALUES (3, hex(randomblob({big})), randomblob({big}));
             UPDATE w SET c998 = 'b' WHERE id = 2;
             DELETE FROM w WHERE id = 4;"
        ),
    );
    d.run(&["fence", "on"], 0);
    fence_digests_are_as_documented(&d, WIDTH);

    d.run(&["replay"], 0);
    let (source, target) = (d.dump("source.db", "w"), d.dump("target.db", "w"));
    assert_eq!(source.len(), 3);
    assert!(source == target, "every value of every row came back");
}

/// The journal's and the table's digests in the fence row of `d`'s target
/// are those computed here from the bytes docs/journal.md defines.
fn fence_digests_are_as_documented(d: &Dir, width: usize) {
    let target = d.conn("target.db");
    let parts: String = target
        .query_row("SELECT parts FROM _cutover_fence", [], |r| r.get(0))
        .expect("the fence row");
    let parts: serde_json::Value = serde_json::from_str(&parts).expect("the fence's parts");
    // The journal: every entry, then every row of each journal table.
    let mut h = sha2::Sha256::new();
    let mut st = target
        .prepare("SELECT seq, img, op FROM _cutover_journal ORDER BY seq")
        .expect("the entries");
    let mut rows = st.query([]).expect("the entries");
    while let Some(r) = rows.next().expect("an entry") {
        h.update(r.get::<_, i64>(0).expect("seq").to_le_bytes());
        h.update(r.get::<_, i64>(1).expect("img").to_le_bytes());
        let op: String = r.get(2).expect("op");
        h.update((op.len() as u64).to_le_bytes());
        h.update(op.as_bytes());
    }
    for t in ["_cutover_journal_1", "_cutover_journal_1_2"] {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t.as_bytes());
        let mut st = target
            .prepare(&format!("SELECT rowid, * FROM {t} ORDER BY rowid"))
            .expect("a journal table");
        let width = st.column_count();
        hash_rows(&mut h, &mut st.query([]).expect("its rows"), width);
    }
    assert_eq!(
        parts["digest"].as_str(),
        Some(hex::encode(h.finalize()).as_str()),
        "the journal's digest"
    );
    // The table's rows, key first, then its columns in order.
    let mut h = sha2::Sha256::new();
    let mut st = target
        .prepare("SELECT * FROM w ORDER BY id")
        .expect("the table");
    hash_rows(&mut h, &mut st.query([]).expect("its rows"), width);
    assert_eq!(
        parts["content"][0][1].as_str(),
        Some(hex::encode(h.finalize()).as_str()),
        "the table's digest"
    );
}
