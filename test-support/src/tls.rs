//! A TLS front before the test collector: a self-signed CA (rcgen) and a TLS terminator
//! (tokio-rustls) on a loopback port that forwards the decrypted bytes to one of rotel's
//! plain-text ports, so an exporter reaches rotel over `https://` exactly as it would reach a
//! managed collector.
//!
//! The front offers ALPN `h2` and `http/1.1` (gRPC needs `h2`), can require a client
//! certificate signed by a given CA (mutual TLS), and records every failed handshake so a test
//! can tell that a refused connection was refused by TLS.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate authority of the test, with its certificate in a PEM file.
pub struct TestCa {
    params: CertificateParams,
    key: KeyPair,
    /// The CA certificate, PEM.
    pub pem: String,
    /// A file holding [`TestCa::pem`] (for `OTEL_EXPORTER_OTLP_CERTIFICATE`).
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

/// A certificate and key issued by a [`TestCa`], in PEM files.
pub struct Issued {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
    /// A file holding the certificate.
    pub cert_path: PathBuf,
    /// A file holding the key.
    pub key_path: PathBuf,
}

impl TestCa {
    /// A fresh CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, cert.pem()).unwrap();
        TestCa {
            params,
            key,
            pem: cert.pem(),
            path,
            _dir: dir,
        }
    }

    /// A server certificate for `hosts` (DNS names or IP addresses).
    pub fn server(&self, hosts: &[&str], dir: &Path) -> Issued {
        self.issue(hosts, ExtendedKeyUsagePurpose::ServerAuth, dir, "server")
    }

    /// A client certificate (mutual TLS).
    pub fn client(&self, dir: &Path) -> Issued {
        self.issue(
            &["nemo-lens-client"],
            ExtendedKeyUsagePurpose::ClientAuth,
            dir,
            "client",
        )
    }

    fn issue(
        &self,
        hosts: &[&str],
        usage: ExtendedKeyUsagePurpose,
        dir: &Path,
        stem: &str,
    ) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, hosts[0]);
        for host in hosts {
            params.subject_alt_names.push(match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*host).try_into().unwrap()),
            });
        }
        params.extended_key_usages = vec![usage];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let cert_path = dir.join(format!("{stem}.pem"));
        let key_path = dir.join(format!("{stem}-key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_path,
            key_path,
        }
    }
}

/// One TLS terminator on a loopback port, forwarding to `127.0.0.1:<target>`.
pub struct TlsFront {
    /// The port it listens on.
    pub port: u16,
    handshake_errors: Arc<Mutex<Vec<String>>>,
    runtime: Option<tokio::runtime::Runtime>,
    _dir: tempfile::TempDir,
}

impl TlsFront {
    /// A front with a certificate from `ca` for `hosts`, forwarding to `target_port`; with
    /// `client_ca`, a client certificate signed by it is required.
    pub fn start(
        target_port: u16,
        ca: &TestCa,
        hosts: &[&str],
        client_ca: Option<&TestCa>,
    ) -> TlsFront {
        let dir = tempfile::tempdir().unwrap();
        let issued = ca.server(hosts, dir.path());
        let chain = vec![CertificateDer::from_pem_slice(issued.cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            Some(client_ca) => {
                let mut roots = rustls::RootCertStore::empty();
                roots
                    .add(CertificateDer::from_pem_slice(client_ca.pem.as_bytes()).unwrap())
                    .unwrap();
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let handshake_errors = Arc::new(Mutex::new(Vec::new()));
        let errors = handshake_errors.clone();
        runtime.spawn(async move {
            loop {
                let Ok((incoming, _)) = listener.accept().await else {
                    continue;
                };
                let acceptor = acceptor.clone();
                let errors = errors.clone();
                tokio::spawn(async move {
                    let mut tls = match acceptor.accept(incoming).await {
                        Ok(tls) => tls,
                        Err(e) => {
                            errors.lock().unwrap().push(e.to_string());
                            return;
                        }
                    };
                    let Ok(mut upstream) =
                        tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, target_port)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
                });
            }
        });
        TlsFront {
            port,
            handshake_errors,
            runtime: Some(runtime),
            _dir: dir,
        }
    }

    /// The handshakes this front refused so far, with rustls's reason.
    pub fn handshake_errors(&self) -> Vec<String> {
        self.handshake_errors.lock().unwrap().clone()
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
