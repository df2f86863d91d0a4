//! `kill -9` at random moments, again and again. A replay (and a load, and a
//! feed apply) is started, killed with SIGKILL after a seeded random delay,
//! started again, killed again, until it finishes; then the end state must
//! equal one clean, uninterrupted run, with every journal entry recorded
//! exactly once. Between rounds the applied entries must be a prefix of the
//! journal that never shrinks; a replay's, none or all of it (a replay
//! commits whole or not at all).
//!
//! The suite makes at least 50 replay kills (counting only kills of a
//! process that was still running). Every delay comes from one seed, printed
//! on failure; set `CUTOVER_KILL_SEED` to replay a failing sequence.
//! `tests/crash.rs` has the first, smaller kill test; this one builds on it.

mod support;

use std::time::{Duration, Instant};

use support::{Dir, Rng, applied_seqs, journal_seqs};

/// The kill tests time their kills from a clean run; run side by side on
/// two cores they would skew each other's clocks, so they take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The seed of every delay; `CUTOVER_KILL_SEED` overrides it.
fn seed() -> u64 {
    std::env::var("CUTOVER_KILL_SEED")
        .ok()
        .and_then(|s| {
            let s = s.trim_start_matches("0x");
            u64::from_str_radix(s, 16).ok()
        })
        .unwrap_or(0x00C0_FFEE_0050)
}

/// What the folder's state is, read from a copy so that the folder stays
/// exactly as the kill left it (a hot rollback journal included) for the
/// next run to recover.
fn in_copy<T>(d: &Dir, read: impl FnOnce(&Dir) -> T) -> T {
    read(&d.copy("peek"))
}

/// One kill-and-restart campaign: runs `args` again and again, each killed
/// after a random delay in `delay_ms`, until a run exits 0 by itself. A job
/// that commits whole or not at all (replay, apply into the source) starts
/// over after each kill, and a busy machine can make every run outlast the
/// range: the range's top grows by a tenth after each kill, so the kills
/// still land at random moments and a run finally outlives its delay.
/// `progress` reads how far the job got (from a copy). Returns the kills,
/// and how many of them landed mid-way (after some batch had committed).
fn campaign(
    d: &Dir,
    args: &[&str],
    delay_ms: (u64, u64),
    rng: &mut Rng,
    progress: &dyn Fn(&Dir) -> i64,
    history: &mut Vec<String>,
) -> (u32, u32) {
    let mut kills = 0;
    let mut mid_way = 0;
    let mut last = in_copy(d, progress);
    let mut top = delay_ms.1;
    for round in 0..400 {
        let delay = Duration::from_millis(rng.range(delay_ms.0, top));
        top += top / 10;
        let mut child = d
            .cutover(args)
            .env("CUTOVER_BUSY_TIMEOUT_MS", "20000")
            .spawn();
        std::thread::sleep(delay);
        let killed = match child.try_wait().expect("polling") {
            None => {
                child.kill().expect("SIGKILL"); // No cleanup, no rollback.
                kills += 1;
                true
            }
            Some(_) => false,
        };
        let status = child.wait().expect("reaping");
        let now = in_copy(d, progress);
        history.push(format!(
            "round {round}: {args:?} delay {delay:?}, {}, progress {last} → {now}",
            if killed {
                "killed".to_string()
            } else {
                status.to_string()
            }
        ));
        assert!(
            now >= last,
            "progress went backwards (seed {:#x}):\n{}",
            seed(),
            history.join("\n")
        );
        if killed && now > last {
            mid_way += 1;
        }
        last = now;
        if !killed {
            assert_eq!(
                status.code(),
                Some(0),
                "a run that was not killed failed (seed {:#x}):\n{}",
                seed(),
                history.join("\n")
            );
            return (kills, mid_way);
        }
    }
    panic!(
        "the job never finished (seed {:#x}):\n{}",
        seed(),
        history.join("\n")
    );
}

/// A clean run of `args` on a copy: the copy, and how long the run took.
fn clean_run(d: &Dir, args: &[&str]) -> (Dir, Duration) {
    let c = d.copy("clean");
    let started = Instant::now();
    c.run(args, 0);
    (c, started.elapsed())
}

/// Delays from `lo` to `hi` percent of a clean run. A replay gets a
/// twentieth to a quarter: most kills land mid-way (a few during start-up)
/// and most rounds get some work done. A feed apply validates the whole
/// file before its first write, so its kills need longer delays.
fn delays(clean: Duration, lo: u64, hi: u64) -> (u64, u64) {
    let ms = clean.as_millis().max(40) as u64;
    (ms * lo / 100, ms * hi / 100 + 1)
}

/// The applied seqs of the folder must be a prefix of its journal.
fn applied_prefix(d: &Dir) -> i64 {
    let applied = applied_seqs(d);
    let journal = journal_seqs(d, i64::MAX);
    assert!(
        applied.len() <= journal.len() && applied[..] == journal[..applied.len()],
        "applied entries are not a prefix of the journal: {} applied",
        applied.len()
    );
    applied.len() as i64
}

#[test]
fn replay_killed_at_random_moments_fifty_times_ends_like_one_clean_replay() {
    let _turn = alone();
    let mut rng = Rng::new(seed());
    let started = Instant::now();
    let mut kills = 0;
    let mut workloads = 0;
    while kills < 50 {
        assert!(
            workloads < 40,
            "fewer than 50 kills landed in {workloads} workloads (seed {:#x})",
            seed()
        );
        let d = Dir::new(&format!("kills-replay-{workloads}"));
        let entries =
            support::fenced_orders_workload(&d, 2_000, 3_000, seed() ^ (workloads as u64 + 1));
        let (clean, took) = clean_run(&d, &["replay", "--batch", "25"]);
        let expected = (clean.dump("source.db", "orders"), applied_seqs(&clean));
        assert_eq!(expected.1.len() as i64, entries);
        let pristine = d.dump("source.db", "orders");
        let mut history = Vec::new();
        // Kills anywhere from start-up to just past a whole run: a replay
        // killed before its commit starts again from the first entry, so
        // only a run that outlives its delay ends the campaign.
        let all_or_nothing = |d: &Dir| {
            let n = applied_prefix(d);
            assert!(
                n == 0 || n == entries,
                "a killed replay left {n} of {entries} entries applied (seed {:#x})",
                seed()
            );
            if n == 0 {
                assert!(
                    d.dump("source.db", "orders") == pristine,
                    "a killed replay changed the source without committing (seed {:#x})",
                    seed()
                );
            }
            n
        };
        let (k, _) = campaign(
            &d,
            &["replay", "--batch", "25"],
            delays(took, 5, 110),
            &mut rng,
            &all_or_nothing,
            &mut history,
        );
        kills += k;
        let state = (d.dump("source.db", "orders"), applied_seqs(&d));
        assert!(
            state == expected,
            "workload {workloads}: the source after kills differs from one clean replay (seed {:#x}):\n{}",
            seed(),
            history.join("\n")
        );
        // The runs hold the entries they count, and never overlap.
        assert_eq!(
            d.applied_entries("source.db"),
            d.applied_seqs("source.db", "target.db").len() as i64
        );
        let again = d.json(&["replay", "--batch", "25"], 0);
        assert_eq!(again["applied"], 0, "{again:#}");
        d.run(&["gate"], 0);
        eprintln!(
            "workload {workloads}: a clean replay took {took:?}; {} rounds",
            history.len()
        );
        workloads += 1;
    }
    eprintln!(
        "{kills} replay kills over {workloads} workloads in {:?} (seed {:#x})",
        started.elapsed(),
        seed()
    );
}

/// Kill campaigns on fresh copies of `template` until `min_kills` kills
/// landed; `check` verifies each copy once its job finished.
fn campaigns(
    template: &Dir,
    args: &[&str],
    pct: (u64, u64),
    min_kills: u32,
    rng: &mut Rng,
    progress: &dyn Fn(&Dir) -> i64,
    check: &dyn Fn(&Dir, &[String]),
) -> u32 {
    let (_, mut took) = clean_run(template, args);
    let mut kills = 0;
    for n in 0..20 {
        if kills >= min_kills {
            eprintln!("{args:?}: a clean run took {took:?}; {kills} kills in {n} campaigns");
            return kills;
        }
        let d = template.copy(&format!("campaign-{n}"));
        let mut history = Vec::new();
        let landed = campaign(
            &d,
            args,
            delays(took, pct.0, pct.1),
            rng,
            progress,
            &mut history,
        )
        .0;
        check(&d, &history);
        kills += landed;
        // The clean run may have been timed on a busy machine, making every
        // delay too long to catch the job running: aim earlier.
        if landed == 0 {
            took /= 2;
        }
    }
    panic!(
        "{args:?}: only {kills} kills landed in 20 campaigns (seed {:#x})",
        seed()
    );
}

#[test]
fn apply_of_an_exported_feed_killed_at_random_moments_ends_like_one_clean_replay() {
    let _turn = alone();
    let mut rng = Rng::new(seed() ^ 0xA99);
    let d = Dir::new("kills-apply");
    let entries = support::fenced_orders_workload(&d, 1_000, 2_000, seed() ^ 0xFEED);
    d.run(
        &[
            "journal",
            "export",
            "--out",
            "feed.jsonl",
            "--delivery-size",
            "25",
        ],
        0,
    );
    let apply = ["apply", "--feed", "feed.jsonl", "--into", "source"];
    let (clean, _) = clean_run(&d, &apply);
    let expected = (clean.dump("source.db", "orders"), applied_seqs(&clean));
    assert_eq!(expected.1.len() as i64, entries);
    // Into the source a feed applies whole or not at all: a kill leaves
    // none of it or all of it, so delays reach well past a whole run (a
    // busy machine makes a run slower than the clean one measured first).
    let all_or_nothing = |c: &Dir| {
        let n = applied_prefix(c);
        assert!(
            n == 0 || n == entries,
            "a killed apply left {n} of {entries} entries applied (seed {:#x})",
            seed()
        );
        n
    };
    campaigns(
        &d,
        &apply,
        (30, 160),
        8,
        &mut rng,
        &all_or_nothing,
        &|c, history| {
            assert!(
                (c.dump("source.db", "orders"), applied_seqs(c)) == expected,
                "the source after kills differs from one clean replay (seed {:#x}):\n{}",
                seed(),
                history.join("\n")
            );
            // One receipt per delivery; the feed again is all replayed.
            assert_eq!(
                c.int(
                    "source.db",
                    "SELECT count(*) - count(DISTINCT delivery) FROM _cutover_deliveries"
                ),
                0
            );
            let json = c.json(&["apply", "--feed", "feed.jsonl", "--into", "source"], 0);
            for del in json["deliveries"].as_array().expect("deliveries") {
                assert_eq!(del["status"], "replayed", "{del:#}");
            }
            let json = c.json(&["replay"], 0);
            assert_eq!(json["applied"], 0, "{json:#}");
        },
    );
}

#[test]
fn load_killed_at_random_moments_ends_like_one_clean_load() {
    let _turn = alone();
    let mut rng = Rng::new(seed() ^ 0x10AD);
    let d = Dir::orders("kills-load");
    {
        let mut s = d.conn("source.db");
        let tx = s.transaction().expect("a transaction");
        tx.execute("DELETE FROM orders", []).expect("emptying");
        {
            let mut st = tx
                .prepare("INSERT INTO orders (id, dollars, status) VALUES (?1, ?2, ?3)")
                .expect("preparing");
            for id in 1..=30_000i64 {
                st.execute(rusqlite::params![
                    id,
                    support::dollars(id * 13 % 1_000_000),
                    if id % 5 == 0 { "C" } else { "A" }
                ])
                .expect("a source row");
            }
        }
        tx.commit().expect("committing");
    }
    let (clean, _) = clean_run(&d, &["load", "--batch", "500"]);
    let expected = clean.dump("target.db", "orders");
    campaigns(
        &d,
        &["load", "--batch", "500"],
        (10, 60),
        8,
        &mut rng,
        &|c: &Dir| {
            let n = if c.has_table("target.db", "_cutover_load") {
                c.int(
                    "target.db",
                    "SELECT coalesce(sum(rows), 0) FROM _cutover_load",
                )
            } else {
                0
            };
            assert_eq!(
                c.int("target.db", "SELECT count(*) FROM orders"),
                n,
                "the target holds rows its load checkpoint does not count"
            );
            n
        },
        &|c, history| {
            assert!(
                c.dump("target.db", "orders") == expected,
                "the target after kills differs from one clean load (seed {:#x}):\n{}",
                seed(),
                history.join("\n")
            );
            c.run(&["gate"], 0);
        },
    );
}
