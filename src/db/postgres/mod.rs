//! PostgreSQL: the engine's pieces, one concept per file: [`url`] (the
//! spec's URL) and [`types`] (column types to values and back, with
//! [`numeric`] and [`datetime`]).

pub mod datetime;
pub mod numeric;
pub mod types;
pub mod url;

pub use url::{PgUrl, is_postgres};
