//! W3C Trace Context Level 2 through nemo-lens's propagator, written from the specification's
//! rules (<https://www.w3.org/TR/trace-context-2/>): each case is the headers a service
//! receives and the headers it sends on. The service extracts the incoming context and makes
//! its server span (a lens span) a child of it, in the two ways a service built on
//! `extract_context` / `inject_context` does ([`Pattern`]), and injects inside a lens span.
//!
//! A continued trace keeps the incoming trace id, has the injecting span as parent id, carries
//! the expected flags and `tracestate`; a restarted one has a new trace id and no `tracestate`.
//! Each case runs in a trace of its own (its `traceparent`'s trace id replaced), so that the
//! lists nemo-lens keeps per trace never meet another case's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use nemo_lens::propagation::{extract_context, inject_context};
use nemo_lens::testing::SpanCapture;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::TraceContextExt;

const TRACE_ID: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT_ID: &str = "b7ad6b7169203331";
/// A valid version `00` `traceparent` with `flags`.
fn tp(flags: &str) -> String {
    format!("00-{TRACE_ID}-{PARENT_ID}-{flags}")
}

/// What the service sends on.
#[derive(Debug)]
enum Out {
    /// The incoming trace, with these flags and this `tracestate` (`None`: no header).
    Continued(&'static str, Option<String>),
    /// A new trace, without `tracestate`.
    Restarted,
}

/// One case: incoming `traceparent` and `tracestate` header values (several of a name are
/// several headers) and what goes out.
struct Case {
    name: &'static str,
    traceparent: Vec<String>,
    tracestate: Vec<String>,
    out: Out,
}

fn case(name: &'static str, traceparent: &[&str], tracestate: &[&str], out: Out) -> Case {
    Case {
        name,
        traceparent: traceparent.iter().map(|s| s.to_string()).collect(),
        tracestate: tracestate.iter().map(|s| s.to_string()).collect(),
        out,
    }
}

fn continued(flags: &'static str, state: Option<&str>) -> Out {
    Out::Continued(flags, state.map(str::to_string))
}

/// Request headers, as an HTTP server hands them over: names case-insensitive, a name may
/// repeat.
struct Headers(Vec<(String, String)>);

impl Extractor for Headers {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }
    fn get_all(&self, key: &str) -> Option<Vec<&str>> {
        let all: Vec<&str> = self
            .0
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
            .collect();
        (!all.is_empty()).then_some(all)
    }
}

/// How the service handles a request.
#[derive(Clone, Copy, Debug)]
enum Pattern {
    /// The extracted context stays attached while the server span is entered and injects.
    Attached,
    /// The extracted context is attached only while the server span is created (as
    /// `docs/propagation.md` shows, and the W3C suite's test service does); each call injects
    /// in a client span of its own, a child of the server span.
    Service,
}

/// A trace id no other case uses.
fn fresh_trace_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("5e41ce{:026x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The id of a lens span.
fn span_id(span: &tracing::Span) -> String {
    nemo_lens::LensSpanExt::context(span)
        .span()
        .span_context()
        .span_id()
        .to_string()
}

/// The headers the service sends on, and the id of the span that injected them, for `cx` as
/// the incoming context.
fn serve(
    capture: &SpanCapture,
    cx: opentelemetry::Context,
    pattern: Pattern,
) -> (HashMap<String, String>, String) {
    capture.in_scope(|| match pattern {
        Pattern::Attached => {
            let _remote = cx.attach();
            let server = tracing::info_span!("server");
            let _in = server.enter();
            let mut out = HashMap::new();
            inject_context(&mut out);
            (out, span_id(&server))
        }
        Pattern::Service => {
            let server = {
                let _remote = cx.attach();
                tracing::info_span!("server")
            };
            let _in = server.enter();
            let call = tracing::info_span!("call");
            let _call = call.enter();
            let mut out = HashMap::new();
            inject_context(&mut out);
            (out, span_id(&call))
        }
    })
}

/// What is wrong with what `serve` sent for `case` (its trace id `trace`), if anything.
fn check(
    case: &Case,
    trace: &str,
    out: &HashMap<String, String>,
    server_id: &str,
) -> Result<(), String> {
    let Some(tp) = out.get("traceparent") else {
        return Err(format!("no traceparent sent: {out:?}"));
    };
    let fields: Vec<&str> = tp.split('-').collect();
    let want = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(format!("{what}: sent {out:?}"))
        }
    };
    want(
        fields.len() == 4 && fields[0] == "00",
        "a version 00 traceparent",
    )?;
    want(fields[2] == server_id, "the injecting span as parent id")?;
    match &case.out {
        Out::Continued(flags, state) => {
            want(fields[1] == trace, "the incoming trace")?;
            want(fields[3] == *flags, &format!("flags {flags}"))?;
            want(
                out.get("tracestate") == state.as_ref(),
                &format!("tracestate {state:?}"),
            )
        }
        Out::Restarted => {
            want(
                fields[1] != trace && fields[1] != TRACE_ID && fields[1] != "0".repeat(32),
                "a new trace",
            )?;
            want(fields[3] == "03", "flags 03 (a trace started here)")?;
            want(!out.contains_key("tracestate"), "no tracestate")
        }
    }
}

/// 32 members `m01=01` … `m32=32`, as one header.
fn members(n: usize) -> String {
    (1..=n)
        .map(|i| format!("m{i:02}={i:02}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[rustfmt::skip]
fn traceparent_cases() -> Vec<Case> {
    use Out::Restarted;
    let valid = tp("01");
    vec![
        case("sampled", &[&valid], &[], continued("01", None)),
        case("not sampled", &[&tp("00")], &[], continued("00", None)),
        case("sampled and random", &[&tp("03")], &[], continued("03", None)),
        case("random only", &[&tp("02")], &[], continued("02", None)),
        case("undefined flags are cleared", &[&tp("ff")], &[], continued("03", None)),
        case("undefined flag beside sampled", &[&tp("09")], &[], continued("01", None)),
        case("no traceparent", &[], &[], Restarted),
        case("empty", &[""], &[], Restarted),
        case("garbage", &["00-zz-yy-01"], &[], Restarted),
        case("two traceparent headers", &[&valid, &tp("01")], &[], Restarted),
        // Optional whitespace around the value.
        case("leading space", &[&format!(" {valid}")], &[], continued("01", None)),
        case("leading tab", &[&format!("\t{valid}")], &[], continued("01", None)),
        case("trailing space", &[&format!("{valid} ")], &[], continued("01", None)),
        case("trailing tab", &[&format!("{valid}\t")], &[], continued("01", None)),
        case("both", &[&format!("\t {valid} \t")], &[], continued("01", None)),
        case("space inside", &[&format!("00 -{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        // version
        case("version ff", &[&format!("ff-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version of 1 digit", &[&format!("0-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version of 3 digits", &[&format!("000-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version not hex", &[&format!(".0-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version not hex at its end", &[&format!("0.-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version uppercase", &[&format!("0A-{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        case("version 00, a character after the flags", &[&format!("{valid}.")], &[], Restarted),
        case("version 00, a field after the flags", &[&format!("{valid}-what-the-future-will-be-like")], &[], Restarted),
        // A later version is read by the 00 layout; what follows the flags is its own.
        case("later version", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-01")], &[], continued("01", None)),
        case("later version, random", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-03")], &[], continued("03", None)),
        case("later version with fields", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-01-what-the-future-will-be-like")], &[], continued("01", None)),
        case("later version, non-ASCII field", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-01-é")], &[], continued("01", None)),
        case("later version, flags not followed by a dash", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-01.what-the-future-will-be-like")], &[], Restarted),
        case("later version, too short", &[&format!("cc-{TRACE_ID}-{PARENT_ID}-1")], &[], Restarted),
        // trace-id
        case("trace id all zero", &[&format!("00-{}-{PARENT_ID}-01", "0".repeat(32))], &[], Restarted),
        case("trace id of 31 digits", &[&format!("00-{}-{PARENT_ID}-01", &TRACE_ID[1..])], &[], Restarted),
        case("trace id of 33 digits", &[&format!("00-{TRACE_ID}0-{PARENT_ID}-01")], &[], Restarted),
        case("trace id not hex", &[&format!("00-.{}-{PARENT_ID}-01", &TRACE_ID[1..])], &[], Restarted),
        case("trace id not hex at its end", &[&format!("00-{}.-{PARENT_ID}-01", &TRACE_ID[..31])], &[], Restarted),
        case("trace id uppercase", &[&format!("00-{}-{PARENT_ID}-01", TRACE_ID.to_uppercase())], &[], Restarted),
        case("trace id non-ASCII", &[&format!("00-é{}-{PARENT_ID}-01", &TRACE_ID[2..])], &[], Restarted),
        // parent-id
        case("parent id all zero", &[&format!("00-{TRACE_ID}-{}-01", "0".repeat(16))], &[], Restarted),
        case("parent id of 15 digits", &[&format!("00-{TRACE_ID}-{}-01", &PARENT_ID[1..])], &[], Restarted),
        case("parent id of 17 digits", &[&format!("00-{TRACE_ID}-{PARENT_ID}7-01")], &[], Restarted),
        case("parent id not hex", &[&format!("00-{TRACE_ID}-.{}-01", &PARENT_ID[1..])], &[], Restarted),
        case("parent id not hex at its end", &[&format!("00-{TRACE_ID}-{}.-01", &PARENT_ID[..15])], &[], Restarted),
        case("parent id uppercase", &[&format!("00-{TRACE_ID}-{}-01", PARENT_ID.to_uppercase())], &[], Restarted),
        // trace-flags
        case("flags of 1 digit", &[&format!("00-{TRACE_ID}-{PARENT_ID}-1")], &[], Restarted),
        case("flags of 3 digits", &[&format!("00-{TRACE_ID}-{PARENT_ID}-001")], &[], Restarted),
        case("flags not hex", &[&format!("00-{TRACE_ID}-{PARENT_ID}-.0")], &[], Restarted),
        case("flags not hex at their end", &[&format!("00-{TRACE_ID}-{PARENT_ID}-0.")], &[], Restarted),
        case("flags uppercase", &[&format!("00-{TRACE_ID}-{PARENT_ID}-0B")], &[], Restarted),
        case("wrong delimiter", &[&format!("00_{TRACE_ID}-{PARENT_ID}-01")], &[], Restarted),
        // The `tracestate` beside a missing or invalid `traceparent` is not read.
        case("tracestate without traceparent", &[], &["foo=1"], Restarted),
        case("tracestate beside an invalid traceparent", &[&format!("00-{TRACE_ID}-{PARENT_ID}-1")], &["foo=1"], Restarted),
    ]
}

#[rustfmt::skip]
fn tracestate_cases() -> Vec<Case> {
    let valid = tp("01");
    let kept = |name, states: &[&str], out: &str| case(name, &[&valid], states, continued("01", Some(out)));
    let dropped = |name, states: &[&str]| case(name, &[&valid], states, continued("01", None));
    let value: String = (0x20_u8..=0x7e).filter(|&c| c != b',' && c != b'=').map(char::from).collect();
    let key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
    let z256 = "z".repeat(256);
    let v256 = "v".repeat(256);
    let tenant241 = format!("{}@{}", "t".repeat(241), "v".repeat(13));
    let rest: String = (11..=32).map(|i| format!("m{i:02}={i:02}")).collect::<Vec<_>>().join(", ");
    vec![
        kept("two members", &["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"], "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        dropped("empty header", &[""]),
        dropped("only whitespace and empty members", &[" , \t,,"]),
        kept("OWS around members", &["foo=1 \t , \t bar=2, \t baz=3"], "foo=1,bar=2,baz=3"),
        kept("leading space", &[" foo=1"], "foo=1"),
        kept("leading tab", &["\tfoo=1"], "foo=1"),
        kept("trailing space", &["foo=1 "], "foo=1"),
        kept("trailing tab", &["foo=1\t"], "foo=1"),
        kept("empty members are skipped", &[",foo=1,,bar=2,"], "foo=1,bar=2"),
        kept("several headers are one list, in order", &["foo=1,bar=2", "rojo=1,congo=2", "baz=3"], "foo=1,bar=2,rojo=1,congo=2,baz=3"),
        kept("an empty header among others", &["", "foo=1", ""], "foo=1"),
        kept("leading spaces of a value are kept", &["foo=  bar"], "foo=  bar"),
        kept("every character a value may hold", &[&format!("foo={value}")], &format!("foo={value}")),
        kept("every character a key may hold", &[&format!("{key}=1")], &format!("{key}=1")),
        kept("a key starting with a digit", &["0vendor=1"], "0vendor=1"),
        kept("a key of 256 characters", &["foo=1", &format!("{z256}=1")], &format!("foo=1,{z256}=1")),
        kept("a value of 256 characters", &[&format!("foo={v256}")], &format!("foo={v256}")),
        kept("multi-tenant keys", &["fw529a3039@dt=x,0tenant@sys=y,foo@=z"], "fw529a3039@dt=x,0tenant@sys=y,foo@=z"),
        kept("a tenant of 241 characters", &["foo=1", &format!("{tenant241}=1")], &format!("foo=1,{tenant241}=1")),
        kept("32 members", &[&members(32)], &members(32)),
        kept("32 members over several headers with empty ones", &[&members(10), "", &rest], &members(32)),
        kept("duplicate keys: the first is kept", &["foo=1,foo=2"], "foo=1"),
        kept("duplicate keys over two headers", &["foo=1", "foo=2,bar=3"], "foo=1,bar=3"),
        // An invalid list is dropped whole.
        dropped("33 members", &[&members(33)]),
        dropped("33 members over several headers", &[&members(32), "m33=33"]),
        dropped("a key of 257 characters", &["foo=1", &format!("z{z256}=1")]),
        dropped("a value of 257 characters", &["foo=1", &format!("bar=v{v256}")]),
        dropped("an empty value", &["foo="]),
        dropped("an empty value among valid members", &["foo=,bar=3"]),
        dropped("a value holding =", &["foo=bar=baz"]),
        dropped("a value holding a tab", &["foo=a\tb"]),
        dropped("a non-ASCII value", &["foo=é,bar=2"]),
        dropped("a member without =", &["foo,bar=2"]),
        dropped("an empty key", &["=1,bar=2"]),
        dropped("an uppercase key", &["FOO=1,bar=2"]),
        dropped("a space before =", &["foo =1,bar=2"]),
        dropped("a dot in a key", &["foo.bar=1,bar=2"]),
        dropped("a key starting with @", &["@foo=1,bar=2"]),
        dropped("a key starting with _", &["_foo=1,bar=2"]),
        dropped("an invalid member in a second header", &["foo=1", "bar=2,BAZ=3"]),
    ]
}

/// Keys the specification allows and OpenTelemetry's `TraceState` cannot hold (the cases of
/// `test_tracestate_key_illegal_vendor_format` and `test_tracestate_key_length_limit` in the
/// W3C suite): the whole list is sent on, in order.
#[rustfmt::skip]
fn unholdable_cases() -> Vec<Case> {
    let valid = tp("01");
    let kept = |name, states: &[&str], out: &str| case(name, &[&valid], states, continued("01", Some(out)));
    let dropped = |name, states: &[&str]| case(name, &[&valid], states, continued("01", None));
    let tenant241 = format!("{}@{}", "t".repeat(241), "v".repeat(14));
    let tenant242 = format!("{}@v", "t".repeat(242));
    let vendor15 = format!("t@{}", "v".repeat(15));
    vec![
        kept("two @", &["foo@@bar=1,bar=2"], "foo@@bar=1,bar=2"),
        kept("three parts", &["foo@bar@baz=1,bar=2"], "foo@bar@baz=1,bar=2"),
        kept("an @ at the end beside two @", &["foo@=1,a@b@=2"], "foo@=1,a@b@=2"),
        kept("14 characters after @", &["foo=1", &format!("t@{}=1", "v".repeat(14))], &format!("foo=1,t@{}=1", "v".repeat(14))),
        kept("15 characters after @", &["foo=1", &format!("{vendor15}=1")], &format!("foo=1,{vendor15}=1")),
        kept("241 before @ and 14 after", &["foo=1", &format!("{tenant241}=1")], &format!("foo=1,{tenant241}=1")),
        kept("242 before @ and 1 after", &["foo=1", &format!("{tenant242}=1")], &format!("foo=1,{tenant242}=1")),
        kept("a later member OpenTelemetry cannot hold", &["a=1,b=2", "c@d@e=3"], "a=1,b=2,c@d@e=3"),
        kept("a duplicate of such a key: the first", &["x@y@z=1,bar=2,x@y@z=3"], "x@y@z=1,bar=2"),
        dropped("such a key beside an invalid member", &["foo@@bar=1,BAR=2"]),
        dropped("such a key of 257 characters", &["foo=1", &format!("{}@@v=1", "t".repeat(254))]),
    ]
}

/// Runs `cases` through the propagator over a header list (several headers of a name) and, for
/// those with at most one header of each name, through `extract_context` over a map too, in
/// both [`Pattern`]s; fails naming every case that went wrong.
fn run(cases: Vec<Case>) {
    // The capture installs nemo-lens's propagator globally: the one under test.
    let capture = SpanCapture::new();
    let mut failed = Vec::new();
    for case in &cases {
        for pattern in [Pattern::Attached, Pattern::Service] {
            let trace = fresh_trace_id();
            let headers = Headers(
                case.traceparent
                    .iter()
                    .map(|v| ("traceparent".to_string(), v.replace(TRACE_ID, &trace)))
                    .chain(
                        case.tracestate
                            .iter()
                            .map(|v| ("TraceState".to_string(), v.clone())),
                    )
                    .collect(),
            );
            let extracted = opentelemetry::global::get_text_map_propagator(|p| p.extract(&headers));
            let (out, server) = serve(&capture, extracted, pattern);
            if let Err(e) = check(case, &trace, &out, &server) {
                failed.push(format!(
                    "{} (header list, {pattern:?}): expected {e}",
                    case.name
                ));
            }
            if case.traceparent.len() <= 1 && case.tracestate.len() <= 1 {
                let map: HashMap<String, String> = headers
                    .0
                    .iter()
                    .map(|(k, v)| (k.to_lowercase(), v.clone()))
                    .collect();
                let (out, server) = serve(&capture, extract_context(&map), pattern);
                if let Err(e) = check(case, &trace, &out, &server) {
                    failed.push(format!(
                        "{} (extract_context, {pattern:?}): expected {e}",
                        case.name
                    ));
                }
            }
        }
    }
    let names: std::collections::BTreeSet<&str> = failed
        .iter()
        .map(|f| f.split(" (").next().unwrap_or(f))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        names.len(),
        cases.len(),
        failed.join("\n")
    );
}

#[test]
fn traceparent_values_that_break_a_rule_restart_the_trace() {
    run(traceparent_cases());
}

#[test]
fn tracestate_lists_follow_the_grammar_and_the_member_limit() {
    run(tracestate_cases());
}

#[test]
fn tracestate_lists_opentelemetry_cannot_hold_are_sent_on_whole() {
    run(unholdable_cases());
}

#[test]
fn a_carried_tracestate_goes_with_its_trace_only() {
    let capture = SpanCapture::new();
    let map = HashMap::from([
        (
            "traceparent".to_string(),
            tp("01").replace(TRACE_ID, &fresh_trace_id()),
        ),
        ("tracestate".to_string(), "foo@@bar=1,bar=2".to_string()),
    ]);
    let cx = extract_context(&map);
    // OpenTelemetry's `TraceState` holds the part it can.
    assert_eq!(cx.span().span_context().trace_state().header(), "bar=2");
    let (in_trace, new_trace) = capture.in_scope(|| {
        let _remote = cx.attach();
        let server = tracing::info_span!("server");
        let in_trace = server.in_scope(|| {
            let mut out = HashMap::new();
            inject_context(&mut out);
            out
        });
        // A root span started while the remote context is attached: another trace.
        let root = tracing::info_span!(parent: None, "root");
        let new_trace = root.in_scope(|| {
            let mut out = HashMap::new();
            inject_context(&mut out);
            out
        });
        (in_trace, new_trace)
    });
    assert_eq!(
        in_trace.get("tracestate").map(String::as_str),
        Some("foo@@bar=1,bar=2")
    );
    assert!(new_trace["traceparent"].contains("-03"), "{new_trace:?}");
    assert_eq!(new_trace.get("tracestate"), None, "{new_trace:?}");
}

/// A span entered after the extracted context was detached sends the list nemo-lens kept: the
/// one extracted last for its trace and held part, among the last 64 kept.
#[test]
fn a_kept_tracestate_is_the_last_extracted_for_its_trace_and_part() {
    let capture = SpanCapture::new();
    let trace = fresh_trace_id();
    let sent = |state: &str| {
        let map = HashMap::from([
            (
                "traceparent".to_string(),
                tp("01").replace(TRACE_ID, &trace),
            ),
            ("tracestate".to_string(), state.to_string()),
        ]);
        let (out, _) = serve(&capture, extract_context(&map), Pattern::Service);
        out.get("tracestate").cloned()
    };
    assert_eq!(
        sent("foo@@bar=1,bar=2").as_deref(),
        Some("foo@@bar=1,bar=2")
    );
    assert_eq!(sent("x@@y=9,bar=2").as_deref(), Some("x@@y=9,bar=2"));
    // A list `TraceState` holds whole: nothing kept for it.
    assert_eq!(sent("bar=2").as_deref(), Some("bar=2"));
    assert_eq!(sent("x@@y=9,bar=2").as_deref(), Some("x@@y=9,bar=2"));
    // 64 lists of other traces later, it is no longer kept: the held part goes on.
    let kept = HashMap::from([
        (
            "traceparent".to_string(),
            tp("01").replace(TRACE_ID, &trace),
        ),
        ("tracestate".to_string(), "x@@y=9,bar=2".to_string()),
    ]);
    let cx = extract_context(&kept);
    for _ in 0..64 {
        let other = HashMap::from([
            (
                "traceparent".to_string(),
                tp("01").replace(TRACE_ID, &fresh_trace_id()),
            ),
            ("tracestate".to_string(), "a@@b=1".to_string()),
        ]);
        let _ = extract_context(&other);
    }
    let (out, _) = serve(&capture, cx, Pattern::Service);
    assert_eq!(out.get("tracestate").map(String::as_str), Some("bar=2"));
}
