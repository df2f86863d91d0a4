//! A hostile environment: database paths that are directories, read-only
//! files and read-only mounts, folders without write permission, a database
//! locked by another process, and a disk that fills up in the middle of a
//! batch. Each gives exit 2 with one line naming the file, within a bounded
//! time, and leaves every database as it was (or, for a disk that fills
//! mid-replay, with whole batches only, finished by a plain rerun).
//!
//! The tests usually run as root, which ignores file permissions: a test
//! that needs them runs the binary as `nobody` through `setpriv`, and one
//! that needs a read-only or tiny filesystem mounts it in a private mount
//! namespace (`unshare -m`). Where neither is possible, the test says so on
//! stderr and checks what it can. `tests/bad_input.rs` covers a missing
//! database file and a spec path that is a directory.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{Dir, Output, sh};

/// Whether this process can write a file its mode forbids (root can).
fn privileged() -> bool {
    let d = Dir::new("probe-privilege");
    d.write("probe", "x");
    let p = d.join("probe");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o444))
        .expect("chmod");
    std::fs::OpenOptions::new().append(true).open(&p).is_ok()
}

/// Whether `setpriv` can run a program as `nobody` here.
fn can_drop_privileges() -> bool {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "true"])
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `cutover ARGS --spec spec.toml` in the folder as an unprivileged
/// user: `nobody` through setpriv when the test runs as root.
fn unprivileged(d: &Dir, args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_cutover");
    let mut c = if privileged() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            bin,
        ]);
        c
    } else {
        Command::new(bin)
    };
    c.args(args)
        .args(["--spec", "spec.toml"])
        .current_dir(d.path())
        .env("CUTOVER_BUSY_TIMEOUT_MS", "500")
        .env_remove("CUTOVER_FAULT")
        .stdin(Stdio::null());
    let out = c.output().expect("running cutover");
    Output {
        command: format!("(as nobody) cutover {} --spec spec.toml", args.join(" ")),
        cwd: d.path().to_path_buf(),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", p.display()));
}

/// Gives `nobody` the folder (0755) and `files`, as the user that would own
/// them in production; a no-op when the test does not run as root.
fn hand_to_nobody(d: &Dir, files: &[&str]) {
    chmod(d.path(), 0o755);
    if privileged() {
        for f in files {
            let (code, out) = sh(d.path(), &format!("chown 65534:65534 '{f}'"));
            assert_eq!(code, 0, "chown {f}: {out}");
        }
    }
}

// --- paths ------------------------------------------------------------------------

#[test]
fn a_database_path_that_is_a_directory_is_refused_and_left_alone() {
    for side in ["source", "target"] {
        let d = Dir::orders_fenced(&format!("db-is-dir-{side}"));
        std::fs::create_dir(d.join("dir.db")).expect("creating dir.db/");
        d.spec(&support::ORDERS_SPEC.replace(&format!("sqlite://{side}.db"), "sqlite://dir.db"));
        let before = d.snapshot();
        for args in [&["check"][..], &["load"], &["replay"], &["status"]] {
            let out = d.run(args, 2);
            out.assert_mentions(&["dir.db", "directory"]);
        }
        d.assert_unchanged(&before, "commands over a database that is a directory");
        assert!(
            std::fs::read_dir(d.join("dir.db"))
                .expect("dir.db/")
                .next()
                .is_none(),
            "something was created inside dir.db/"
        );
    }
}

#[test]
fn an_export_to_a_directory_or_a_feed_that_is_a_directory_is_refused() {
    let d = Dir::orders_fenced("feed-paths");
    std::fs::create_dir(d.join("out.jsonl")).expect("creating out.jsonl/");
    let before = d.snapshot();
    let out = d
        .command(&[
            "journal",
            "export",
            "--spec",
            "spec.toml",
            "--out",
            "out.jsonl",
        ])
        .expect(2);
    out.assert_mentions(&["out.jsonl"]);
    let out = d
        .command(&[
            "apply",
            "--spec",
            "spec.toml",
            "--feed",
            "out.jsonl",
            "--into",
            "source",
        ])
        .expect(2);
    out.assert_mentions(&["out.jsonl"]);
    d.assert_unchanged(&before, "export and apply with directory paths");
}

// --- permissions ---------------------------------------------------------------------

#[test]
fn a_read_only_source_file_refuses_the_replay_and_stays_as_it_was() {
    let d = Dir::orders_fenced("read-only-source");
    if privileged() && !can_drop_privileges() {
        // Root writes through a 0444 file; without setpriv there is no
        // unprivileged user to test with. Documented in CONTRIBUTING.md.
        eprintln!("SKIPPED: running as root without setpriv; chmod 0444 does not stop root");
        return;
    }
    hand_to_nobody(&d, &["source.db", "target.db"]);
    chmod(&d.join("source.db"), 0o444);
    let before = d.snapshot();
    let out = unprivileged(&d, &["replay"]);
    support::assert_no_panic(&out);
    assert_eq!(out.code, Some(2), "{out}");
    out.assert_mentions(&["source.db", "readonly"]);
    d.assert_unchanged(&before, "replay into a read-only source");
    // Reading still works: the operator can see where things stand.
    let out = unprivileged(&d, &["status"]);
    assert_eq!(out.code, Some(0), "{out}");
    let out = unprivileged(&d, &["replay", "--dry-run"]);
    assert_eq!(out.code, Some(0), "{out}");
    d.assert_unchanged(&before, "status and a dry run on a read-only source");
}

#[test]
fn as_root_a_read_only_file_mode_does_not_stop_the_replay() {
    // What an operator running as root gets: the mode bits are not a
    // guard. The replay completes exactly as it would otherwise.
    if !privileged() {
        eprintln!("SKIPPED: not running as root");
        return;
    }
    let d = Dir::orders_fenced("root-read-only-mode");
    chmod(&d.join("source.db"), 0o444);
    let json = d.json(&["replay"], 0);
    assert_eq!(json["applied"], 3, "{json:#}");
}

#[test]
fn a_folder_without_write_permission_refuses_the_replay_and_changes_nothing() {
    // SQLite must create source.db-journal next to the database to write.
    let d = Dir::orders_fenced("no-write-folder");
    if privileged() && !can_drop_privileges() {
        eprintln!("SKIPPED: running as root without setpriv; folder modes do not stop root");
        return;
    }
    hand_to_nobody(&d, &["source.db", "target.db"]);
    chmod(d.path(), 0o555);
    let before = d.snapshot();
    let out = unprivileged(&d, &["replay"]);
    chmod(d.path(), 0o755);
    support::assert_no_panic(&out);
    assert_eq!(out.code, Some(2), "{out}");
    out.assert_mentions(&["source.db"]);
    d.assert_unchanged(&before, "replay in a folder without write permission");
    d.run(&["replay"], 0);
}

/// Runs `script` in a private mount namespace (`unshare -m`), or returns
/// `None` when this machine does not allow it.
fn in_mount_namespace(d: &Dir, script: &str) -> Option<(i32, String)> {
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return None;
    }
    let full = format!("set -e\n{script}");
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &full])
        .current_dir(d.path())
        .env("CUTOVER", env!("CARGO_BIN_EXE_cutover"))
        .env("CUTOVER_BUSY_TIMEOUT_MS", "500")
        .env_remove("CUTOVER_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("running unshare");
    Some((
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[test]
fn a_read_only_mount_refuses_the_replay_with_exit_2_and_reads_still_work() {
    let d = Dir::orders_fenced("read-only-mount");
    let before = d.snapshot();
    let script = r#"
mount --bind . .
mount -o remount,bind,ro . .
set +e
"$CUTOVER" replay --spec spec.toml > replay.out 2>&1
echo "replay=$?"
"$CUTOVER" status --spec spec.toml > /dev/null 2>&1
echo "status=$?"
"$CUTOVER" gate --spec spec.toml > /dev/null 2>&1
echo "gate=$?"
cat replay.out 2>/dev/null || true
"#;
    // replay.out cannot be written on the read-only mount: print instead.
    let script = script.replace(
        "\"$CUTOVER\" replay --spec spec.toml > replay.out 2>&1\necho \"replay=$?\"",
        "\"$CUTOVER\" replay --spec spec.toml 2>&1; echo \"replay=$?\"",
    );
    let Some((code, out)) = in_mount_namespace(&d, &script) else {
        eprintln!("SKIPPED: no private mount namespace here (unshare -m / mount refused)");
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("replay=2"),
        "replay on a read-only mount: {out}"
    );
    assert!(
        out.contains("source.db"),
        "the message must name the file: {out}"
    );
    assert!(
        out.to_lowercase().contains("readonly") || out.to_lowercase().contains("read-only"),
        "{out}"
    );
    assert!(!out.contains("panicked"), "{out}");
    assert!(out.contains("status=0"), "status must still read: {out}");
    assert!(
        out.contains("gate=1"),
        "the gate must still read (and see the stale source): {out}"
    );
    d.assert_unchanged(&before, "commands on a read-only mount");
}

// --- locks -------------------------------------------------------------------------------

#[test]
fn a_source_locked_by_a_writer_makes_replay_wait_then_give_up_cleanly() {
    let d = Dir::orders_fenced("source-locked");
    let before = d.snapshot();
    let writer = d.conn("source.db");
    writer
        .execute_batch("BEGIN IMMEDIATE; UPDATE orders SET status = status WHERE id = 101;")
        .expect("holding the source's write lock");
    let started = Instant::now();
    let out = d
        .cutover(&["replay"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "300")
        .expect(2);
    let took = started.elapsed();
    writer.execute_batch("ROLLBACK").expect("releasing");
    drop(writer);
    assert!(
        took >= Duration::from_millis(300),
        "it did not wait at all: {took:?}"
    );
    assert!(took < Duration::from_secs(8), "unbounded wait: {took:?}");
    out.assert_mentions(&["source.db", "lock"]);
    assert_eq!(
        out.stderr
            .lines()
            .filter(|l| l.starts_with("cutover:"))
            .count(),
        1,
        "one line on stderr: {out}"
    );
    d.assert_unchanged(&before, "replay that could not take the lock");
    d.run(&["replay"], 0);
}

#[test]
fn a_lock_released_within_the_timeout_is_waited_for() {
    let d = Dir::orders_fenced("source-lock-released");
    let writer = d.conn("source.db");
    writer
        .execute_batch("BEGIN IMMEDIATE; UPDATE orders SET status = status WHERE id = 101;")
        .expect("holding the source's write lock");
    let mut child = d
        .cutover(&["replay"])
        .env("CUTOVER_BUSY_TIMEOUT_MS", "10000")
        .spawn();
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().expect("polling").is_none());
    writer.execute_batch("COMMIT").expect("committing");
    drop(writer);
    let status = child.wait().expect("waiting for replay");
    assert_eq!(status.code(), Some(0));
    assert_eq!(support::applied_seqs(&d), vec![1, 2, 3]);
}

/// Holds an exclusive lock on `db` (no reader gets in) until dropped.
fn exclusive(d: &Dir, db: &str) -> rusqlite::Connection {
    let c = d.conn(db);
    c.execute_batch("BEGIN EXCLUSIVE")
        .expect("an exclusive lock");
    c
}

#[test]
fn an_exclusively_locked_database_gives_every_command_exit_2_in_bounded_time() {
    let d = Dir::orders_fenced("exclusive-lock");
    let before = d.snapshot();
    for db in ["source.db", "target.db"] {
        let lock = exclusive(&d, db);
        for args in [
            &["check"][..],
            &["gate"],
            &["status"],
            &["replay"],
            &["replay", "--dry-run"],
            &["fence", "status"],
        ] {
            let started = Instant::now();
            let out = d
                .cutover(args)
                .env("CUTOVER_BUSY_TIMEOUT_MS", "100")
                .expect(2);
            let took = started.elapsed();
            assert!(took < Duration::from_secs(8), "{args:?}: {took:?}");
            out.assert_mentions(&[db, "locked"]);
            support::assert_no_panic(&out);
        }
        lock.execute_batch("ROLLBACK").expect("releasing");
    }
    d.assert_unchanged(&before, "commands against locked databases");
}

// Regression test. Until 3092b6f: a database locked by another process is reported as
// 'could not be read; is it a SQLite database?: database is locked', suggesting the file
// is not a database.
#[test]
fn a_locked_database_is_reported_as_locked_not_as_perhaps_not_a_database() {
    let d = Dir::orders_fenced("exclusive-lock-message");
    let lock = exclusive(&d, "source.db");
    let out = d.run(&["status"], 2);
    lock.execute_batch("ROLLBACK").expect("releasing");
    assert!(
        !out.stderr.contains("is it a SQLite database"),
        "a lock is not a damaged file: {out}"
    );
    out.assert_mentions(&["source.db", "lock", "CUTOVER_BUSY_TIMEOUT_MS"]);
}

// --- a full disk ------------------------------------------------------------------------------

#[test]
fn a_file_size_limit_hit_by_the_first_batch_rolls_it_back_and_says_so() {
    // `ulimit -f` caps how far a file may grow; with SIGXFSZ ignored the
    // write fails with EFBIG, as on a full disk. The source cannot grow by a
    // single page, so the first batch fails.
    let d = Dir::new("file-size-limit");
    let entries = support::fenced_orders_workload(&d, 100, 600, 0xF5);
    let clean = d.copy("clean");
    clean.run(&["replay", "--batch", "100"], 0);
    let size = std::fs::metadata(d.join("source.db"))
        .expect("source.db")
        .len();
    let blocks = size.div_ceil(512);
    let before = d.snapshot();
    let (code, out) = sh(
        d.path(),
        &format!(
            "trap '' XFSZ; ulimit -f {blocks}; exec \"$CUTOVER\" replay --spec spec.toml --batch 100"
        ),
    );
    assert_eq!(code, 2, "{out}");
    assert!(!out.contains("panicked"), "{out}");
    assert!(
        out.contains("rolled back"),
        "the error must say the batch was rolled back: {out}"
    );
    assert!(out.contains("source.db"), "{out}");
    d.assert_unchanged(&before, "a replay whose first batch hit the size limit");
    // With room again, one plain rerun finishes exactly like a clean replay.
    let json = d.json(&["replay", "--batch", "100"], 0);
    assert_eq!(json["applied"].as_i64(), Some(entries), "{json:#}");
    assert_eq!(
        d.dump("source.db", "orders"),
        clean.dump("source.db", "orders")
    );
}

#[test]
fn a_disk_that_fills_mid_replay_leaves_the_source_as_it_was_and_a_rerun_finishes() {
    // All or nothing (docs/journal.md): the replay is one transaction of
    // the source, so a disk that fills part-way leaves nothing of it.
    let d = Dir::new("disk-full");
    support::fenced_orders_workload(&d, 500, 3_000, 0xD15C);
    // The source must grow as the replay goes (the applied set does not:
    // a batch is one row), so the application also inserts many rows.
    d.run(&["fence", "off", "--force"], 0);
    d.exec(
        "target.db",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000)
         INSERT INTO orders (id, cents, status) SELECT 100000 + i, i * 7, 'active' FROM n",
    );
    let entries = d.json(&["fence", "on"], 0)["journal_rows"]
        .as_i64()
        .expect("journal_rows");
    let original = d.dump("source.db", "orders");
    let clean = d.copy("clean");
    clean.run(&["replay", "--batch", "200"], 0);
    let size = |d: &Dir| {
        std::fs::metadata(d.join("source.db"))
            .expect("source.db")
            .len()
            / 1024
    };
    let (before, after) = (size(&d), size(&clean));
    // Room for the source and half the replay's growth, not for the whole.
    let room = before + (after - before) / 2;
    let script = format!(
        r#"
mkdir -p small
mount -t tmpfs -o size={room}k tmpfs small
cp spec.toml source.db small/
ln -s "$PWD/target.db" small/target.db
set +e
"$CUTOVER" replay --spec small/spec.toml --batch 200 2>&1
echo "replay=$?"
set -e
cp small/source.db source.db
rm -f small/source.db-journal
"#
    );
    let Some((code, out)) = in_mount_namespace(&d, &script) else {
        eprintln!("SKIPPED: no private mount namespace here (unshare -m / mount refused)");
        return;
    };
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("replay=2"),
        "the replay must fail on a full disk: {out}"
    );
    assert!(!out.contains("panicked"), "{out}");
    assert!(
        out.contains("full"),
        "the error must say the disk is full: {out}"
    );
    assert!(out.contains("rolled back"), "{out}");
    // Nothing of the replay is left in the source: no entry applied, the
    // rows as before it.
    assert!(support::applied_seqs(&d).is_empty(), "{out}");
    assert_eq!(d.dump("source.db", "orders"), original);
    let json = d.json(&["replay", "--batch", "200"], 0);
    assert_eq!(
        json["previously_applied"].as_i64().unwrap_or(-1)
            + json["applied"].as_i64().unwrap_or(0)
            + json["already_in_place"].as_i64().unwrap_or(0),
        entries,
        "{json:#}"
    );
    assert_eq!(
        d.dump("source.db", "orders"),
        clean.dump("source.db", "orders")
    );
    assert_eq!(support::applied_seqs(&d), support::applied_seqs(&clean));
}
