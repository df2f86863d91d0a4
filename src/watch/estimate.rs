//! How long the rollback would take now: the entries still to replay at
//! the pace the last `replay --rehearse` or `replay` measured on this pair
//! of databases, plus the fence's fingerprint and the closing reconcile
//! for the tables' sizes. Both read every row: the fingerprint the
//! target's once, the reconcile both sides', at the rows per second the
//! measured reconcile read (the fingerprint's pace taken to be the same,
//! an assumption docs/watch.md states).

use serde::Serialize;

use crate::db::watch_state::Rate;

/// The estimate, and what it rests on.
#[derive(Clone, Debug, Serialize)]
pub struct Estimate {
    /// `None`: no replay or rehearsal has measured this pair yet.
    pub seconds: Option<f64>,
    /// Entries a replay would apply now.
    pub pending: i64,
    /// The target's rows in the spec's tables.
    pub target_rows: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apply_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconcile_seconds: Option<f64>,
    /// The measurement it rests on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_by: Option<Measured>,
}

/// A measured replay pace.
#[derive(Clone, Debug, Serialize)]
pub struct Measured {
    /// `rehearsal` or `replay`.
    pub kind: String,
    pub at: String,
    pub entries: i64,
    pub seconds: f64,
    pub rows: i64,
    pub reconcile_seconds: f64,
}

/// The estimate for `pending` entries and `target_rows` rows at `rate`.
pub fn estimate(rate: Option<&Rate>, pending: i64, target_rows: i64) -> Estimate {
    let mut e = Estimate {
        seconds: None,
        pending,
        target_rows,
        apply_seconds: None,
        fingerprint_seconds: None,
        reconcile_seconds: None,
        measured_by: None,
    };
    let Some(r) = rate else { return e };
    e.measured_by = Some(Measured {
        kind: r.kind.clone(),
        at: r.at.clone(),
        entries: r.entries,
        seconds: r.seconds,
        rows: r.rows,
        reconcile_seconds: r.reconcile_seconds,
    });
    let apply = match (pending, r.entries) {
        (0, _) => Some(0.0),
        (_, 0) => None,
        (p, n) => Some(p as f64 * r.seconds / n as f64),
    };
    let per_row = (r.rows > 0).then(|| r.reconcile_seconds / r.rows as f64);
    let (fingerprint, reconcile) = match (per_row, target_rows) {
        (_, 0) => (Some(0.0), Some(0.0)),
        (Some(s), rows) => (Some(rows as f64 * s), Some(2.0 * rows as f64 * s)),
        (None, _) => (None, None),
    };
    e.apply_seconds = apply;
    e.fingerprint_seconds = fingerprint;
    e.reconcile_seconds = reconcile;
    if let (Some(a), Some(f), Some(c)) = (apply, fingerprint, reconcile) {
        e.seconds = Some(a + f + c);
    }
    e
}

impl Estimate {
    /// The estimate in words, with what it rests on.
    pub fn text(&self) -> String {
        let Some(m) = &self.measured_by else {
            return format!(
                "unknown — run `cutover replay --rehearse` ({} entries to replay, {} target rows)",
                self.pending, self.target_rows
            );
        };
        let basis = format!(
            "{} of {} at {}: {} entries in {:.1} s, {} rows reconciled in {:.1} s",
            m.kind, "this pair", m.at, m.entries, m.seconds, m.rows, m.reconcile_seconds
        );
        match self.seconds {
            Some(s) => format!(
                "about {} ({} entries: {:.1} s, fingerprint {:.1} s, reconcile of {} target rows {:.1} s; measured by the {basis})",
                duration(s),
                self.pending,
                self.apply_seconds.unwrap_or(0.0),
                self.fingerprint_seconds.unwrap_or(0.0),
                self.target_rows,
                self.reconcile_seconds.unwrap_or(0.0),
            ),
            None => format!(
                "unknown — the {basis} measured too little to go by; run `cutover replay --rehearse` ({} entries to replay)",
                self.pending
            ),
        }
    }
}

/// Seconds as `42 s`, `3 min 5 s`, `2 h 10 min`.
pub fn duration(s: f64) -> String {
    let whole = s.ceil() as u64;
    match whole {
        0..=59 => format!("{whole} s"),
        60..=3599 => format!("{} min {} s", whole / 60, whole % 60),
        _ => format!("{} h {} min", whole / 3600, (whole % 3600) / 60),
    }
}
