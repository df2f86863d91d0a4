//! Change feeds: the journal, or any upstream change source, as a JSON Lines
//! file (format in docs/feed.md), and the two commands that use one:
//! `journal export` writes the fenced journal as a feed, `apply` applies a
//! feed through the apply engine with the delivery contract.
//!
//! A feed is validated whole before anything is written, each rejection
//! naming line, position, key and field. Then it is applied one delivery at
//! a time, each delivery one transaction with its receipt, reading the file
//! again so memory holds one delivery, never the feed.
//!
//! This module is the feed itself: [`line`] (one line parsed and validated
//! against the spec, or an entry of the journal written as one) and
//! [`file`] (a feed file read line by line, and validated whole: deliveries
//! contiguous and single-feed, positions consecutive).

pub mod file;
pub mod line;

pub use file::{DeliveryInfo, Validated, read_lines, validate};
pub use line::{Line, Rejection, entry_line, parse_line};
