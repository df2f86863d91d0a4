//! Progress on a terminal for the operations that can run long: rows done,
//! rate and ETA on stderr, through indicatif. Off when stderr is not a
//! terminal or with `--quiet`, so pipes, logs and tests see nothing.
//!
//! Callers report per block (a thousand rows or so), never per row, so the
//! bar costs no throughput.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

static QUIET: AtomicBool = AtomicBool::new(false);

/// `--quiet`: no progress, whatever stderr is.
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether a bar would be seen at all; lets callers skip work (a row count
/// for the ETA) that only a visible bar needs.
pub fn visible() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A bar, or nothing when it would not be seen.
pub struct Bar(Option<ProgressBar>);

impl Bar {
    /// `total`: the rows (or entries) expected, when known.
    pub fn new(label: &str, total: Option<u64>) -> Bar {
        if !visible() {
            return Bar(None);
        }
        let bar = match total {
            Some(n) => {
                ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr_with_hz(4))
                    .with_style(
                    ProgressStyle::with_template(
                        "{msg:>10} [{bar:30}] {human_pos}/{human_len} rows  {per_sec}  eta {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                )
            }
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4))
                .with_style(
                    ProgressStyle::with_template("{msg:>10} {spinner} {human_pos} rows  {per_sec}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                ),
        };
        bar.set_message(label.to_string());
        Bar(Some(bar))
    }

    /// No bar: work in the background, beside one that is shown.
    pub fn hidden() -> Bar {
        Bar(None)
    }

    pub fn add(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}
