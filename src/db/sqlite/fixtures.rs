//! Drill and test fixtures: SQL text run as it is.

use anyhow::{Context, Result};

use super::*;

impl Fixtures for Sqlite {
    /// Runs fixture SQL (drill set-up and the application's writes).
    fn execute_script(&self, sql: &str) -> Result<()> {
        self.conn
            .execute_batch(sql)
            .with_context(|| format!("running SQL on {}", self.location))
    }
}
