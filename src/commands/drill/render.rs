//! The drill's closing lines as text.

use super::{DrillReport, DrillVerdict, Transcript, crash};

/// The drill's closing lines (its steps are printed as they run).
pub fn render(rep: &DrillReport) -> String {
    let mut text = String::from("\n");
    let stopped = rep.stopped_after.map(|s| {
        let name = clap::ValueEnum::to_possible_value(&s)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        format!("drill: stopped after step '{name}' as asked\n")
    });
    match &rep.transcript {
        Transcript::Orders { .. } => {
            text.push_str(match rep.verdict {
                DrillVerdict::Pass if rep.stopped_after.is_some() => {
                    "drill: PASS; every step run so far held\n"
                }
                DrillVerdict::Pass => "drill: PASS; every step of the runbook held\n",
                DrillVerdict::Blocked => {
                    "drill: cutover BLOCKED by the gate, as the rehearsal intends (exit 1)\n"
                }
                DrillVerdict::Fail => {
                    "drill: FAIL; a step did not do what the runbook says (see above)\n"
                }
            });
            text.push_str(stopped.as_deref().unwrap_or_default());
        }
        Transcript::Customers {
            customers: None, ..
        } => text.push_str(stopped.as_deref().unwrap_or_default()),
        Transcript::Customers {
            customers: Some(n), ..
        } => {
            text.push_str(&format!("customers in the target: {n}\n"));
            text.push_str(if rep.verdict == DrillVerdict::Pass {
                "drill: PASS; every sync did what the runbook says\n"
            } else {
                "drill: FAIL; a sync did not do what the runbook says (see above)\n"
            });
        }
        Transcript::Invoices { .. } => text.push_str(if rep.verdict == DrillVerdict::Pass {
            "drill: PASS; every delivery did what the apply contract says\n"
        } else {
            "drill: FAIL; a delivery did not do what the apply contract says (see above)\n"
        }),
        Transcript::CrashMatrix { cells } => {
            text.push_str(&crash::table(cells));
            text.push_str(if rep.verdict == DrillVerdict::Pass {
                "\ncrash matrix: PASS\n"
            } else {
                "\ncrash matrix: FAIL\n"
            });
        }
    }
    if let Some(v) = &rep.verify {
        if v.differences.is_empty() {
            text.push_str("verify: the transcript matches the expected contract\n");
        } else {
            text.push_str(&format!(
                "verify: {} differences from the expected contract:\n",
                v.differences.len()
            ));
            for d in &v.differences {
                text.push_str(&format!("  {d}\n"));
            }
        }
    }
    if let Some(dir) = &rep.kept {
        text.push_str(&format!(
            "drill: spec and databases kept in {}\n",
            dir.display()
        ));
    }
    text
}
