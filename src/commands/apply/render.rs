//! `cutover apply`'s report as text.

use super::ApplyReport;
use crate::report::{self, BatchStatus, Report};

/// The report as text: each delivery and what became of it, the
/// checkpoints; or every rejected line of an invalid feed.
pub fn render(rep: &ApplyReport) -> String {
    let mut text = String::new();
    if !rep.rejected_lines.is_empty() {
        text.push_str(&format!(
            "feed {} is invalid; nothing was written:\n",
            rep.feed_file
        ));
        for r in &rep.rejected_lines {
            text.push_str(&format!("  {r}\n"));
        }
        text.push_str("fix the feed (format: docs/feed.md) and apply it again\n");
        return text;
    }
    text.push_str(&report::table(
        &[
            "feed",
            "delivery",
            "positions",
            "status",
            "applied",
            "duplicate",
            "stale",
        ],
        rep.deliveries.iter().map(|d| {
            vec![
                d.feed.clone(),
                d.delivery.clone(),
                format!("{}..{}", d.positions[0], d.positions[1]),
                report::name(&d.status),
                d.applied.to_string(),
                d.duplicate.to_string(),
                d.stale.to_string(),
            ]
        }),
    ));
    text.push('\n');
    for d in rep
        .deliveries
        .iter()
        .filter(|d| d.status == BatchStatus::Rejected)
    {
        text.push_str(&format!(
            "delivery '{}' REJECTED: {}\n",
            d.delivery,
            d.reason.as_deref().unwrap_or("")
        ));
    }
    for (f, at) in &rep.checkpoints {
        text.push_str(&format!("checkpoint {f}: position {at}\n"));
    }
    text.push_str(if rep.holds() {
        "apply: done\n"
    } else {
        "apply: FAIL; later deliveries were not attempted\n"
    });
    text
}
