//! [`Fence`] on MySQL and MariaDB: not yet. A fence on MySQL needs BEFORE
//! triggers that `SIGNAL SQLSTATE '45000'`, installed after the writers in
//! flight are drained under a metadata lock, and every route around them
//! (`TRUNCATE`, `ALTER TABLE`, `RENAME TABLE`, cascades) refused or
//! detected; until they are built every method refuses, naming what to
//! use instead.

use anyhow::{Result, bail};

use super::MySql;
use crate::db::{Fence, Probe};

impl MySql {
    fn no_fence<T>(&self) -> Result<T> {
        bail!(
            "{}: {}",
            self.shown(),
            super::not_yet("the write fence (fence on, off, status) on a MySQL target")
        )
    }
}

impl Fence for MySql {
    fn drain_writers(&self, _tables: &[&str]) -> Result<()> {
        self.no_fence()
    }

    fn change_token(&self) -> Result<i64> {
        self.no_fence()
    }

    fn install_fence_triggers(&self, _table: &str, _message: &str) -> Result<()> {
        self.no_fence()
    }

    fn install_fence_guard(
        &self,
        _row_message: &str,
        _ddl_message: &str,
    ) -> Result<Option<String>> {
        self.no_fence()
    }

    fn remove_fence(&self, _tables: &[&str], _keep_functions: Option<&[String]>) -> Result<()> {
        self.no_fence()
    }

    fn probe_writes(&self, _table: &str) -> Result<Vec<Probe>> {
        self.no_fence()
    }
}
