//! Throughput and memory of `cutover` on the running example's schema scaled
//! up, next to the references they are judged against (BENCHMARKS.md):
//!
//! - the floor: SQLite's own scan of one table, in process;
//! - the reference merge-join `limit --threads 2` (`../shared/reference/limit`,
//!   built into `target/reference`, or the binary `CUTOVER_BENCH_LIMIT`
//!   names), hand-written for this one schema;
//! - gate, check and load of `rows` rows per side (100 scattered mismatches);
//! - replay of a journal of `min(rows, 1M)` mixed changes, against a plain
//!   batched rusqlite loop writing the same changes (`synchronous=FULL`,
//!   batches of 1,000, prepared statements), and of that replay's time its
//!   closing reconciliation (the proof), as the replay records it in the
//!   state file beside the spec;
//! - incremental sync with nothing to do, against the gate's one key-ordered
//!   pass over both sides (check's over the source alone is shown too);
//! - journal overhead: the same single-row updates in batches of 1,000,
//!   without and with the journal triggers.
//!
//! `cargo bench --bench perf` runs 100,000 rows; `CUTOVER_BENCH_ROWS=10000000`
//! the full size; `CUTOVER_BENCH_BIN` times another build of cutover (the
//! commit before, to compare in the same session); `CUTOVER_BENCH_BEFORE`
//! another build whose replay is timed beside this one's in the same run;
//! `CUTOVER_BENCH_KEEP=1` keeps the folder (and the replay's
//! databases as they were before it) to profile one part by hand. The tool runs as the release binary in a child process,
//! whose peak memory is read from /proc. Ratios compare runs made in the same
//! process, one after another, so a busy machine skews both sides alike; each
//! time is the best of `CUTOVER_BENCH_RUNS` runs (3), the one least disturbed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

mod support;
use support::{measured_pace, watch};

const SPEC: &str = include_str!("../fixtures/orders/spec.toml");
const SOURCE_DDL: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, dollars TEXT NOT NULL, status TEXT NOT NULL)";
const TARGET_DDL: &str =
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, cents INTEGER NOT NULL, status TEXT NOT NULL)";

fn main() {
    let rows: i64 = std::env::var("CUTOVER_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let base = std::env::var_os("CUTOVER_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).expect("a temporary folder");
    // CUTOVER_BENCH_KEEP: the folder stays, with the replay's databases as
    // they were before it (`*.before-replay.db`), to profile one part.
    let keep = std::env::var_os("CUTOVER_BENCH_KEEP").is_some();
    // Each measurement is the best of `runs`: the run least disturbed by
    // the rest of a shared machine.
    let runs: usize = std::env::var("CUTOVER_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let d = dir.path();
    let mut results: Vec<(String, String, String, String, String)> = Vec::new();
    let mut say = |what: &str, n: i64, t: Duration, rss: Option<u64>, note: String| {
        let rate = n as f64 / t.as_secs_f64();
        println!(
            "{what:<28} {n:>10} rows  {:>8.3} s  {:>6.2} M rows/s  {:>8}  {note}",
            t.as_secs_f64(),
            rate / 1e6,
            rss.map(|k| format!("{} MB", k / 1024)).unwrap_or_default()
        );
        results.push((
            what.to_string(),
            format!("{:.3}", t.as_secs_f64()),
            format!("{:.2}", rate / 1e6),
            rss.map(|k| format!("{:.1}", k as f64 / 1024.0))
                .unwrap_or_else(|| "-".into()),
            note,
        ));
    };
    println!("cutover bench: {rows} rows per side in {}", d.display());

    let t0 = Instant::now();
    generate(d, rows);
    println!("(generated in {:.1} s)", t0.elapsed().as_secs_f64());

    // The floor: SQLite's own scan of one table, in process.
    let floor = best(runs, || {
        let c = Connection::open(d.join("source.db")).expect("open");
        let t = Instant::now();
        let (n, _len): (i64, i64) = c
            .query_row(
                "SELECT count(*), sum(length(dollars)) FROM orders",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("scan");
        assert_eq!(n, rows);
        (t.elapsed(), None)
    });
    say(
        "floor: SQLite scan",
        rows,
        floor.0,
        None,
        "in process, one table".into(),
    );

    // The reference merge-join, then the gate, one after the other.
    let limit = match reference_limit() {
        Ok(bin) => {
            let (t, rss) = best(runs, || {
                let (t, rss, out) = run(Command::new(&bin).arg(d).args(["--threads", "2"]));
                assert_eq!(
                    out.trim(),
                    "100",
                    "the reference must count the 100 mismatches"
                );
                (t, rss)
            });
            say(
                "reference: limit --threads 2",
                rows,
                t,
                rss,
                "hand-written merge-join of this one schema".into(),
            );
            Some(t)
        }
        Err(why) => {
            println!("reference: limit --threads 2  skipped: {why}");
            None
        }
    };
    let (gate, gate_rss) = best(runs, || {
        ran(d, &["gate", "--spec", "spec.toml", "--max-diffs", "5"], 1)
    });
    say(
        "gate",
        rows,
        gate,
        gate_rss,
        format!(
            "{:.2}x the floor",
            gate.as_secs_f64() / floor.0.as_secs_f64()
        ),
    );

    let (check, rss) = best(runs, || ran(d, &["check", "--spec", "spec.toml"], 0));
    say(
        "check",
        rows,
        check,
        rss,
        format!(
            "{:.2}x the gate's time",
            check.as_secs_f64() / gate.as_secs_f64()
        ),
    );

    // Load into an empty target, next to SQLite's own insert rate.
    std::fs::rename(d.join("target.db"), d.join("target-gate.db")).expect("rename");
    let (inserts, _) = best(runs, || {
        let _ = std::fs::remove_file(d.join("insert-ref.db"));
        (plain_inserts(&d.join("insert-ref.db"), rows), None)
    });
    say(
        "reference: insert loop",
        rows,
        inserts,
        None,
        "prepared inserts, batches of 10,000".into(),
    );
    let (load, rss) = best(runs, || {
        let _ = std::fs::remove_file(d.join("target.db"));
        fresh(&d.join("target.db"), TARGET_DDL);
        ran(d, &["load", "--spec", "spec.toml"], 0)
    });
    say(
        "load",
        rows,
        load,
        rss,
        format!(
            "{:.2}x the insert loop's rate",
            inserts.as_secs_f64() / load.as_secs_f64()
        ),
    );

    // Incremental sync when nothing changed, next to one key-ordered pass:
    // the gate's, which reads both sides as sync must to find late rows
    // (check reads the source only). The key doubles as the watermark; the
    // first sync sets the cursor, the next ones are the no-op measured.
    std::fs::write(
        d.join("sync.toml"),
        SPEC.replace("key = [\"id\"]", "key = [\"id\"]\nwatermark = \"id\""),
    )
    .expect("spec");
    ran(d, &["sync", "--spec", "sync.toml"], 0);
    let (sync, rss) = best(runs, || ran(d, &["sync", "--spec", "sync.toml"], 0));
    say(
        "sync, nothing changed",
        rows,
        sync,
        rss,
        format!(
            "{:.2}x the gate's pass ({:.2}x check's, source only)",
            sync.as_secs_f64() / gate.as_secs_f64(),
            sync.as_secs_f64() / check.as_secs_f64()
        ),
    );

    // Replay: a journal of mixed changes on the loaded target. Each run
    // starts from the same source (`source.before-replay.db`).
    let entries = rows.min(1_000_000);
    ran(d, &["journal", "install", "--spec", "spec.toml"], 0);
    write_changes(&d.join("target.db"), rows, entries);
    ran(d, &["fence", "on", "--spec", "spec.toml"], 0);
    for db in ["source", "target"] {
        std::fs::copy(
            d.join(format!("{db}.db")),
            d.join(format!("{db}.before-replay.db")),
        )
        .expect("copy");
    }
    let (reference, _) = best(runs, || {
        std::fs::copy(d.join("source.before-replay.db"), d.join("source-ref.db")).expect("copy");
        (
            plain_replay(&d.join("target.db"), &d.join("source-ref.db")),
            None,
        )
    });
    say(
        "reference: rusqlite loop",
        entries,
        reference,
        None,
        "same changes, batches of 1,000".into(),
    );
    let mut paces = Vec::new();
    let (replay, rss) = best(runs, || {
        std::fs::copy(d.join("source.before-replay.db"), d.join("source.db")).expect("copy");
        let (t, rss) = ran(d, &["replay", "--spec", "spec.toml"], 0);
        paces.push((t, measured_pace(d)));
        (t, rss)
    });
    say(
        "replay",
        entries,
        replay,
        rss,
        format!(
            "{:.2}x the loop's rate",
            reference.as_secs_f64() / replay.as_secs_f64()
        ),
    );
    // What the best run measured of itself: its closing reconciliation,
    // inside its transaction, is the proof.
    if let Some((_, (_, proof))) = paces.iter().min_by_key(|(t, _)| *t) {
        say(
            "of which the proof (closing reconciliation)",
            rows,
            Duration::from_secs_f64(*proof),
            None,
            format!("{:.2} of the replay's time", proof / replay.as_secs_f64()),
        );
    }
    // The build before a change (`CUTOVER_BENCH_BEFORE`), timed on the same
    // journal in the same run.
    if let Some(before) = std::env::var_os("CUTOVER_BENCH_BEFORE").map(PathBuf::from) {
        let (t, rss) = best(runs, || {
            std::fs::copy(d.join("source.before-replay.db"), d.join("source.db")).expect("copy");
            ran_bin(&before, d, &["replay", "--spec", "spec.toml"], 0)
        });
        say(
            "replay, the build before",
            entries,
            t,
            rss,
            format!(
                "{:.2}x the loop's rate; this build {:.2}x its rate",
                reference.as_secs_f64() / t.as_secs_f64(),
                t.as_secs_f64() / replay.as_secs_f64()
            ),
        );
    }

    // Journal overhead: single-row updates in batches of 1,000.
    let plain = d.join("overhead-plain.db");
    let journaled = d.join("overhead-journal.db");
    for p in [&plain, &journaled] {
        std::fs::copy(d.join("target-gate.db"), p).expect("copy");
    }
    let without = updates(&plain, rows, entries);
    say(
        "updates without journal",
        entries,
        without,
        None,
        String::new(),
    );
    let spec = d.join("overhead.toml");
    std::fs::write(&spec, SPEC.replace("target.db", "overhead-journal.db")).expect("spec");
    ran(d, &["journal", "install", "--spec", "overhead.toml"], 0);
    let with = updates(&journaled, rows, entries);
    say(
        "updates with journal",
        entries,
        with,
        None,
        format!("{:.2}x without", with.as_secs_f64() / without.as_secs_f64()),
    );

    println!("\n| measurement | time (s) | M rows/s | peak MB | note |\n|---|---|---|---|---|");
    for (what, t, rate, rss, note) in &results {
        println!("| {what} | {t} | {rate} | {rss} | {note} |");
    }

    // The ratios the project is judged by, in one table.
    let secs = |t: Duration| t.as_secs_f64();
    let met = |ok: bool| if ok { "met" } else { "missed" };
    println!("\n| ratio | measured | target | |\n|---|---|---|---|");
    match limit {
        Some(l) => {
            let r = secs(gate) / secs(l);
            println!(
                "| gate time ÷ limit --threads 2 | {r:.2} | ≤ 1.25 | {} |",
                met(r <= 1.25)
            );
        }
        None => println!("| gate time ÷ limit --threads 2 | - | ≤ 1.25 | not measured |"),
    }
    let mb = gate_rss.map_or(f64::NAN, |k| k as f64 / 1024.0);
    println!(
        "| gate peak memory (MB) | {mb:.1} | < 32 | {} |",
        met(mb < 32.0)
    );
    let r = secs(check) / secs(gate);
    println!(
        "| check time ÷ gate time | {r:.2} | ≤ 1 | {} |",
        met(r <= 1.0)
    );
    let r = secs(inserts) / secs(load);
    println!(
        "| load rate ÷ insert loop rate | {r:.2} | ≥ 0.8 | {} |",
        met(r >= 0.8)
    );
    let r = secs(reference) / secs(replay);
    println!(
        "| replay rate ÷ loop rate | {r:.2} | ≥ 0.6 | {} |",
        met(r >= 0.6)
    );
    let r = secs(sync) / secs(gate);
    println!(
        "| sync no-op time ÷ one key-ordered pass (gate) | {r:.2} | ≤ 1 | {} |",
        met(r <= 1.0)
    );
    if keep {
        println!("(kept {})", dir.keep().display());
    }
}

/// The reference merge-join: `CUTOVER_BENCH_LIMIT` if set, else built from
/// `../shared/reference/limit` (or `CUTOVER_REFERENCE_DIR`) into
/// `target/reference`. Err says why there is none.
fn reference_limit() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("CUTOVER_BENCH_LIMIT") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("CUTOVER_BENCH_LIMIT={} is not a file", p.display()))
        };
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = std::env::var_os("CUTOVER_REFERENCE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/reference/limit"));
    let manifest = source.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(format!(
            "no {}; set CUTOVER_REFERENCE_DIR or CUTOVER_BENCH_LIMIT",
            manifest.display()
        ));
    }
    let target = root.join("target/reference");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .map_err(|e| format!("cargo build of the reference: {e}"))?;
    if !built.success() {
        return Err(format!("cargo build of {} failed", manifest.display()));
    }
    Ok(target.join("release/limit"))
}

/// The shortest time of `runs` runs of `f`, and the largest peak memory.
fn best(runs: usize, mut f: impl FnMut() -> (Duration, Option<u64>)) -> (Duration, Option<u64>) {
    let mut out: Option<(Duration, Option<u64>)> = None;
    for _ in 0..runs {
        let (t, rss) = f();
        out = Some(match out {
            None => (t, rss),
            Some((bt, brss)) => (bt.min(t), brss.max(rss)),
        });
    }
    out.expect("at least one run")
}

/// Runs a program to its end; its time, peak memory (KiB) and stdout.
fn run(command: &mut Command) -> (Duration, Option<u64>, String) {
    let out = tempfile::NamedTempFile::new().expect("an output file");
    let start = Instant::now();
    let mut child = command
        .stdout(out.reopen().expect("the output file"))
        .spawn()
        .expect("running the reference");
    let peak = watch(&mut child);
    let elapsed = start.elapsed();
    (
        elapsed,
        peak.1,
        std::fs::read_to_string(out.path()).unwrap_or_default(),
    )
}

fn fresh(path: &Path, ddl: &str) {
    let c = Connection::open(path).expect("create");
    c.execute_batch(ddl).expect("ddl");
}

/// Source and target of `rows` orders each, equal but for 100 scattered
/// mismatches: a third changed, a third missing, a third extra.
fn generate(d: &Path, rows: i64) {
    std::fs::write(d.join("spec.toml"), SPEC).expect("spec");
    let s = Connection::open(d.join("source.db")).expect("source");
    let t = Connection::open(d.join("target.db")).expect("target");
    for (c, ddl) in [(&s, SOURCE_DDL), (&t, TARGET_DDL)] {
        c.execute_batch("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
            .expect("pragmas");
        c.execute_batch(ddl).expect("ddl");
        c.execute_batch("BEGIN").expect("begin");
    }
    let step = (rows / 100).max(1);
    {
        let mut si = s
            .prepare("INSERT INTO orders VALUES (?1, ?2, ?3)")
            .expect("prepare");
        let mut ti = t
            .prepare("INSERT INTO orders VALUES (?1, ?2, ?3)")
            .expect("prepare");
        for id in 1..=rows {
            let cents = (id * 7919) % 10_000_000;
            let (code, word) = if id % 3 == 0 {
                ("C", "closed")
            } else {
                ("A", "active")
            };
            si.execute(params![
                id,
                format!("{}.{:02}", cents / 100, cents % 100),
                code
            ])
            .expect("insert");
            let k = id / step;
            let scattered = id % step == step / 2 && k < 100;
            match (scattered, k % 3) {
                (true, 0) => {
                    ti.execute(params![id, cents + 1, word]).expect("insert");
                }
                (true, 1) => {} // missing in the target
                _ => {
                    ti.execute(params![id, cents, word]).expect("insert");
                }
            }
            if scattered && k % 3 == 2 {
                ti.execute(params![rows + 1 + k, cents, word])
                    .expect("insert");
            }
        }
    }
    for c in [&s, &t] {
        c.execute_batch("COMMIT").expect("commit");
    }
}

/// Mixed changes on the target, committed in batches of 1,000: mostly
/// updates, some inserts past the last id, some deletes.
fn write_changes(target: &Path, rows: i64, n: i64) {
    let c = Connection::open(target).expect("target");
    let mut done = 0;
    while done < n {
        c.execute_batch("BEGIN").expect("begin");
        for _ in 0..1000.min(n - done) {
            done += 1;
            match done % 10 {
                0 => c
                    .execute(
                        "INSERT INTO orders VALUES (?1, 100, 'active')",
                        [rows + 1_000 + done],
                    )
                    .map(|_| ()),
                5 => c
                    .execute("DELETE FROM orders WHERE id = ?1", [(done * 7) % rows + 1])
                    .map(|_| ()),
                _ => c
                    .execute(
                        "UPDATE orders SET cents = cents + 1 WHERE id = ?1",
                        [(done * 13) % rows + 1],
                    )
                    .map(|_| ()),
            }
            .expect("change");
        }
        c.execute_batch("COMMIT").expect("commit");
    }
}

/// The reference for replay: read the journal and write the same row
/// changes to the source with prepared statements, batches of 1,000,
/// `synchronous=FULL`, checking nothing.
fn plain_replay(target: &Path, source: &Path) -> Duration {
    let t = Connection::open(target).expect("target");
    let s = Connection::open(source).expect("source");
    s.execute_batch("PRAGMA synchronous = FULL")
        .expect("pragma");
    let start = Instant::now();
    // The journal of the running example's one table: seq, op, the
    // before-image (o1..o3) and the after-image (n1..n3) as values.
    let mut q = t
        .prepare("SELECT op, coalesce(n1, o1), n2, n3 FROM _cutover_journal_1 ORDER BY seq")
        .expect("journal");
    let mut rows = q.query([]).expect("query");
    let mut upd = s
        .prepare("UPDATE orders SET dollars = ?2, status = ?3 WHERE id = ?1")
        .expect("prepare");
    let mut ins = s
        .prepare("INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)")
        .expect("prepare");
    let mut del = s
        .prepare("DELETE FROM orders WHERE id = ?1")
        .expect("prepare");
    let mut n = 0;
    s.execute_batch("BEGIN").expect("begin");
    while let Some(r) = rows.next().expect("row") {
        let op: String = r.get(0).expect("op");
        let id: i64 = r.get(1).expect("id");
        let fields = || {
            let cents: i64 = r.get(2).expect("cents");
            let status: String = r.get(3).expect("status");
            let code = if status == "closed" { "C" } else { "A" };
            (format!("{}.{:02}", cents / 100, cents % 100), code)
        };
        match op.as_str() {
            "update" => {
                let (d, c) = fields();
                upd.execute(params![id, d, c]).expect("update");
            }
            "insert" => {
                let (d, c) = fields();
                ins.execute(params![id, d, c]).expect("insert");
            }
            _ => {
                del.execute([id]).expect("delete");
            }
        }
        n += 1;
        if n % 1000 == 0 {
            s.execute_batch("COMMIT; BEGIN").expect("commit");
        }
    }
    s.execute_batch("COMMIT").expect("commit");
    start.elapsed()
}

/// SQLite's own insert rate: `rows` target rows through one prepared
/// statement, batches of 10,000 (load's default), `synchronous=FULL`.
fn plain_inserts(db: &Path, rows: i64) -> Duration {
    fresh(db, TARGET_DDL);
    let c = Connection::open(db).expect("open");
    c.execute_batch("PRAGMA synchronous = FULL")
        .expect("pragma");
    let start = Instant::now();
    let mut st = c
        .prepare("INSERT INTO orders VALUES (?1, ?2, ?3)")
        .expect("prepare");
    let mut id = 0;
    while id < rows {
        c.execute_batch("BEGIN").expect("begin");
        for _ in 0..10_000.min(rows - id) {
            id += 1;
            st.execute(params![id, (id * 7919) % 10_000_000, "active"])
                .expect("insert");
        }
        c.execute_batch("COMMIT").expect("commit");
    }
    start.elapsed()
}

/// `n` single-row updates, committed in batches of 1,000.
fn updates(db: &Path, rows: i64, n: i64) -> Duration {
    let c = Connection::open(db).expect("open");
    c.execute_batch("PRAGMA synchronous = FULL")
        .expect("pragma");
    let mut st = c
        .prepare("UPDATE orders SET cents = cents + 1 WHERE id = ?1")
        .expect("prepare");
    let start = Instant::now();
    let mut done = 0;
    while done < n {
        c.execute_batch("BEGIN").expect("begin");
        for _ in 0..1000.min(n - done) {
            done += 1;
            st.execute([(done * 13) % rows + 1]).expect("update");
        }
        c.execute_batch("COMMIT").expect("commit");
    }
    start.elapsed()
}

/// Runs the release binary in `dir` (or the one `CUTOVER_BENCH_BIN` names:
/// another build, to compare with this one), which must exit with `code`;
/// its time and peak memory (KiB, from /proc while it runs).
fn ran(dir: &Path, args: &[&str], code: i32) -> (Duration, Option<u64>) {
    let bin = std::env::var_os("CUTOVER_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cutover")));
    ran_bin(&bin, dir, args, code)
}

/// [`ran`] with the binary `bin`.
fn ran_bin(bin: &Path, dir: &Path, args: &[&str], code: i32) -> (Duration, Option<u64>) {
    let start = Instant::now();
    let mut child = Command::new(bin)
        .current_dir(dir)
        .args(args)
        .arg("--quiet")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("running cutover");
    let (got, peak) = watch(&mut child);
    assert_eq!(got, code, "cutover {}", args.join(" "));
    (start.elapsed(), peak)
}
