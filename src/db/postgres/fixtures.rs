//! What drills and tests need of a database they built: fixture SQL run
//! as it is.

use anyhow::{Context, Result};

use super::Postgres;
use crate::db::Fixtures;

impl Fixtures for Postgres {
    /// Runs SQL text as it is: several statements, no parameters. A `SET`
    /// in it outlives it; fixtures that need one use `SET LOCAL`.
    fn execute_script(&self, sql: &str) -> Result<()> {
        self.client()?
            .batch_execute(sql)
            .with_context(|| format!("running SQL on {}", self.shown))
    }
}
