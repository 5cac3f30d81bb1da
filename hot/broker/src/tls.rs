//! TLS for the Kafka listeners (rustls): PEM files from flags, optional client
//! certificates, and reloading without a restart.
//!
//! The certificate, key and client CA are read into one `rustls::ServerConfig`, held
//! behind an `ArcSwap`: each accepted connection takes the current one, so a reload
//! (SIGHUP, or a change of the files' modification time or size, looked for every few
//! seconds) applies to new connections while existing ones keep the session they
//! negotiated. A reload that fails (a half-written file, a key that does not match the
//! certificate) keeps the previous configuration and logs why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;

/// Whether TLS clients must present a certificate (Kafka's ssl.client.auth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// Certificates are not asked for.
    None,
    /// Asked for and verified when given; a client without one is `User:ANONYMOUS`.
    Requested,
    /// A connection without a certificate signed by the client CA is refused.
    Required,
}

impl std::fmt::Display for ClientAuth {
    /// As the flags spell it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        })
    }
}

impl std::str::FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            _ => Err(format!("'{s}': use required, requested or none")),
        }
    }
}

/// Where the listener's TLS material lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, PEM, leaf first.
    pub cert: PathBuf,
    /// The private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates that sign client certificates, PEM.
    pub client_ca: Option<PathBuf>,
    /// Applies to SSL listeners; SASL_SSL listeners authenticate by SASL and ask for no
    /// certificate (as Kafka, unless configured per listener).
    pub client_auth: ClientAuth,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {path}: {why}")]
    File {
        flag: &'static str,
        path: String,
        why: String,
    },
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(flag: &'static str, path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        flag,
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// The certificates of a PEM file; errors name `flag`.
pub fn read_certs(
    flag: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(flag, path, format!("cannot read: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(flag, path, format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(file_error(flag, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1); errors name `flag`.
pub fn read_key(flag: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| file_error(flag, path, format!("no usable private key: {e}")))
}

/// Trust anchors from a PEM file of CA certificates; errors name `flag`.
pub fn read_roots(flag: &'static str, path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in read_certs(flag, path)? {
        roots.add(c).map_err(|e| file_error(flag, path, e))?;
    }
    Ok(roots)
}

/// aws-lc-rs with AES-128-GCM preferred: a third fewer AES rounds than AES-256 on both
/// ends of a TLS 1.3 connection carrying gigabytes (librdkafka's OpenSSL offers
/// AES-256 first, and the server's order decides, see `ignore_client_order`).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    use rustls::CipherSuite;
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    let rank = |s: &rustls::SupportedCipherSuite| match s.suite() {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 2,
        _ => 3,
    };
    p.cipher_suites.sort_by_key(rank);
    Arc::new(p)
}

/// Builds the server configuration of an SSL (`mtls` true) or SASL_SSL listener.
fn build(files: &TlsFiles, mtls: bool) -> Result<rustls::ServerConfig, TlsError> {
    let chain = read_certs("--tls-cert", &files.cert)?;
    let key = read_key("--tls-key", &files.key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (
        &files.client_ca,
        mtls && files.client_auth != ClientAuth::None,
    ) {
        (Some(ca), true) => {
            let roots = read_roots("--tls-client-ca", ca)?;
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider(),
            );
            let verifier = if files.client_auth == ClientAuth::Requested {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| file_error("--tls-client-ca", ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        (None, true) => {
            return Err(TlsError::Config(format!(
                "--tls-client-auth {} needs --tls-client-ca, the CA that signs client certificates",
                files.client_auth
            )));
        }
        (_, false) => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| {
        file_error(
            "--tls-key",
            &files.key,
            format!("does not match --tls-cert {}: {e}", files.cert.display()),
        )
    })?;
    config.ignore_client_order = true;
    Ok(config)
}

/// What identifies a version of the files: modification time and size of each.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &TlsFiles) -> Stamp {
    [
        Some(&files.cert),
        Some(&files.key),
        files.client_ca.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(|p| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    })
    .collect()
}

/// A listener's TLS configuration, reloadable.
#[derive(Debug)]
pub struct TlsServer {
    files: TlsFiles,
    mtls: bool,
    config: ArcSwap<rustls::ServerConfig>,
    stamp: Mutex<Stamp>,
}

impl TlsServer {
    /// Loads the files; `mtls` for SSL listeners (client certificates per
    /// [`TlsFiles::client_auth`]), not for SASL_SSL.
    pub fn load(files: TlsFiles, mtls: bool) -> Result<Arc<TlsServer>, TlsError> {
        let s = stamp(&files);
        let config = build(&files, mtls)?;
        Ok(Arc::new(TlsServer {
            files,
            mtls,
            config: ArcSwap::from_pointee(config),
            stamp: Mutex::new(s),
        }))
    }

    /// The acceptor new connections use.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }

    /// Re-reads the files. On failure the previous configuration stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let s = stamp(&self.files);
        let config = build(&self.files, self.mtls)?;
        self.config.store(Arc::new(config));
        *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) = s;
        metrics::counter!("strata_tls_reloads_total").increment(1);
        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
        Ok(())
    }

    /// Reloads if a file's modification time or size changed since the last load.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = stamp(&self.files);
        if *self.stamp.lock().unwrap_or_else(|e| e.into_inner()) == now {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }
}

/// Reloads every listener's TLS files on SIGHUP and when they change (looked for every
/// `poll`), until `shutdown`.
pub fn spawn_reloader(servers: Vec<Arc<TlsServer>>, poll: Duration, shutdown: CancellationToken) {
    if servers.is_empty() {
        return;
    }
    tokio::spawn(async move {
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<Option<()>>();
            let forced = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => false,
                _ = hangup => true,
            };
            for s in &servers {
                let r = if forced {
                    s.reload().map(|()| true)
                } else {
                    s.reload_if_changed()
                };
                if let Err(e) = r {
                    metrics::counter!("strata_tls_reload_failures_total").increment(1);
                    tracing::error!(error = %e, "TLS reload failed; the previous certificate stays in use until the files are fixed");
                }
            }
        }
    });
}
