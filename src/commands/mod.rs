//! The commands, one module each: what `cutover <command>` does, from an
//! opened spec to a typed report. A command opens what it needs, calls the
//! domain modules (journal, fence, replay, watch, feed, survey, provenance,
//! reconcile) and the layers below them, and renders its report. No command
//! imports another: what two of them share lives below them
//! (`tests/engine_seam.rs` keeps it so). The drill, which rehearses the
//! runbook, runs the commands themselves.

pub mod apply;
pub mod check;
pub mod drill;
pub mod fence;
pub mod gate;
pub mod init;
pub mod journal;
pub mod load;
pub mod replay;
pub mod status;
pub mod sync;
pub mod watch;
