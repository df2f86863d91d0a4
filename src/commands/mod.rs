//! The commands, one module each: what `cutover <command>` does, from an
//! opened spec to a typed report. They use the layers below them (spec,
//! schema, reconcile, apply, db) and, where one command is a step of another
//! (the gate's quality checks are sync's, replay ends with the gate's
//! reconcile), each other.

pub mod check;
pub mod drill;
pub mod feed;
pub mod fence;
pub mod gate;
pub mod init;
pub mod journal;
pub mod load;
pub mod replay;
pub mod status;
pub mod sync;
