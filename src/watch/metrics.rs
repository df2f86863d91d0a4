//! The on-call's metrics: one pass's figures in the Prometheus text
//! exposition format, for node_exporter's textfile collector, replaced
//! atomically (written beside, then renamed) so the collector never reads
//! half a file.

use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// What a pass exposes.
#[derive(Clone, Debug, Serialize)]
pub struct Metrics {
    /// The spec, as the metrics' `spec` label.
    pub spec: String,
    pub entries_journaled: i64,
    pub entries_checked: i64,
    pub entries_unchecked: i64,
    pub entries_irreversible: i64,
    /// Seconds since the pass before this one (0 for the first).
    pub seconds_since_previous_pass: f64,
    /// When this pass ran, in seconds since the epoch.
    pub last_pass_timestamp_seconds: f64,
    /// `None`: unknown until a replay or rehearsal measured this pair.
    pub estimated_rollback_seconds: Option<f64>,
    pub fence_on: bool,
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The metrics in the text exposition format (version 0.0.4).
pub fn exposition(m: &Metrics) -> String {
    let spec = label(&m.spec);
    let gauges: [(&str, &str, f64); 8] = [
        (
            "cutover_journal_entries",
            "Journal entries written to the target since the switch.",
            m.entries_journaled as f64,
        ),
        (
            "cutover_watch_entries_checked",
            "Journal entries watch has checked for the way back.",
            m.entries_checked as f64,
        ),
        (
            "cutover_watch_entries_unchecked",
            "Journal entries written since the last watch pass read the journal.",
            m.entries_unchecked as f64,
        ),
        (
            "cutover_watch_entries_irreversible",
            "Journal entries that cannot go back to the source as things stand.",
            m.entries_irreversible as f64,
        ),
        (
            "cutover_watch_seconds_since_previous_pass",
            "Seconds between this watch pass and the one before it.",
            m.seconds_since_previous_pass,
        ),
        (
            "cutover_watch_last_pass_timestamp_seconds",
            "When the last watch pass ran, in seconds since the epoch.",
            m.last_pass_timestamp_seconds,
        ),
        (
            "cutover_rollback_estimated_seconds",
            "How long the rollback would take now (NaN: unknown until replay --rehearse).",
            m.estimated_rollback_seconds.unwrap_or(f64::NAN),
        ),
        (
            "cutover_fence_on",
            "1 when the target is fenced, 0 when it is open.",
            if m.fence_on { 1.0 } else { 0.0 },
        ),
    ];
    let mut out = String::new();
    for (name, help, v) in gauges {
        let v = if v.is_nan() {
            "NaN".to_string()
        } else {
            format!("{v}")
        };
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{spec=\"{spec}\"}} {v}\n"
        ));
    }
    out
}

/// Writes the metrics to `path`, replacing what is there in one rename.
pub fn write(path: &Path, m: &Metrics) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".cutover-metrics")
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "creating a temporary file in {} for the metrics",
                dir.display()
            )
        })?;
    std::io::Write::write_all(&mut tmp, exposition(m).as_bytes())?;
    tmp.as_file().sync_all()?;
    // The collector reads files of its own user; a temporary file is
    // private by default.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path)
        .with_context(|| format!("writing metrics {}", path.display()))?;
    Ok(())
}
