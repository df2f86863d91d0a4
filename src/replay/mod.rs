//! The rollback's own logic, which `cutover replay` runs: the run itself,
//! its mode and its steps ([`Replayer`], [`steps`], [`rehearse`]) and what it
//! reports ([`report`]); the journal's
//! entries made into changes, in journal order but for swapped keys folded
//! ([`plan`]); what the pending entries would do, for a dry run
//! ([`pending`]); foreign keys checked and the source's foreign-key actions
//! refused before writing ([`foreign_keys`]); the source's triggers and
//! rules the role cannot hold refused too ([`policy`]); the id generators carried
//! past the target's ([`sequences`]); what a closing reconciliation's
//! differences trace to ([`causes`]); and what a conflict's evidence shows,
//! in words an operator acts on ([`conflicts`]).

pub mod causes;
pub mod conflicts;
pub mod foreign_keys;
pub mod pending;
pub mod plan;
pub mod policy;
pub mod rehearse;
mod replayer;
pub mod report;
pub mod sequences;
mod steps;

pub use causes::{causes, unjournaled};
pub use conflicts::{cause, conflict_text};
pub use foreign_keys::{foreign_key_violations, refused_by_actions, violations_since};
pub use pending::{Effect, Plan, StaleKey, plan};
pub use plan::{bridge, fold, record_keys, to_change};
pub use policy::refuse_unheld;
pub use rehearse::Rehearsal;
pub use replayer::{Mode, Ran, Replayer};
pub use report::{DryRunReport, DryRunTried, Replay, ReplayReport};
pub use sequences::carry_sequences;
