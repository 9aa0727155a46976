//! The W3C suite's test service (`test-support/src/bin/w3c_service.rs`, which
//! `tests/w3c/run-official-suite.sh` runs the official suite against), driven as the suite's
//! harness drives it: a request listing calls back to a harness, with trace headers. The
//! service continues the incoming trace in a lens server span, sends each call its own parent
//! id, and answers hostile requests (bad JSON, a huge body, a huge declared `Content-Length`)
//! without dying.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nemo_lens_test_support::child::{Child, Running};
use nemo_lens_test_support::console;
use serde_json::{Value, json};

const TRACE_ID: &str = "12345678901234567890123456789012";
const PARENT_ID: &str = "1234567890123456";

/// A call the harness received: path, headers, body.
#[derive(Debug)]
struct Received {
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    /// The values of header `name`, in order.
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// The harness side: an HTTP server recording the calls it receives and answering `null`.
struct Harness {
    server: Arc<tiny_http::Server>,
    received: Arc<Mutex<Vec<Received>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Harness {
    fn start() -> Harness {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind the harness"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::spawn({
            let server = server.clone();
            let received = received.clone();
            move || {
                for mut request in server.incoming_requests() {
                    let mut body = String::new();
                    let _ = request.as_reader().read_to_string(&mut body);
                    received.lock().unwrap().push(Received {
                        path: request.url().to_string(),
                        headers: request
                            .headers()
                            .iter()
                            .map(|h| (h.field.to_string(), h.value.to_string()))
                            .collect(),
                        body,
                    });
                    let _ = request.respond(tiny_http::Response::from_string("null"));
                }
            }
        });
        Harness {
            server,
            received,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.server.server_addr())
    }

    /// The calls received so far, taken.
    fn take(&self) -> Vec<Received> {
        std::mem::take(&mut self.received.lock().unwrap())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The service, started on any free port, and its address.
fn start_service() -> (Running, String) {
    let mut service = Child::fixture("w3c_service").arg("0").spawn();
    let addr = service.wait_for_stderr_line("listening on ");
    (service, addr)
}

/// Ends the service as the script does (SIGTERM, after which it flushes) and returns its span
/// lines; fails if it did not end by that signal (a panic would have ended it otherwise).
fn stop(service: Running) -> Vec<Value> {
    service.signal(libc::SIGTERM);
    let out = service.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGTERM),
        "{:?}: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    console::spans(console::parse(&String::from_utf8_lossy(&out.stdout)))
}

fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// POSTs `body` to the service with `headers`; its status and JSON reply.
fn post(
    addr: &str,
    headers: &[(&str, &str)],
    body: impl Into<reqwest::blocking::Body>,
) -> (u16, Value) {
    let mut request = client().post(format!("http://{addr}/test")).body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().expect("the service answers");
    let status = response.status().as_u16();
    let text = response.text().expect("a reply body");
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, value)
}

/// The status line the service answers a request written raw on a connection.
fn raw_status(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("no status line ({other:?}) after {head:?}"),
        }
    }
    String::from_utf8_lossy(&head).trim().to_string()
}

#[test]
fn the_service_continues_the_trace_with_a_new_parent_id_per_call() {
    let harness = Harness::start();
    let (service, addr) = start_service();
    let calls = json!([
        {"url": harness.url("a"), "arguments": {"n": 1}},
        {"url": harness.url("b"), "arguments": []},
        {"url": harness.url("c")},
    ]);
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let (status, reply) = post(
        &addr,
        &[
            ("traceparent", traceparent.as_str()),
            ("tracestate", "foo=1"),
            ("TraceState", "bar=2"),
        ],
        calls.to_string(),
    );
    assert_eq!(status, 200, "{reply}");
    let received = harness.take();
    let paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/a", "/b", "/c"], "{reply}");
    let bodies: Vec<&str> = received.iter().map(|r| r.body.as_str()).collect();
    assert_eq!(bodies, [r#"{"n":1}"#, "[]", "[]"]);
    let mut parent_ids = Vec::new();
    for call in &received {
        let [sent] = call.header("traceparent")[..] else {
            panic!("not one traceparent: {call:?}");
        };
        let fields: Vec<&str> = sent.split('-').collect();
        assert_eq!(fields.len(), 4, "{sent}");
        assert_eq!(
            (fields[0], fields[1], fields[3]),
            ("00", TRACE_ID, "01"),
            "{sent}"
        );
        assert_eq!(call.header("tracestate"), ["foo=1,bar=2"], "{call:?}");
        parent_ids.push(format!("0x{}", fields[2]));
    }

    let spans = stop(service);
    let serve = console::named(&spans, "w3c.serve");
    assert_eq!(serve["context"]["trace_id"], format!("0x{TRACE_ID}"));
    assert_eq!(serve["parent_id"], format!("0x{PARENT_ID}"));
    // Each call names a span of its own, a child of the server span.
    let mut call_ids = Vec::new();
    for call in console::all_named(&spans, "w3c.call") {
        assert_eq!(call["parent_id"], serve["context"]["span_id"], "{call}");
        call_ids.push(call["context"]["span_id"].as_str().unwrap().to_string());
    }
    parent_ids.sort();
    call_ids.sort();
    parent_ids.dedup();
    assert_eq!(parent_ids.len(), 3, "{parent_ids:?}");
    assert_eq!(call_ids, parent_ids);
}

#[test]
fn the_service_answers_hostile_requests_and_keeps_serving() {
    let harness = Harness::start();
    let (service, addr) = start_service();
    let too_many: Vec<Value> = (0..33).map(|_| json!({"url": harness.url("x")})).collect();
    for (body, want) in [
        ("not json".to_string(), 400),
        ("\u{ff}".to_string(), 400),
        (json!({"url": harness.url("x")}).to_string(), 400),
        ("[1]".to_string(), 400),
        (json!([{"arguments": []}]).to_string(), 400),
        (json!([{"url": 7}]).to_string(), 400),
        (Value::Array(too_many).to_string(), 400),
        // Past serde_json's nesting limit.
        ("[".repeat(10_000), 400),
    ] {
        let (status, reply) = post(&addr, &[], body.clone());
        assert_eq!(status, want, "{reply} for {:.80}", body);
        assert!(reply["error"].is_string(), "{reply}");
    }
    // Over the limit by its declared length (one no client could send too): refused from the
    // head, before any of the body is read.
    // hyper refuses a length past what it counts (u64::MAX) from the head itself.
    for (length, want) in [
        ("65537", "HTTP/1.1 413"),
        ("999999999999999", "HTTP/1.1 413"),
        ("18446744073709551615", "HTTP/1.1 4"),
    ] {
        let head = format!("POST /test HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n");
        let status = raw_status(&addr, head.as_bytes());
        assert!(status.starts_with(want), "{length}: {status}");
    }
    // Over the limit as it streams in (chunked, no length): reading stops past the limit.
    let mut chunked =
        b"POST /test HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n".to_vec();
    chunked.extend(std::iter::repeat_n(b' ', 0x10001));
    let status = raw_status(&addr, &chunked);
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    let status = raw_status(
        &addr,
        b"GET /test HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(status.starts_with("HTTP/1.1 405"), "{status}");
    let status = raw_status(&addr, b"NOT HTTP\r\n\r\n");
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    assert!(harness.take().is_empty(), "a refused request made a call");

    // Calls that cannot be made are reported, one by one.
    let (status, reply) = post(
        &addr,
        &[],
        json!([
            {"url": "not a url"},
            {"url": "http://127.0.0.1:1/"},
            {"url": harness.url("ok"), "arguments": [{"url": "nested", "arguments": []}]},
        ])
        .to_string(),
    );
    assert_eq!(status, 200, "{reply}");
    let results = reply["calls"].as_array().expect("calls");
    assert!(results[0]["error"].is_string(), "{reply}");
    assert!(results[1]["error"].is_string(), "{reply}");
    assert_eq!(results[2]["status"], 200, "{reply}");
    let received = harness.take();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0].body, r#"[{"url":"nested","arguments":[]}]"#);
    // Without a trace context the service starts a trace.
    assert_eq!(received[0].header("traceparent").len(), 1, "{received:?}");

    let spans = stop(service);
    assert_eq!(console::all_named(&spans, "w3c.call").len(), 3);
}
