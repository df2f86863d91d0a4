//! TLS for every PostgreSQL connection, in pure Rust (rustls with the
//! `ring` provider: nothing to install, no OpenSSL), with libpq's
//! `sslmode`s:
//!
//! | mode | encrypts | checks the certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (default) | when the server accepts TLS; plaintext when it refuses it or the handshake fails | no |
//! | `require` | always | no; with a root certificate file (`sslrootcert`, or `~/.postgresql/root.crt` present) as `verify-ca`, as libpq does |
//! | `verify-ca` | always | its chain up to `sslrootcert` |
//! | `verify-full` | always | its chain, and that it names the host |
//!
//! The host name is sent as SNI (never an IP address, and not with
//! `sslsni=0`); `verify-full` checks it against the certificate's subject
//! alternative names (DNS names, or IP addresses for an IP host). A Unix
//! socket is never encrypted (the server refuses TLS there; libpq does not
//! ask). [`failure`] turns a failed handshake into one sentence.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result, bail};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn parse(s: &str) -> Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => bail!(
                "sslmode=allow is not supported (it tries plaintext first): use prefer, or require"
            ),
            other => bail!(
                "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
            ),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The certificates a server's chain must end at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Roots {
    /// A PEM file of CA certificates.
    File(PathBuf),
    /// The platform's trusted roots (`sslrootcert=system`).
    System,
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::File(p) => write!(f, "sslrootcert {}", p.display()),
            Roots::System => f.write_str("the system's trusted roots (sslrootcert=system)"),
        }
    }
}

/// How a connection uses TLS, once the URL and the environment are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub mode: SslMode,
    /// The roots to verify against: present for `verify-ca`, `verify-full`,
    /// and `require` with a root certificate file.
    pub roots: Option<Roots>,
    /// The client's certificate and key, when it presents one.
    pub client: Option<(PathBuf, PathBuf)>,
    /// Whether the host name goes out as SNI (`sslsni`, default on).
    pub sni: bool,
}

/// What the server's certificate is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

impl Settings {
    pub fn check(&self) -> Check {
        match (self.mode, &self.roots) {
            (SslMode::VerifyFull, _) => Check::ChainAndName,
            (SslMode::VerifyCa, _) | (SslMode::Require, Some(_)) => Check::Chain,
            _ => Check::Nothing,
        }
    }

    /// The mode as messages name it: `verify-ca`, or `require (verified as
    /// verify-ca: a root certificate is given)`.
    pub fn shown(&self) -> String {
        match (self.mode, self.check()) {
            (SslMode::Require, Check::Chain) => {
                "require, verified as verify-ca (a root certificate is given)".to_string()
            }
            (m, _) => m.name().to_string(),
        }
    }

    /// The rustls configuration these settings ask for.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let inner = match &self.roots {
            Some(roots) if self.check() != Check::Nothing => {
                let store = Arc::new(root_store(roots)?);
                Some(
                    WebPkiServerVerifier::builder_with_provider(store, provider.clone())
                        .build()
                        .with_context(|| format!("using {roots}"))?,
                )
            }
            _ => None,
        };
        let verifier = Arc::new(Verifier {
            check: self.check(),
            inner,
            provider: provider.clone(),
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("setting up TLS")?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match &self.client {
            Some((cert, key)) => {
                let chain = certificates(cert, "sslcert")?;
                let key = private_key(key)?;
                builder.with_client_auth_cert(chain, key).with_context(|| {
                    format!(
                        "sslcert {} and sslkey {} do not make a client certificate",
                        cert.display(),
                        key_path_shown(&self.client)
                    )
                })?
            }
            None => builder.with_no_client_auth(),
        };
        config.enable_sni = self.sni;
        Ok(Arc::new(config))
    }
}

fn key_path_shown(client: &Option<(PathBuf, PathBuf)>) -> String {
    client
        .as_ref()
        .map_or(String::new(), |(_, k)| k.display().to_string())
}

/// The certificates of a PEM file; at least one.
fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        bail!(
            "{what} {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        );
    }
    Ok(certs)
}

/// The client's private key, refused where others may read it (libpq's
/// rule: `0600` or less, or `0640` or less when root owns it).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("reading sslkey {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mode = meta.permissions().mode();
        let allowed = if meta.uid() == 0 { 0o037 } else { 0o077 };
        if mode & allowed != 0 {
            bail!(
                "sslkey {} has group or world access (mode {:04o}); it must be u=rw (0600) or less (chmod 0600 {})",
                path.display(),
                mode & 0o7777,
                path.display()
            );
        }
    }
    let _ = meta;
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        anyhow::anyhow!(
            "sslkey {}: no unencrypted PEM private key ({e}); an encrypted key must be decrypted first (openssl pkey -in KEY -out KEY.plain)",
            path.display()
        )
    })
}

fn root_store(roots: &Roots) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::File(path) => {
            for cert in certificates(path, "sslrootcert")? {
                store
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("sslrootcert {}: {e}", path.display()))?;
            }
        }
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                bail!(
                    "sslrootcert=system: no trusted root certificates found on this machine{}",
                    found
                        .errors
                        .first()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
            }
        }
    }
    Ok(store)
}

/// Checks the server's certificate as far as the mode asks; the handshake's
/// own signatures are always checked.
#[derive(Debug)]
struct Verifier {
    check: Check,
    inner: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(inner) = &self.inner else {
            return Ok(ServerCertVerified::assertion());
        };
        let r =
            inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match (self.check, r) {
            // The chain is checked before the name: a name error means the
            // chain held, which is all verify-ca asks.
            (
                Check::Chain,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )),
            ) => Ok(ServerCertVerified::assertion()),
            (_, r) => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The connector `tokio-postgres` asks for a TLS session, per host.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl MakeRustls {
    pub fn new(config: Arc<ClientConfig>) -> MakeRustls {
        MakeRustls { config }
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = rustls::pki_types::InvalidDnsNameError;

    /// Asked for every host, also those no handshake is made with (a Unix
    /// socket, `sslmode=disable`): a host TLS cannot name fails only when
    /// a handshake is tried.
    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, Self::Error> {
        Ok(Connect {
            config: self.config.clone(),
            name: ServerName::try_from(domain.to_string()),
        })
    }
}

/// One handshake with one host.
pub struct Connect {
    config: Arc<ClientConfig>,
    name: Result<ServerName<'static>, rustls::pki_types::InvalidDnsNameError>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Stream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move {
            let name = self
                .name
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            connector.connect(name, stream).await.map(Stream)
        })
    }
}

/// An encrypted connection.
pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for Stream<S> {
    /// No channel binding: SCRAM authenticates without it
    /// (`channel_binding=prefer`, the default).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

/// Why a connection's TLS failed, in one sentence, or `None` when the
/// error is not about TLS.
pub fn failure(err: &tokio_postgres::Error, settings: &Settings) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(r) = e.downcast_ref::<rustls::Error>() {
            return Some(describe(r, settings));
        }
        if let Some(r) = e
            .downcast_ref::<io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(describe(r, settings));
        }
        if let Some(r) = e
            .downcast_ref::<rustls::pki_types::InvalidDnsNameError>()
            .or_else(|| {
                e.downcast_ref::<io::Error>()
                    .and_then(|io| io.get_ref())
                    .and_then(|inner| inner.downcast_ref())
            })
        {
            return Some(format!("the host is not a name TLS can check ({r})"));
        }
        cause = e.source();
    }
    let text = err.to_string();
    if text.contains("server does not support TLS") {
        return Some(format!(
            "the server does not accept TLS, which sslmode={} requires",
            settings.mode.name()
        ));
    }
    None
}

fn describe(e: &rustls::Error, settings: &Settings) -> String {
    let roots = settings
        .roots
        .as_ref()
        .map_or_else(|| "the root certificates".to_string(), |r| r.to_string());
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => format!(
                "unknown CA: the server's certificate is not signed by a certificate of {roots}"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                let when = match c {
                    CertificateError::ExpiredContext { not_after, .. } => {
                        format!(" (valid until {})", date(not_after))
                    }
                    _ => String::new(),
                };
                format!("the server's certificate has expired{when}")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the server's certificate is not valid yet".to_string()
            }
            CertificateError::NotValidForName => {
                "hostname mismatch: the server's certificate does not name the host".to_string()
            }
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => format!(
                "hostname mismatch: the server's certificate is for {}, not {}",
                if presented.is_empty() {
                    "no name".to_string()
                } else {
                    presented
                        .iter()
                        .map(|p| plain_name(p))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
                expected.to_str()
            ),
            CertificateError::BadSignature => {
                "the server's certificate has a bad signature".to_string()
            }
            CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
                "the server's certificate is not one for a server (its extended key usage)"
                    .to_string()
            }
            CertificateError::Revoked => "the server's certificate is revoked".to_string(),
            other => format!(
                "the server's certificate was refused ({})",
                words(&format!("{other:?}"))
            ),
        },
        rustls::Error::AlertReceived(alert) => format!(
            "the server ended the handshake ({}){}",
            words(&format!("{alert:?}")),
            if settings.client.is_some() {
                "; it may not accept the client certificate (sslcert)"
            } else {
                "; it may want a client certificate (sslcert, sslkey)"
            }
        ),
        rustls::Error::NoCertificatesPresented => "the server presented no certificate".to_string(),
        other => format!("the TLS handshake failed ({other})"),
    }
}

/// A name as the certificate holds it: `localhost`, not
/// `DnsName("localhost")`.
/// A rustls enum's variant as words (`HandshakeFailure` → `handshake
/// failure`), its fields left out: no Rust shapes in a message.
fn words(variant: &str) -> String {
    let name = variant
        .split(|c: char| !c.is_ascii_alphanumeric())
        .next()
        .unwrap_or_default();
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn plain_name(presented: &str) -> &str {
    presented
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .map_or(presented, |inner| inner.trim_matches('"'))
}

/// A time as a date (UTC).
fn date(t: &UnixTime) -> String {
    let secs = i64::try_from(t.as_secs()).unwrap_or(i64::MAX);
    chrono::DateTime::from_timestamp(secs, 0)
        .map_or_else(|| secs.to_string(), |d| d.format("%Y-%m-%d").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(mode: SslMode) -> Settings {
        Settings {
            mode,
            roots: Some(Roots::File(PathBuf::from("/etc/ca.pem"))),
            client: None,
            sni: true,
        }
    }

    #[test]
    fn each_verification_failure_is_one_plain_sentence() {
        let s = settings(SslMode::VerifyFull);
        let bad = |c: CertificateError| describe(&rustls::Error::InvalidCertificate(c), &s);
        assert_eq!(
            bad(CertificateError::UnknownIssuer),
            "unknown CA: the server's certificate is not signed by a certificate of sslrootcert /etc/ca.pem"
        );
        assert_eq!(
            bad(CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                    1_700_000_000
                )),
            }),
            "the server's certificate has expired (valid until 2023-11-14)"
        );
        assert_eq!(
            bad(CertificateError::NotValidForNameContext {
                expected: ServerName::try_from("db.internal").expect("a name"),
                presented: vec![
                    "DnsName(\"db-1.internal\")".into(),
                    "IpAddress(10.0.0.1)".into()
                ],
            }),
            "hostname mismatch: the server's certificate is for db-1.internal, 10.0.0.1, not db.internal"
        );
    }

    #[test]
    fn require_verifies_the_chain_only_with_a_root_certificate() {
        assert_eq!(settings(SslMode::Require).check(), Check::Chain);
        let mut s = settings(SslMode::Require);
        s.roots = None;
        assert_eq!(s.check(), Check::Nothing);
        assert_eq!(settings(SslMode::Prefer).check(), Check::Nothing);
        assert_eq!(settings(SslMode::VerifyCa).check(), Check::Chain);
        assert_eq!(settings(SslMode::VerifyFull).check(), Check::ChainAndName);
    }
}
