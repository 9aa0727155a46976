//! The gRPC transport over `https://`: a tonic channel whose connector does the TLS handshake
//! itself, with nemo-lens's own rustls configuration (the *ring* provider, given explicitly).
//!
//! tonic's own TLS builds its rustls configuration from the process's default crypto provider
//! when one is installed, and panics if that provider cannot serve the default protocol
//! versions. The process's default belongs to the application, so nemo-lens does not hand TLS
//! to tonic: the channel connects to the endpoint's host and port over plain TCP as far as
//! tonic is concerned (`http://`, so tonic adds no TLS of its own even when another crate
//! enables its TLS features), the connector wraps each connection in TLS (ALPN `h2`, the
//! certificate checked for the endpoint's host), and the requests carry the endpoint's real
//! `https://` origin.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint};

/// The errors the connector gives tonic.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// ALPN protocol id of HTTP/2, which gRPC needs.
const H2: &[u8] = b"h2";

/// A lazily connecting channel to the `https://` `endpoint`, TLS by `config`, each request
/// bounded by `timeout`. Must be called inside the Tokio runtime that will drive it.
pub(crate) fn channel(
    endpoint: &str,
    timeout: Duration,
    mut config: rustls::ClientConfig,
) -> Result<Channel, String> {
    let origin: Uri = endpoint
        .parse()
        .map_err(|e| format!("invalid endpoint: {e}"))?;
    let authority = origin
        .authority()
        .ok_or("the endpoint has no host")?
        .clone();
    let host = authority.host();
    let port = authority.port_u16().unwrap_or(443);
    // An IPv6 literal is bracketed in the URI and bare in the certificate check.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let server_name = ServerName::try_from(bare.to_string())
        .map_err(|e| format!("'{bare}' is not a host name TLS can check: {e}"))?;
    config.alpn_protocols = vec![H2.to_vec()];
    let connector = TlsConnect {
        tls: TlsConnector::from(Arc::new(config)),
        server_name,
        address: (bare.to_string(), port),
    };
    let plain = Endpoint::from_shared(format!("http://{host}:{port}"))
        .map_err(|e| format!("invalid endpoint: {e}"))?;
    Ok(plain
        .origin(origin)
        .timeout(timeout)
        .connect_with_connector_lazy(connector))
}

/// Opens a TCP connection to the endpoint and does the TLS handshake on it.
#[derive(Clone)]
struct TlsConnect {
    tls: TlsConnector,
    server_name: ServerName<'static>,
    /// Host and port to connect to (the channel's `http://` URI says the same).
    address: (String, u16),
}

impl tower_service::Service<Uri> for TlsConnect {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (host, port) = &this.address;
            let tcp = TcpStream::connect((host.as_str(), *port)).await?;
            tcp.set_nodelay(true)?;
            let tls = this.tls.connect(this.server_name, tcp).await?;
            if tls.get_ref().1.alpn_protocol() != Some(H2) {
                return Err(
                    "the server did not agree to HTTP/2 (ALPN h2), which gRPC needs".into(),
                );
            }
            Ok(TokioIo::new(tls))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> rustls::ClientConfig {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
    }

    #[test]
    fn host_names_ip_addresses_and_the_default_port() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _inside = runtime.enter();
        let timeout = Duration::from_secs(1);
        for endpoint in [
            "https://collector.example:4317",
            "https://collector.example",
            "https://127.0.0.1:4317",
            "https://[::1]:4317",
        ] {
            assert!(channel(endpoint, timeout, config()).is_ok(), "{endpoint}");
        }
        assert!(channel("https://", timeout, config()).is_err());
    }
}
