//! What the benches share: running a child process while reading its peak
//! memory from /proc, and a plain connection to a PostgreSQL server through
//! the crate's own client.

#![allow(dead_code, reason = "each bench uses a different part")]

use std::process::Child;
use std::str::FromStr;
use std::time::Duration;

use cutover::db::postgres::client::Client;
use cutover::db::postgres::tls::{Settings, SslMode};

/// A client of `url` without TLS (the bench's server is on this machine),
/// or why not.
pub fn try_connect(url: &str) -> Result<Client, String> {
    let mut config = tokio_postgres::Config::from_str(url).map_err(|e| e.to_string())?;
    config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    let plain = Settings {
        mode: SslMode::Disable,
        roots: None,
        client: None,
        sni: true,
    };
    Client::connect(&config, &plain).map_err(|e| format!("{e:?}"))
}

/// A client of `url` without TLS; panics when there is none.
pub fn connect(url: &str) -> Client {
    try_connect(url).unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Waits for `child`, reading its peak memory (KiB, VmHWM) from /proc while
/// it runs; its exit code and that peak.
pub fn watch(child: &mut Child) -> (i32, Option<u64>) {
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = None;
    loop {
        if let Ok(s) = std::fs::read_to_string(&status_file)
            && let Some(kb) = s
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = Some(peak.map_or(kb, |p: u64| p.max(kb)));
        }
        if let Some(status) = child.try_wait().expect("waiting") {
            return (status.code().unwrap_or(-1), peak);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The pace the last replay in `dir` recorded in the state file beside
/// its spec `spec.toml`: seconds applying entries, and seconds of its
/// closing reconciliation (the proof, inside its transaction).
pub fn measured_pace(dir: &std::path::Path) -> (f64, f64) {
    let state = cutover::db::watch_state::WatchState::open(&dir.join("spec.watch.db"))
        .expect("the state file beside the spec");
    let rate = state
        .latest_rate()
        .expect("the state file's rates")
        .expect("the replay recorded its pace");
    (rate.seconds, rate.reconcile_seconds)
}
