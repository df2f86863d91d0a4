//! `cutover watch`: after the switch, a pass over the journal entries
//! written since the last one, each checked as replay would check it,
//! without writing to either database (`crate::watch`, docs/watch.md).
//! One pass for cron; `--follow` a pass every interval until interrupted.
//! Exit 0: every entry so far can go back; 1: at least one cannot; 2: it
//! could not check.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;

use crate::report::{self, Report, Verdict};
use crate::spec::Spec;
use crate::watch::metrics::{self, Metrics};
use crate::watch::{Pass, pass};

/// What a pass of `cutover watch` found.
#[derive(Debug, Serialize)]
pub struct WatchReport {
    /// `pass`: every entry so far can go back.
    pub verdict: Verdict,
    #[serde(flatten)]
    pub pass: Pass,
    /// The metrics written, when `--metrics` named a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    /// How many findings the text lists.
    #[serde(skip)]
    pub max_shown: usize,
}

impl Report for WatchReport {
    fn holds(&self) -> bool {
        self.verdict.holds()
    }
}

/// What `cutover watch` is asked.
pub struct Options<'a> {
    pub follow: bool,
    pub interval: Duration,
    pub metrics: Option<&'a Path>,
    pub max_shown: usize,
}

/// One pass, or with `follow` a pass every interval until interrupted:
/// each pass but the last is handed to `shown` as it ends; the last is
/// returned.
pub fn run(
    spec: &Spec,
    opts: &Options<'_>,
    shown: &mut dyn FnMut(&WatchReport) -> Result<()>,
) -> Result<WatchReport> {
    let stop = match opts.follow {
        true => Some(Interrupt::new()?),
        false => None,
    };
    loop {
        let rep = once(spec, opts)?;
        let Some(stop) = &stop else { return Ok(rep) };
        if stop.wait(opts.interval)? {
            return Ok(rep);
        }
        shown(&rep)?;
    }
}

/// One pass, its metrics written.
fn once(spec: &Spec, opts: &Options<'_>) -> Result<WatchReport> {
    let pass = pass(spec)?;
    let metrics = opts.metrics.map(|_| Metrics {
        spec: spec.path.display().to_string(),
        entries_journaled: pass.entries,
        entries_checked: pass.checked,
        entries_unchecked: pass.unchecked,
        entries_irreversible: pass.irreversible,
        seconds_since_previous_pass: pass.seconds_since_previous.unwrap_or(0.0),
        last_pass_timestamp_seconds: pass.at_epoch,
        estimated_rollback_seconds: pass.estimate.seconds,
        fence_on: pass.fenced,
    });
    if let (Some(path), Some(m)) = (opts.metrics, &metrics) {
        metrics::write(path, m)?;
    }
    Ok(WatchReport {
        verdict: Verdict::of(pass.irreversible == 0),
        pass,
        metrics,
        max_shown: opts.max_shown,
    })
}

/// Ctrl-C and SIGTERM, caught from the start so that a pass under way
/// finishes (and its state commits) before `--follow` ends.
struct Interrupt {
    rt: tokio::runtime::Runtime,
    #[cfg(unix)]
    signals: std::cell::RefCell<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Interrupt {
    fn new() -> Result<Interrupt> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        #[cfg(unix)]
        let signals = {
            use tokio::signal::unix::{SignalKind, signal};
            let _guard = rt.enter();
            std::cell::RefCell::new((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
            ))
        };
        Ok(Interrupt {
            rt,
            #[cfg(unix)]
            signals,
        })
    }

    /// Waits `interval`; `true` when interrupted (now or during the pass).
    fn wait(&self, interval: Duration) -> Result<bool> {
        use futures_util::future::{Either, select};
        #[cfg(unix)]
        {
            let mut s = self.signals.borrow_mut();
            let (int, term) = &mut *s;
            // The timer is made inside the runtime, which drives it.
            let r = self.rt.block_on(async {
                let signalled = select(Box::pin(int.recv()), Box::pin(term.recv()));
                select(Box::pin(tokio::time::sleep(interval)), signalled).await
            });
            Ok(matches!(r, Either::Right(_)))
        }
        #[cfg(not(unix))]
        {
            let r = self.rt.block_on(async {
                select(
                    Box::pin(tokio::time::sleep(interval)),
                    Box::pin(tokio::signal::ctrl_c()),
                )
                .await
            });
            Ok(matches!(r, Either::Right(_)))
        }
    }
}

/// The pass as text: what it read, each finding with its fix, the
/// estimate, the verdict.
pub fn render(rep: &WatchReport) -> String {
    let p = &rep.pass;
    let mut text = report::pairs(&[
        ("journal", format!("{} ({} entries)", p.journal, p.entries)),
        (
            "pass",
            format!(
                "at {}, read {} new entries in {:.2} s, re-checked {} open{}",
                p.at,
                p.read,
                p.seconds,
                p.rechecked,
                p.started_over
                    .as_ref()
                    .map_or(String::new(), |w| format!("; checked from the start: {w}"))
            ),
        ),
        (
            "checked",
            format!("{} of {} (up to seq {})", p.checked, p.entries, p.position),
        ),
        ("irreversible", p.irreversible.to_string()),
        ("rollback", p.estimate.text()),
        ("fence", if p.fenced { "on".into() } else { "off".into() }),
    ]);
    if !p.findings.is_empty() {
        text.push_str(&format!(
            "\nentries that cannot go back (first {} of {} findings)\n",
            p.findings.len().min(rep.max_shown),
            p.findings.len()
        ));
        text.push_str(&report::table(
            &["seq", "table", "key", "column", "value", "why", "fix"],
            p.findings.iter().take(rep.max_shown).map(|f| {
                vec![
                    f.seq.to_string(),
                    f.table.clone(),
                    f.key.to_string(),
                    f.column.clone().unwrap_or_default(),
                    f.value.clone().unwrap_or_default(),
                    f.reason.clone(),
                    f.fix.shown(),
                ]
            }),
        ));
        text.push('\n');
    }
    if !p.watched.is_empty() {
        text.push_str("\nhazards the spec accepts (source_limit = \"watch\"): writes that crossed each, so far\n");
        text.push_str(&report::table(
            &["table", "source column", "hazard", "writes"],
            p.watched.iter().map(|w| {
                vec![
                    w.table.clone(),
                    w.column.clone(),
                    w.kinds
                        .iter()
                        .map(|k| k.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    w.crossed.to_string(),
                ]
            }),
        ));
        text.push('\n');
    }
    if !p.unjudged.is_empty() {
        text.push_str(&format!(
            "\nonly a write judges these ({}):\n",
            match &p.rehearsed {
                Some(r) => format!(
                    "last replay --rehearse at {}: {}, up to seq {}; {} entries since",
                    r.at,
                    r.verdict.to_uppercase(),
                    r.boundary,
                    r.entries_since
                ),
                None => "never rehearsed: run cutover replay --rehearse".into(),
            }
        ));
        text.push_str(&report::table(
            &["source table", "what"],
            p.unjudged
                .iter()
                .map(|u| vec![u.table.clone(), u.what.clone()]),
        ));
        text.push('\n');
    }
    text.push_str(&match rep.verdict {
        Verdict::Pass => format!(
            "watch: PASS; every entry so far ({}) can go back to the source\n",
            p.checked
        ),
        Verdict::Fail => format!(
            "watch: FAIL; {} entries cannot go back as things stand: make each fix above, then run cutover watch again\n",
            p.irreversible
        ),
    });
    text
}
