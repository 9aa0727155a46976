//! The HTTP transport's client: hyper's HTTP/1.1 client on nemo-lens's private runtime, with
//! a connector of nemo-lens's own (TCP, then for `https://` tokio-rustls with nemo-lens's rustls
//! configuration, as the gRPC channel's connector does).
//!
//! nemo-lens does not use reqwest: Cargo unifies features, so any TLS feature nemo-lens enabled
//! on reqwest would change the application's own reqwest clients (reqwest with rustls and no
//! process-wide crypto provider panics building any client). hyper, hyper-util and
//! tokio-rustls are used with features that add code, never change a default.
//!
//! Each request is bounded by the exporter's timeout (connect, TLS handshake, request and
//! response together) and the response body by [`MAX_RESPONSE_BYTES`]. The client's requests
//! run as tasks of the private runtime; the future the exporter awaits waits for the task, so it
//! yields to whatever polls it (the batch worker's deadline holds), and dropping it cancels the
//! request. Proxy variables (`HTTPS_PROXY`, …) are not read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_http::{Bytes, HttpError, Request, Response};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::export::otlp::report::{FailureReport, chain};

/// The most of a collector's response read (an OTLP response is a few bytes; a partial-success
/// message a few KiB).
pub(crate) const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// ALPN protocol id of HTTP/1.1, the only version this client speaks.
const HTTP1: &[u8] = b"http/1.1";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The OTLP/HTTP exporter's client: tells the [`FailureReport`] the real cause of a failed
/// request (the exporter itself only says "network error").
pub(crate) struct LensHttpClient {
    client: Client<Connector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
    /// Whether `https://` endpoints can be reached (a TLS configuration was given).
    tls: bool,
    report: Arc<FailureReport>,
}

impl std::fmt::Debug for LensHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LensHttpClient")
            .field("timeout", &self.timeout)
            .field("tls", &self.tls)
            .finish()
    }
}

impl LensHttpClient {
    /// A client whose requests run on `runtime`, each bounded by `timeout`; `tls` is the
    /// configuration of `https://` endpoints (`None`: plain `http://` only).
    pub(crate) fn new(
        runtime: tokio::runtime::Handle,
        timeout: Duration,
        tls: Option<rustls::ClientConfig>,
        report: Arc<FailureReport>,
    ) -> Self {
        let has_tls = tls.is_some();
        let tls = tls.map(|mut config| {
            config.alpn_protocols = vec![HTTP1.to_vec()];
            TlsConnector::from(Arc::new(config))
        });
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(Connector { tls });
        LensHttpClient {
            client,
            runtime,
            timeout,
            tls: has_tls,
            report,
        }
    }

    /// Sends `request` on the runtime and reads the response, within the timeout.
    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        let client = self.client.clone();
        let timeout = self.timeout;
        let task = self.runtime.spawn(async move {
            match tokio::time::timeout(timeout, exchange(&client, request)).await {
                Ok(result) => result,
                Err(_) => Err(format!("no response within the timeout ({timeout:?})").into()),
            }
        });
        let mut task = AbortOnDrop(task);
        match Pin::new(&mut task.0).await {
            Ok(result) => result,
            Err(e) if e.is_cancelled() => Err("the exporters' runtime has stopped".into()),
            Err(_) => Err("the HTTP request panicked".into()),
        }
    }
}

/// One request and its response, the body bounded by [`MAX_RESPONSE_BYTES`].
async fn exchange(
    client: &Client<Connector, Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<Response<Bytes>, HttpError> {
    let response = client.request(request).await?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}

/// Aborts the request's task when the exporter stops waiting for it (its deadline passed).
struct AbortOnDrop(tokio::task::JoinHandle<Result<Response<Bytes>, HttpError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl opentelemetry_http::HttpClient for LensHttpClient {
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.report.attempt();
            let result = self.send(request).await;
            if let Err(e) = &result {
                self.report.note_cause(chain(e.as_ref()));
            }
            result
        })
    }
}

/// Opens a TCP connection to the request's host and port, with TLS for `https://`.
#[derive(Clone)]
struct Connector {
    tls: Option<TlsConnector>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = match uri.scheme_str() {
                Some(s) if s.eq_ignore_ascii_case("https") => true,
                Some(s) if s.eq_ignore_ascii_case("http") => false,
                other => return Err(format!("unsupported URL scheme {other:?}").into()),
            };
            let host = uri.host().ok_or("the endpoint has no host")?;
            // An IPv6 literal is bracketed in the URI and bare for the connection and the
            // certificate check.
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let tls = match (https, tls) {
                (false, _) => None,
                (true, Some(tls)) => Some(tls),
                (true, None) => {
                    return Err("an https:// endpoint without a TLS configuration".into());
                }
            };
            let tcp = TcpStream::connect((bare, port)).await?;
            tcp.set_nodelay(true)?;
            let Some(tls) = tls else {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            };
            let server_name = ServerName::try_from(bare.to_string())
                .map_err(|e| format!("'{bare}' is not a host name TLS can check: {e}"))?;
            let stream = tls.connect(server_name, tcp).await?;
            Ok(TokioIo::new(Stream::Tls(Box::new(stream))))
        })
    }
}

/// A connection: plain TCP, or TLS over TCP.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::export::otlp::Signal;
    use crate::export::otlp::test_runtime as runtime;

    /// A one-connection server on loopback: reads the request head, then runs `answer`.
    fn serve(answer: impl FnOnce(&mut std::net::TcpStream) + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            answer(&mut conn);
        });
        url
    }

    fn post(client: &LensHttpClient, rt: &tokio::runtime::Runtime, url: &str) -> String {
        let request = Request::post(url).body(Bytes::new()).unwrap();
        let result = rt.block_on(opentelemetry_http::HttpClient::send_bytes(client, request));
        match result {
            Ok(r) => format!("status {} body {}", r.status(), r.body().len()),
            Err(e) => format!("error {}", chain(e.as_ref())),
        }
    }

    fn client(rt: &tokio::runtime::Runtime, timeout: Duration) -> LensHttpClient {
        let report = FailureReport::new(Signal::Traces, "test".into());
        LensHttpClient::new(rt.handle().clone(), timeout, None, report)
    }

    #[test]
    fn a_response_is_read_and_an_oversized_body_refused() {
        let rt = runtime();
        let small = serve(|c| {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc");
        });
        let client = client(&rt, Duration::from_secs(30));
        assert_eq!(post(&client, &rt, &small), "status 200 OK body 3");
        let huge = serve(|c| {
            let len = MAX_RESPONSE_BYTES + 1;
            let _ =
                c.write_all(format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").as_bytes());
            let _ = c.write_all(&vec![b'x'; len]);
        });
        let out = post(&client, &rt, &huge);
        assert!(out.starts_with("error reading the response"), "{out}");
    }

    #[test]
    fn a_silent_server_fails_the_request_at_the_timeout() {
        let rt = runtime();
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let silent = serve(move |_| {
            let _ = held.recv();
        });
        let out = post(&client(&rt, Duration::from_millis(200)), &rt, &silent);
        assert!(out.contains("no response within the timeout"), "{out}");
        drop(hold);
    }

    #[test]
    fn an_https_url_without_tls_configuration_and_a_refused_connection_are_errors() {
        let rt = runtime();
        let client = client(&rt, Duration::from_secs(30));
        let out = post(&client, &rt, "https://127.0.0.1:9/v1/traces");
        assert!(out.contains("without a TLS configuration"), "{out}");
        let closed = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", closed.local_addr().unwrap());
        drop(closed);
        let out = post(&client, &rt, &url);
        assert!(out.starts_with("error client error (Connect)"), "{out}");
    }
}
