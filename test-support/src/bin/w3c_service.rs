//! The test service of the W3C Trace Context validation suite (`test/` of
//! `github.com/w3c/trace-context`), built on nemo-lens as an application uses it:
//! `tests/w3c/run-official-suite.sh` runs the suite against it, `tests/spans/w3c_service.rs`
//! checks its protocol.
//!
//! ```sh
//! cargo run -p nemo-lens-test-support --bin w3c_service -- 0 > spans.jsonl
//! ```
//!
//! Listens on `127.0.0.1:PORT` (the argument; 0 or none: any free port) and prints
//! `listening on ADDR` on stderr. Every lens span goes to the console exporter (stdout, or
//! `NEMO_LENS_CONSOLE_PATH`), whatever the environment says of exporting.
//!
//! The suite's protocol: a `POST` whose body is a JSON array of `{"url": …, "arguments": …}`;
//! for each element, in order, the service POSTs `arguments` as JSON to `url`. The incoming
//! `traceparent` / `tracestate` headers (several of a name folded into one value, as HTTP
//! combines list headers) go through `propagation::extract_context`; the extracted context is
//! attached while a `w3c.serve` server span is created, so that span is its child; each call
//! is made inside a `w3c.call` client span of its own, whose context `propagation::inject_context`
//! writes into the call's headers (a new parent id per call). The reply is a JSON object
//! naming each call's status or error.
//!
//! Hostile requests are answered, never fatal: a body over 64 KiB gets 413 (a `Content-Length`
//! over it is refused before the body is read; hyper streams a body and the limit stops reading
//! it past 64 KiB), a body that is not such
//! an array, or holds more than 32 calls, gets 400, another method 405. tiny_http is not used
//! here: when a request whose body was not read to its end is dropped, tiny_http 0.12 allocates
//! the unread remainder the client declared in one buffer (a `Content-Length` of 2^64 - 1
//! panics, a few gigabytes abort).

use std::collections::HashMap;
use std::convert::Infallible;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use nemo_lens::propagation::{extract_context, inject_context};
use nemo_lens::{ExporterKind, LensConfig, Telemetry};
use serde_json::{Value, json};
use tracing_subscriber::prelude::*;

/// The largest request body read.
const MAX_BODY: usize = 64 * 1024;
/// The most calls one request may ask for.
const MAX_CALLS: usize = 32;
/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let port = match std::env::args().nth(1).map(|p| p.parse::<u16>()) {
        None => 0,
        Some(Ok(port)) => port,
        Some(Err(e)) => {
            eprintln!("w3c_service: the port argument must be a number from 0 to 65535: {e}");
            return ExitCode::from(2);
        }
    };
    let config = LensConfig::from_env().map(|c| {
        c.with_enabled(true).with(|c| {
            c.export.strategy = "all_ranks".into();
            c.export.exporter = ExporterKind::Console;
            c.metrics_enabled = false;
        })
    });
    let telemetry = match config.and_then(|c| Telemetry::builder(c).build()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("w3c_service: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::registry()
        .with(telemetry.layer())
        .init();
    // The script ends the service with SIGTERM: the handlers flush the spans first.
    if let Err(e) = telemetry.install_signal_handlers() {
        eprintln!("w3c_service: {e}");
    }
    // Built outside the runtime: a blocking client must not be made or dropped in one.
    let client = match reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(CALL_TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("w3c_service: cannot build the HTTP client: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("w3c_service: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let served = runtime.block_on(serve(port, client));
    let _ = telemetry.shutdown(Duration::from_secs(5));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("w3c_service: {e}");
            ExitCode::from(2)
        }
    }
}

/// Accepts connections on `127.0.0.1:port` until the process ends.
async fn serve(port: u16, client: reqwest::blocking::Client) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    // One write, so that a reader never sees part of the line.
    let line = format!("listening on {}\n", listener.local_addr()?);
    std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes())?;
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // A connection that failed before it was accepted (reset, out of descriptors).
            Err(_) => continue,
        };
        let client = client.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let client = client.clone();
                async move { Ok::<_, Infallible>(answer(request, client).await) }
            });
            // A connection's own failure (a malformed request, a client gone) ends only it.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The reply to one request of the harness.
async fn answer(
    request: Request<Incoming>,
    client: reqwest::blocking::Client,
) -> Response<Full<Bytes>> {
    if request.method() != Method::POST {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"error": "POST only"}),
        );
    }
    let (parts, body) = request.into_parts();
    // A declared `Content-Length` over the limit is refused before any of the body is read.
    if hyper::body::Body::size_hint(&body).lower() > MAX_BODY as u64 {
        return too_large();
    }
    let body = match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return too_large(),
        Err(e) => return reply(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
    };
    let calls = match parse_calls(&body) {
        Ok(calls) => calls,
        Err(error) => return reply(StatusCode::BAD_REQUEST, json!({ "error": error })),
    };
    let carrier = carrier(&parts.headers);
    // The calls block (reqwest's blocking client, spans entered on this thread).
    match tokio::task::spawn_blocking(move || call_all(&carrier, calls, &client)).await {
        Ok(results) => reply(StatusCode::OK, json!({ "calls": results })),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": e.to_string()}),
        ),
    }
}

/// A JSON reply.
fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The reply to a body over [`MAX_BODY`].
fn too_large() -> Response<Full<Bytes>> {
    let error = format!("the body is over {MAX_BODY} bytes");
    reply(StatusCode::PAYLOAD_TOO_LARGE, json!({ "error": error }))
}

/// One call the harness asks for: POST `arguments` as JSON to `url`.
struct Call {
    url: String,
    arguments: Value,
}

/// The calls a request body asks for, or what is wrong with it.
fn parse_calls(body: &[u8]) -> Result<Vec<Call>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Array(items) = value else {
        return Err("the body must be a JSON array of {\"url\", \"arguments\"} objects".into());
    };
    if items.len() > MAX_CALLS {
        return Err(format!("at most {MAX_CALLS} calls, got {}", items.len()));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(mut item) = item else {
                return Err(format!("element {i} is not an object"));
            };
            let Some(Value::String(url)) = item.remove("url") else {
                return Err(format!("element {i} has no string \"url\""));
            };
            let arguments = item.remove("arguments").unwrap_or(json!([]));
            Ok(Call { url, arguments })
        })
        .collect()
}

/// The request's headers as the map `extract_context` reads: names lowercase, the values of a
/// repeated name joined with commas (RFC 9110 §5.3: a list header's lines form one list, and a
/// repeated `traceparent` becomes an invalid one).
fn carrier(headers: &HeaderMap) -> HashMap<String, String> {
    let mut carrier: HashMap<String, String> = HashMap::new();
    for (name, value) in headers {
        // Bytes that are not visible ASCII stay in the value, so its parser refuses it.
        let value = String::from_utf8_lossy(value.as_bytes());
        carrier
            .entry(name.as_str().to_string())
            .and_modify(|joined| {
                joined.push(',');
                joined.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    carrier
}

/// Makes the calls inside a server span continuing the incoming trace; each call's status or
/// error.
fn call_all(
    carrier: &HashMap<String, String>,
    calls: Vec<Call>,
    client: &reqwest::blocking::Client,
) -> Vec<Value> {
    // A remote parent is taken from the context attached while the span is created.
    let server = {
        let _remote = extract_context(carrier).attach();
        tracing::info_span!(
            "w3c.serve",
            otel.kind = "server",
            w3c.calls = calls.len() as i64
        )
    };
    server.in_scope(|| calls.into_iter().map(|c| call(c, client)).collect())
}

/// One call, in a client span of its own: the `traceparent` it sends names that span.
fn call(call: Call, client: &reqwest::blocking::Client) -> Value {
    let span = tracing::info_span!(
        "w3c.call",
        otel.kind = "client",
        url.full = %call.url,
        http.response.status_code = tracing::field::Empty,
    );
    span.in_scope(|| {
        let mut headers = HashMap::new();
        inject_context(&mut headers);
        let mut request = client
            .post(&call.url)
            .header("content-type", "application/json")
            .body(call.arguments.to_string());
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        match request.send() {
            Ok(response) => {
                let status = response.status().as_u16();
                span.record("http.response.status_code", i64::from(status));
                json!({"url": call.url, "status": status})
            }
            Err(e) => {
                tracing::warn!(error = %e, "call failed");
                json!({"url": call.url, "error": e.to_string()})
            }
        }
    })
}
