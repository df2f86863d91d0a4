//! Drill and test fixtures: SQL text run as it is, several statements in
//! one script (the server splits them; a trigger's `BEGIN … END` body
//! needs no client-side delimiter).

use anyhow::Result;
use mysql::prelude::Queryable;

use super::MySql;
use crate::db::Fixtures;

impl Fixtures for MySql {
    fn execute_script(&self, sql: &str) -> Result<()> {
        let mut conn = self.conn()?;
        let mut results = conn
            .query_iter(sql)
            .map_err(|e| self.failed("running SQL", &e))?;
        // Every result set is read: an error in a later statement of the
        // script comes with its own.
        while let Some(set) = results.iter() {
            for row in set {
                row.map_err(|e| self.failed("running SQL", &e))?;
            }
        }
        Ok(())
    }
}
