//! TLS of the OTLP transports: which certificates an `https://` endpoint is checked against,
//! and which client certificate is shown to it.
//!
//! The variables are the OpenTelemetry specification's, each read per signal first
//! (`OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`, `…_METRICS_…`, `…_LOGS_…`), then generically:
//!
//! | Variable | Meaning |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_CERTIFICATE` | PEM file of the CA certificate(s) the server's certificate must chain to; replaces the system roots (as Python's exporters do) |
//! | `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` | PEM file of this client's certificate chain (mutual TLS); needs the key |
//! | `OTEL_EXPORTER_OTLP_CLIENT_KEY` | PEM file of this client's private key (PKCS#8, PKCS#1 or SEC1); needs the certificate |
//!
//! Without a CA file the server is checked against the system's roots (`SSL_CERT_FILE` /
//! `SSL_CERT_DIR`, else the platform's store, read by `rustls-native-certs`). Both transports use
//! rustls with a client configuration built here with the *ring* provider, given explicitly (the
//! process's default provider is the application's, and is neither read nor installed): gRPC
//! through a channel of nemo-lens's own ([`grpc_tls`](super::grpc_tls)), HTTP through a hyper
//! client of nemo-lens's own ([`http_client`](super::http_client)).
//!
//! The files are read and parsed at setup, on the exporting rank only, and only for an
//! `https://` endpoint: a file that cannot be read (or is not a regular file of at most 1 MiB:
//! a FIFO or a device is refused without blocking), holds no PEM certificate (or key), or a
//! certificate without its key is a [`LensError::Certificate`] naming the variable. A server the
//! certificates do not accept fails at export time instead: one line on stderr names the
//! endpoint and the cause, and what the failed exports carried is counted as dropped.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::env::{Env, shown};
use crate::error::{LensError, Result};
use crate::export::otlp::Signal;

/// One PEM file named by a variable, read and checked.
#[derive(Clone)]
pub(crate) struct PemFile {
    /// The variable that named the file.
    pub(crate) var: String,
    /// The file's path, as the variable gave it.
    pub(crate) path: String,
    /// The file's bytes (PEM).
    pub(crate) pem: Vec<u8>,
}

/// The certificate files of one signal's endpoint.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    /// CA certificates that replace the system roots.
    pub(crate) ca: Option<PemFile>,
    /// This client's certificate chain and private key (mutual TLS).
    pub(crate) client: Option<(PemFile, PemFile)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key's bytes.
        f.debug_struct("TlsFiles")
            .field("ca", &self.ca.as_ref().map(|c| (&c.var, &c.path)))
            .field(
                "client",
                &self.client.as_ref().map(|(c, _)| (&c.var, &c.path)),
            )
            .finish()
    }
}

/// The variable of `key` (`CERTIFICATE`, `CLIENT_KEY`, …) that is set for `signal`: the
/// per-signal one, else the generic one (blank means unset). Returns the name and the path.
fn pick(env: Env<'_>, signal: Signal, key: &str) -> Option<(String, String)> {
    let specific = format!("OTEL_EXPORTER_OTLP_{}_{key}", signal.upper());
    let generic = format!("OTEL_EXPORTER_OTLP_{key}");
    [specific, generic]
        .into_iter()
        .find_map(|var| env.get(&var).map(|path| (var, path)))
}

fn cert_error(var: &str, path: &str, reason: impl Into<String>) -> LensError {
    LensError::Certificate {
        var: var.to_string(),
        path: shown(path),
        reason: reason.into(),
    }
}

/// The most of a certificate or key file read: a system CA bundle (about 200 KiB) fits.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads `path` (named by `var`) and checks that it holds PEM items `check` accepts. Only a
/// regular file of at most [`MAX_PEM_BYTES`] is read: a FIFO or a device never blocks setup.
fn read_pem(
    var: String,
    path: &str,
    check: impl FnOnce(&[u8]) -> Result<(), String>,
) -> Result<PemFile> {
    let pem = crate::config::named_file::read(std::path::Path::new(path), MAX_PEM_BYTES)
        .map_err(|e| cert_error(&var, path, format!("cannot read it: {e}")))?;
    check(&pem).map_err(|reason| cert_error(&var, path, reason))?;
    Ok(PemFile {
        var,
        path: path.to_string(),
        pem,
    })
}

/// The certificates of one PEM file: at least one, all well-formed.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err("it holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)".into());
    }
    Ok(certs)
}

/// The private key of one PEM file.
fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            "it holds no PEM private key (`-----BEGIN PRIVATE KEY-----`, RSA or EC)".to_string()
        }
        e => format!("not a PEM private key file: {e}"),
    })
}

impl TlsFiles {
    /// Reads the certificate variables of `signal` and the files they name.
    pub(crate) fn from_env(signal: Signal, env: Env<'_>) -> Result<TlsFiles> {
        let ca = match pick(env, signal, "CERTIFICATE") {
            Some((var, path)) => Some(read_pem(var, &path, |pem| certificates(pem).map(drop))?),
            None => None,
        };
        let cert = pick(env, signal, "CLIENT_CERTIFICATE");
        let key = pick(env, signal, "CLIENT_KEY");
        let client = match (cert, key) {
            (None, None) => None,
            (Some((var, path)), None) => {
                return Err(cert_error(
                    &var,
                    &path,
                    format!(
                        "a client certificate needs its private key: set OTEL_EXPORTER_OTLP_{}CLIENT_KEY too",
                        specific_infix(&var, signal)
                    ),
                ));
            }
            (None, Some((var, path))) => {
                return Err(cert_error(
                    &var,
                    &path,
                    format!(
                        "a client key needs its certificate: set OTEL_EXPORTER_OTLP_{}CLIENT_CERTIFICATE too",
                        specific_infix(&var, signal)
                    ),
                ));
            }
            (Some((cvar, cpath)), Some((kvar, kpath))) => Some((
                read_pem(cvar, &cpath, |pem| certificates(pem).map(drop))?,
                read_pem(kvar, &kpath, |pem| private_key(pem).map(drop))?,
            )),
        };
        Ok(TlsFiles { ca, client })
    }

    /// The rustls client configuration of both transports: the CA file's certificates, else
    /// the system's roots; the client certificate and key when given; the *ring* provider.
    pub(crate) fn rustls_config(&self) -> Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                for cert in certificates(&ca.pem).map_err(|r| cert_error(&ca.var, &ca.path, r))? {
                    roots.add(cert).map_err(|e| {
                        cert_error(
                            &ca.var,
                            &ca.path,
                            format!("not a usable CA certificate: {e}"),
                        )
                    })?;
                }
            }
            None => {
                check_system_bundle()?;
                roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            }
        }
        let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| LensError::Exporter {
            signal: "traces",
            message: format!("cannot configure TLS: {e}"),
        })?
        .with_root_certificates(roots);
        match &self.client {
            None => Ok(builder.with_no_client_auth()),
            Some((cert, key)) => {
                let chain =
                    certificates(&cert.pem).map_err(|r| cert_error(&cert.var, &cert.path, r))?;
                let der = private_key(&key.pem).map_err(|r| cert_error(&key.var, &key.path, r))?;
                builder.with_client_auth_cert(chain, der).map_err(|e| {
                    cert_error(
                        &key.var,
                        &key.path,
                        format!("the key does not fit the client certificate: {e}"),
                    )
                })
            }
        }
    }
}

/// The most of `SSL_CERT_FILE` let through: a system bundle is well under it.
const MAX_BUNDLE_BYTES: u64 = 16 << 20;

/// The most entries of the `SSL_CERT_DIR` directories looked at (a system's has hundreds).
const MAX_CERT_DIR_ENTRIES: usize = 65_536;

/// rustls-native-certs reads `SSL_CERT_FILE` (the system roots' bundle, when set) and every
/// regular file of the `SSL_CERT_DIR` directories whole and without a bound, and opening a FIFO
/// blocks: unless the bundle is a regular file of at most [`MAX_BUNDLE_BYTES`], and the
/// directories' regular files (symbolic links followed) hold at most that many bytes together
/// in at most [`MAX_CERT_DIR_ENTRIES`] entries (all checked without opening a file), setup
/// fails naming the variable. A path that does not exist is left to rustls-native-certs (it
/// reads nothing there); so are the directories' other entries (it skips them).
fn check_system_bundle() -> Result<()> {
    const VAR: &str = "SSL_CERT_FILE";
    if let Some(path) = std::env::var_os(VAR).filter(|p| !p.is_empty()) {
        match crate::config::named_file::check(std::path::Path::new(&path), MAX_BUNDLE_BYTES) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(cert_error(
                    VAR,
                    &path.to_string_lossy(),
                    format!("cannot read it: {e}"),
                ));
            }
            _ => {}
        }
    }
    check_cert_dirs()
}

/// The `SSL_CERT_DIR` half of [`check_system_bundle`].
fn check_cert_dirs() -> Result<()> {
    const VAR: &str = "SSL_CERT_DIR";
    let Some(dirs) = std::env::var_os(VAR).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let shown_dirs = dirs.to_string_lossy().into_owned();
    let refuse = |reason: String| Err(cert_error(VAR, &shown_dirs, reason));
    let (mut entries, mut bytes) = (0usize, 0u64);
    for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in listing.flatten() {
            entries += 1;
            if entries > MAX_CERT_DIR_ENTRIES {
                return refuse(format!(
                    "its directories hold more than {MAX_CERT_DIR_ENTRIES} entries"
                ));
            }
            let Ok(metadata) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if metadata.is_file() {
                bytes = bytes.saturating_add(metadata.len());
                if bytes > MAX_BUNDLE_BYTES {
                    return refuse(format!(
                        "its directories' files hold more than {} MiB (at '{}')",
                        MAX_BUNDLE_BYTES >> 20,
                        shown(&entry.path().to_string_lossy())
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `TRACES_` when `var` is the per-signal variable of `signal`, else nothing: the partner
/// variable a message asks for is of the same kind.
fn specific_infix(var: &str, signal: Signal) -> String {
    let infix = format!("{}_", signal.upper());
    if var.starts_with(&format!("OTEL_EXPORTER_OTLP_{infix}")) {
        infix
    } else {
        String::new()
    }
}
