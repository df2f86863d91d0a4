//! The connection to the server: a `tokio-postgres` client driven by a
//! single-threaded runtime of its own, behind the blocking calls the engine
//! makes. A COPY is read a run of pieces (up to 256 KiB) per `block_on`, so
//! reading a table costs no runtime entry per row (the server sends a
//! message a row), and what is done with the rows runs outside the runtime.
//!
//! It is public as the crate's one PostgreSQL client: the integration tests
//! and the benches open their own connections through it (each with its own
//! runtime), so one client stack is built and measured. Rows come back as
//! `tokio-postgres` gives them, untouched by [`super::types`]: a caller that
//! reads values through it reads them independently of the engine's
//! decoding.

use std::pin::Pin;

use anyhow::Result;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::runtime::Runtime;
use tokio_postgres::types::ToSql;
use tokio_postgres::{CopyInSink, Error, Row, SimpleQueryMessage, Statement, ToStatement};

use super::tls::{MakeRustls, Settings};

/// How long closing a connection waits for it to end cleanly.
const GOODBYE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a connection could not be made.
#[derive(Debug)]
pub enum Connect {
    /// Before reaching the server: the runtime, or the TLS settings' files.
    Setup(anyhow::Error),
    /// The server, the network or the handshake.
    Server(Error),
}

/// One connection and the runtime that drives it.
pub struct Client {
    runtime: Runtime,
    /// `None` only while it is dropped.
    inner: Option<tokio_postgres::Client>,
    /// The task that runs the connection.
    connection: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Client {
    /// Ends the session as the server expects (a Terminate message), not
    /// by closing the socket under it; a server that does not answer
    /// within a few seconds is left to notice the closed socket.
    fn drop(&mut self) {
        self.inner = None;
        if let Some(task) = self.connection.take() {
            // The timer is made inside the runtime, which it needs.
            let _ = self
                .runtime
                .block_on(async { tokio::time::timeout(GOODBYE, task).await });
        }
    }
}

impl Client {
    /// Connects with `config` and TLS as `tls` says; the connection runs on
    /// the client's runtime whenever a call waits on it. Under
    /// `sslmode=prefer` a handshake that fails is tried again without TLS,
    /// as libpq does.
    pub fn connect(config: &tokio_postgres::Config, tls: &Settings) -> Result<Client, Connect> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                Connect::Setup(
                    anyhow::Error::from(e).context("starting the PostgreSQL client's runtime"),
                )
            })?;
        let make = MakeRustls::new(tls.client_config().map_err(Connect::Setup)?);
        let connected = match runtime.block_on(config.connect(make.clone())) {
            Err(e)
                if config.get_ssl_mode() == tokio_postgres::config::SslMode::Prefer
                    && super::tls::failure(&e, tls).is_some() =>
            {
                let mut plain = config.clone();
                plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
                runtime.block_on(plain.connect(make))
            }
            r => r,
        };
        let (inner, connection) = connected.map_err(Connect::Server)?;
        // The connection ends with an error when the server goes away; the
        // next call reports it.
        let connection = runtime.spawn(async move {
            let _ = connection.await;
        });
        Ok(Client {
            runtime,
            inner: Some(inner),
            connection: Some(connection),
        })
    }

    fn inner(&self) -> &tokio_postgres::Client {
        self.inner
            .as_ref()
            .expect("the client is only taken when it is dropped")
    }

    /// Runs `sql`, one or more statements separated by semicolons, through
    /// the simple query protocol; any rows are dropped.
    pub fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.runtime.block_on(self.inner().batch_execute(sql))
    }

    /// Runs `sql` through the simple query protocol: every value comes back
    /// as the server's text (or NULL), with a message per row and one per
    /// statement's end.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        self.runtime.block_on(self.inner().simple_query(sql))
    }

    /// Prepares `sql` on this connection; its columns' types are the
    /// statement's.
    pub fn prepare(&mut self, sql: &str) -> Result<Statement, Error> {
        self.runtime.block_on(self.inner().prepare(sql))
    }

    /// Runs a statement with `params` bound; the number of rows it changed.
    pub fn execute<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        self.runtime
            .block_on(self.inner().execute(statement, params))
    }

    /// Runs a statement with `params` bound; every row it returns.
    pub fn query<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        self.runtime.block_on(self.inner().query(statement, params))
    }

    /// Runs a statement that must return exactly one row.
    pub fn query_one<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        self.runtime
            .block_on(self.inner().query_one(statement, params))
    }

    /// Runs a statement that returns at most one row.
    pub fn query_opt<T: ?Sized + ToStatement>(
        &mut self,
        statement: &T,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        self.runtime
            .block_on(self.inner().query_opt(statement, params))
    }

    /// Starts `COPY … FROM STDIN`: the data is sent through the returned
    /// [`CopyIn`], which [`CopyIn::finish`] ends.
    pub fn copy_in(&mut self, statement: &str) -> Result<CopyIn<'_>, Error> {
        let sink = self.runtime.block_on(self.inner().copy_in(statement))?;
        Ok(CopyIn {
            runtime: &self.runtime,
            sink: Box::pin(sink),
        })
    }

    /// Runs `COPY … TO STDOUT` and hands each piece of data the server sends
    /// to `f` as it arrives, until the end or until `f` returns `false`
    /// (the rest is then read and dropped). `f` runs outside the runtime,
    /// one piece awaited at a time: it may itself use a client (sync writes
    /// the target's batch from it), which a call inside `block_on` could
    /// not.
    pub fn copy_out(
        &mut self,
        statement: &str,
        f: &mut dyn FnMut(&[u8]) -> Result<bool>,
    ) -> Result<()> {
        // Pieces are awaited a run at a time, up to this many bytes, so the
        // runtime is entered once per run, not once per row.
        const RUN_BYTES: usize = 256 * 1024;
        let inner = self.inner();
        let stream = self.runtime.block_on(inner.copy_out(statement))?;
        let mut stream = std::pin::pin!(stream);
        let mut run: Vec<Bytes> = Vec::new();
        loop {
            let ended = self.runtime.block_on(async {
                let mut bytes = 0;
                while bytes < RUN_BYTES {
                    match stream.next().await {
                        Some(piece) => {
                            let piece = piece?;
                            bytes += piece.len();
                            run.push(piece);
                        }
                        None => return Ok::<bool, Error>(true),
                    }
                }
                Ok(false)
            })?;
            for piece in run.drain(..) {
                if !f(&piece)? {
                    return Ok(());
                }
            }
            if ended {
                return Ok(());
            }
        }
    }
}

/// A `COPY … FROM STDIN` under way.
pub struct CopyIn<'a> {
    runtime: &'a Runtime,
    sink: Pin<Box<CopyInSink<Bytes>>>,
}

impl CopyIn<'_> {
    /// Sends `data` (a part of the COPY's input).
    pub fn write_all(&mut self, data: &[u8]) -> Result<(), Error> {
        self.runtime
            .block_on(self.sink.send(Bytes::copy_from_slice(data)))
    }

    /// Ends the COPY; the number of rows the server wrote.
    pub fn finish(mut self) -> Result<u64, Error> {
        self.runtime.block_on(self.sink.as_mut().finish())
    }
}
