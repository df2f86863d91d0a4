//! What the benches share: running a child process while reading its peak
//! memory from /proc.

use std::process::Child;
use std::time::Duration;

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
