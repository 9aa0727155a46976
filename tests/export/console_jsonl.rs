//! The console exporter's JSONL against real Python NeMo Lens output.
//!
//! Spans go through a real `SdkTracerProvider` into a per-rank file; the file is then compared
//! with `tests/fixtures/python-lens-rank3.jsonl` (written by Python NeMo Lens): key order at
//! every level, value formats, and byte-level layout (separators, escaping) — the latter by
//! re-dumping each parsed line the way Python's `json.dumps` does and requiring identical text.

use std::path::Path;

use nemo_lens::export::{ConsoleSpanExporter, ConsoleWriter};
use opentelemetry::trace::{Link, Span, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Array, Context, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/python-lens-rank3.jsonl"
);

// ---------------------------------------------------------------------------------------------
// A minimal order-preserving JSON reader (serde_json's default map is sorted, which would hide
// key order) and a writer that reproduces Python's `json.dumps` defaults.

#[derive(Debug, Clone, PartialEq)]
enum J {
    Null,
    Bool(bool),
    /// Number, kept as its exact source text.
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn get(&self, key: &str) -> &J {
        match self {
            J::Obj(fields) => {
                &fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .unwrap_or_else(|| panic!("no key {key:?} in {self:?}"))
                    .1
            }
            other => panic!("not an object (looking up {key:?}): {other:?}"),
        }
    }

    fn keys(&self) -> Vec<&str> {
        match self {
            J::Obj(fields) => fields.iter().map(|(k, _)| k.as_str()).collect(),
            other => panic!("not an object: {other:?}"),
        }
    }

    fn str(&self) -> &str {
        match self {
            J::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    fn arr(&self) -> &[J] {
        match self {
            J::Arr(items) => items,
            other => panic!("not an array: {other:?}"),
        }
    }

    fn num(&self) -> &str {
        match self {
            J::Num(text) => text,
            other => panic!("not a number: {other:?}"),
        }
    }
}

struct Reader<'a> {
    s: &'a [u8],
    i: usize,
}

fn parse(text: &str) -> J {
    let mut r = Reader {
        s: text.as_bytes(),
        i: 0,
    };
    let value = r.value();
    r.ws();
    assert_eq!(r.i, r.s.len(), "trailing text after JSON value in {text}");
    value
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && b" \t\r\n".contains(&self.s[self.i]) {
            self.i += 1;
        }
    }

    fn eat(&mut self, b: u8) {
        self.ws();
        assert_eq!(
            self.s.get(self.i),
            Some(&b),
            "expected {:?} at byte {}",
            b as char,
            self.i
        );
        self.i += 1;
    }

    fn peek(&mut self) -> u8 {
        self.ws();
        self.s[self.i]
    }

    fn value(&mut self) -> J {
        match self.peek() {
            b'{' => {
                self.eat(b'{');
                let mut fields = Vec::new();
                if self.peek() == b'}' {
                    self.i += 1;
                    return J::Obj(fields);
                }
                loop {
                    let key = self.string();
                    self.eat(b':');
                    fields.push((key, self.value()));
                    if self.peek() == b',' {
                        self.i += 1;
                    } else {
                        self.eat(b'}');
                        return J::Obj(fields);
                    }
                }
            }
            b'[' => {
                self.eat(b'[');
                let mut items = Vec::new();
                if self.peek() == b']' {
                    self.i += 1;
                    return J::Arr(items);
                }
                loop {
                    items.push(self.value());
                    if self.peek() == b',' {
                        self.i += 1;
                    } else {
                        self.eat(b']');
                        return J::Arr(items);
                    }
                }
            }
            b'"' => J::Str(self.string()),
            b't' => self.literal("true", J::Bool(true)),
            b'f' => self.literal("false", J::Bool(false)),
            b'n' => self.literal("null", J::Null),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                assert!(self.i > start, "unexpected byte at {start}");
                J::Num(String::from_utf8(self.s[start..self.i].to_vec()).unwrap())
            }
        }
    }

    fn literal(&mut self, word: &str, value: J) -> J {
        assert!(self.s[self.i..].starts_with(word.as_bytes()));
        self.i += word.len();
        value
    }

    fn hex4(&mut self) -> u32 {
        let text = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
        self.i += 4;
        u32::from_str_radix(text, 16).unwrap()
    }

    fn string(&mut self) -> String {
        self.eat(b'"');
        let mut out = Vec::new();
        loop {
            let b = self.s[self.i];
            self.i += 1;
            match b {
                b'"' => return String::from_utf8(out).unwrap(),
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'u' => {
                            let hi = self.hex4();
                            if (0xd800..0xdc00).contains(&hi) {
                                assert_eq!(&self.s[self.i..self.i + 2], b"\\u");
                                self.i += 2;
                                let lo = self.hex4();
                                char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00))
                                    .unwrap()
                            } else {
                                char::from_u32(hi).unwrap()
                            }
                        }
                        other => panic!("bad escape \\{}", other as char),
                    };
                    let mut tmp = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
                }
                _ => out.push(b),
            }
        }
    }
}

/// Python `json.dumps(value)` with default arguments (`ensure_ascii=True`, separators
/// `(", ", ": ")`); numbers are copied as they were read.
fn py_dumps(value: &J, out: &mut String) {
    match value {
        J::Null => out.push_str("null"),
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(text) => out.push_str(text),
        J::Str(s) => py_dump_str(s, out),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_dumps(item, out);
            }
            out.push(']');
        }
        J::Obj(fields) => {
            out.push('{');
            for (i, (key, item)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_dump_str(key, out);
                out.push_str(": ");
                py_dumps(item, out);
            }
            out.push('}');
        }
    }
}

fn py_dump_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

fn redump(line: &str) -> String {
    let mut out = String::new();
    py_dumps(&parse(line), &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// Value-format checks.

fn is_hex_id(s: &str, hex_digits: usize) -> bool {
    s.len() == 2 + hex_digits
        && s.starts_with("0x")
        && s[2..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`
fn is_iso_micros(s: &str) -> bool {
    let b = s.as_bytes();
    let digits_at = [
        0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22, 23, 24, 25,
    ];
    b.len() == 27
        && digits_at.iter().all(|&i| b[i].is_ascii_digit())
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[26] == b'Z'
}

fn check_context(cx: &J, reference: &J) {
    assert_eq!(cx.keys(), reference.keys(), "context key order");
    assert!(is_hex_id(cx.get("trace_id").str(), 32), "{cx:?}");
    assert!(is_hex_id(cx.get("span_id").str(), 16), "{cx:?}");
    assert_ne!(cx.get("trace_id").str(), format!("0x{}", "0".repeat(32)));
    assert_eq!(cx.get("trace_state").str(), "[]");
}

fn fixture_span_lines() -> Vec<(String, J)> {
    let text = std::fs::read_to_string(FIXTURE)
        .unwrap_or_else(|e| panic!("reading the Python fixture {FIXTURE}: {e}"));
    let spans: Vec<(String, J)> = text
        .lines()
        .map(|line| (line.to_owned(), parse(line)))
        .filter(|(_, j)| matches!(j, J::Obj(f) if f.first().is_some_and(|(k, _)| k == "name")))
        .collect();
    assert_eq!(spans.len(), 3, "the fixture holds three span lines");
    spans
}

fn span_named<'a>(lines: &'a [(String, J)], name: &str) -> &'a (String, J) {
    lines
        .iter()
        .find(|(_, j)| j.get("name").str() == name)
        .unwrap_or_else(|| panic!("no span named {name:?}"))
}

// ---------------------------------------------------------------------------------------------

fn resource() -> Resource {
    Resource::builder()
        .with_service_name("nemo")
        .with_attributes([
            KeyValue::new("service.version", "0.1.0"),
            KeyValue::new("service.instance.id", "demo42-rank3"),
            KeyValue::new("dl.rank", 3),
            KeyValue::new("dl.world_size", 8),
            KeyValue::new("nemo.run.id", "demo42"),
        ])
        .build()
}

/// Runs a small training-shaped trace through a real provider into `{rank}` file 3.
fn write_spans(dir: &Path) -> std::path::PathBuf {
    let template = dir.join("nested/spans-rank{rank}.jsonl");
    let template = template.to_str().unwrap();
    let exporter =
        ConsoleSpanExporter::new(ConsoleWriter::to_path(template, 3).expect("open span file"));
    let provider = SdkTracerProvider::builder()
        .with_resource(resource())
        .with_simple_exporter(exporter)
        .build();
    let tracer = provider.tracer("console-jsonl-test");

    let mut data_load = tracer.start("data_load");
    data_load.end();
    let loaded = data_load.span_context().clone();

    let root = tracer
        .span_builder("train")
        .with_kind(SpanKind::Server)
        .with_attributes([KeyValue::new("model", "gpt")])
        .start(&tracer);
    let cx = Context::current_with_span(root);
    cx.span()
        .add_event("checkpoint.saved", vec![KeyValue::new("path", "/x")]);

    let mut step = tracer
        .span_builder("train_step")
        .with_attributes([
            KeyValue::new("iteration", 1),
            KeyValue::new("delta", -7),
            KeyValue::new("lr", 0.5),
            KeyValue::new("scale", 1.0),
            KeyValue::new("eps", 1e-5),
            KeyValue::new("synced", true),
            KeyValue::new("note", "naïve \"quoted\"\n\t🚀\u{7f}"),
            KeyValue::new("shape", Value::Array(Array::I64(vec![8, 1024]))),
            KeyValue::new("loss_scales", Value::Array(Array::F64(vec![0.25, 2.0]))),
            KeyValue::new("flags", Value::Array(Array::Bool(vec![true, false]))),
            KeyValue::new(
                "layers",
                Value::Array(Array::String(vec!["attn".into(), "mlp".into()])),
            ),
            KeyValue::new("bad_loss", f64::NAN),
        ])
        .with_links(vec![Link::new(
            loaded,
            vec![KeyValue::new("link.kind", "data")],
            0,
        )])
        .start_with_context(&tracer, &cx);
    step.add_event(
        "exception",
        vec![
            KeyValue::new("exception.type", "ValueError"),
            KeyValue::new("exception.message", "nan loss"),
        ],
    );
    step.set_status(Status::error("nan loss"));
    step.end();

    let mut ok_step = tracer
        .span_builder("eval_step")
        .with_kind(SpanKind::Client)
        .start_with_context(&tracer, &cx);
    ok_step.set_status(Status::Ok);
    ok_step.end();

    cx.span().end();
    provider.shutdown().expect("shutdown");
    resolve_path(template, 3)
}

#[test]
fn lines_match_the_python_fixture() {
    let fixture = fixture_span_lines();
    let (_, py_unset) = span_named(&fixture, "train_step");
    let (_, py_error) = span_named(&fixture, "bad_step");
    let (_, py_root) = span_named(&fixture, "train");
    let py_event = &py_root.get("events").arr()[0];

    let dir = tempfile::tempdir().unwrap();
    let path = write_spans(dir.path());
    assert_eq!(path, dir.path().join("nested/spans-rank3.jsonl"));
    let text = std::fs::read_to_string(&path).expect("rank file was written");
    assert!(text.ends_with('\n'), "every line is newline-terminated");
    let lines: Vec<(String, J)> = text
        .lines()
        .map(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            (line.to_owned(), parse(line))
        })
        .collect();
    let names: Vec<&str> = lines.iter().map(|(_, j)| j.get("name").str()).collect();
    assert_eq!(names, ["data_load", "train_step", "eval_step", "train"]);

    for (raw, span) in &lines {
        // Python's separators and escaping, byte for byte.
        assert!(raw.starts_with(r#"{"name": ""#), "{raw}");
        assert_eq!(&redump(raw), raw, "not laid out like Python's json.dumps");

        assert_eq!(span.keys(), py_root.keys(), "top-level key order");
        check_context(span.get("context"), py_root.get("context"));
        let kind = span.get("kind").str();
        assert!(
            [
                "SpanKind.INTERNAL",
                "SpanKind.SERVER",
                "SpanKind.CLIENT",
                "SpanKind.PRODUCER",
                "SpanKind.CONSUMER"
            ]
            .contains(&kind),
            "{kind}"
        );
        let (start, end) = (span.get("start_time").str(), span.get("end_time").str());
        assert!(is_iso_micros(start) && is_iso_micros(end), "{start} {end}");
        assert!(start <= end);
        for event in span.get("events").arr() {
            assert_eq!(event.keys(), py_event.keys(), "event key order");
            assert!(is_iso_micros(event.get("timestamp").str()));
        }
        let resource = span.get("resource");
        assert_eq!(resource.keys(), py_root.get("resource").keys());
        assert_eq!(resource.get("schema_url").str(), "");
        let attrs = resource.get("attributes");
        assert_eq!(attrs.get("dl.rank"), &J::Num("3".into()));
        assert_eq!(attrs.get("dl.world_size"), &J::Num("8".into()));
        assert_eq!(attrs.get("service.name").str(), "nemo");
        assert_eq!(attrs.get("service.instance.id").str(), "demo42-rank3");
    }

    let (_, load) = span_named(&lines, "data_load");
    let (_, root) = span_named(&lines, "train");
    let (_, step) = span_named(&lines, "train_step");
    let (_, eval) = span_named(&lines, "eval_step");

    // Parent links.
    assert_eq!(root.get("parent_id"), &J::Null);
    assert_eq!(py_root.get("parent_id"), &J::Null);
    let root_span_id = root.get("context").get("span_id").str();
    assert_eq!(step.get("parent_id").str(), root_span_id);
    assert_eq!(eval.get("parent_id").str(), root_span_id);
    assert!(is_hex_id(step.get("parent_id").str(), 16));
    let trace_id = root.get("context").get("trace_id");
    assert_eq!(step.get("context").get("trace_id"), trace_id);
    assert_ne!(load.get("context").get("trace_id"), trace_id);

    // Kinds.
    assert_eq!(root.get("kind").str(), "SpanKind.SERVER");
    assert_eq!(step.get("kind").str(), "SpanKind.INTERNAL");
    assert_eq!(eval.get("kind").str(), "SpanKind.CLIENT");
    assert_eq!(py_root.get("kind").str(), "SpanKind.INTERNAL");

    // Status shapes, compared with the fixture's UNSET and ERROR spans.
    assert_eq!(root.get("status"), py_unset.get("status"));
    assert_eq!(step.get("status").keys(), py_error.get("status").keys());
    assert_eq!(step.get("status"), py_error.get("status"));
    assert_eq!(eval.get("status").keys(), ["status_code"]);
    assert_eq!(eval.get("status").get("status_code").str(), "OK");

    // Attributes of every type.
    let a = step.get("attributes");
    assert_eq!(
        a.get("iteration"),
        py_unset.get("attributes").get("iteration")
    );
    assert_eq!(a.get("iteration").num(), "1");
    assert_eq!(a.get("delta").num(), "-7");
    assert_eq!(a.get("lr").num(), "0.5");
    assert_eq!(a.get("scale").num(), "1.0");
    assert_eq!(a.get("eps").num(), "1e-05");
    assert_eq!(a.get("synced"), &J::Bool(true));
    assert_eq!(a.get("note").str(), "naïve \"quoted\"\n\t🚀\u{7f}");
    assert_eq!(
        a.get("shape"),
        &J::Arr(vec![J::Num("8".into()), J::Num("1024".into())])
    );
    assert_eq!(
        a.get("loss_scales"),
        &J::Arr(vec![J::Num("0.25".into()), J::Num("2.0".into())])
    );
    assert_eq!(a.get("flags"), &J::Arr(vec![J::Bool(true), J::Bool(false)]));
    assert_eq!(
        a.get("layers"),
        &J::Arr(vec![J::Str("attn".into()), J::Str("mlp".into())])
    );
    assert_eq!(a.get("bad_loss").str(), "NaN");
    let (step_raw, _) = span_named(&lines, "train_step");
    let typed: serde_json::Value = serde_json::from_str(step_raw).unwrap();
    assert!(typed["attributes"]["iteration"].is_i64());
    assert!(typed["attributes"]["lr"].is_f64());
    assert!(
        step_raw.contains(r#""note": "na\u00efve \"quoted\"\n\t\ud83d\ude80\u007f""#),
        "non-ASCII is escaped like Python's ensure_ascii: {step_raw}"
    );

    // Events.
    let root_events = root.get("events").arr();
    assert_eq!(root_events.len(), 1);
    assert_eq!(root_events[0].get("name").str(), "checkpoint.saved");
    assert_eq!(
        root_events[0].get("attributes"),
        py_event.get("attributes"),
        "same event as the fixture's"
    );
    let step_events = step.get("events").arr();
    assert_eq!(step_events[0].get("name").str(), "exception");
    assert_eq!(
        step_events[0].get("attributes").keys(),
        ["exception.type", "exception.message"]
    );

    // Links.
    assert_eq!(root.get("links").arr(), &[]);
    let links = step.get("links").arr();
    assert_eq!(links.len(), 1);
    assert_eq!(links[0].keys(), ["context", "attributes"]);
    check_context(links[0].get("context"), py_root.get("context"));
    assert_eq!(links[0].get("context"), load.get("context"));
    assert_eq!(links[0].get("attributes").get("link.kind").str(), "data");
}

/// The re-dump check above only proves something if the Python layout is reproduced faithfully:
/// the fixture's own lines must survive it unchanged (they contain `\n` and `\"` escapes).
#[test]
fn python_redump_reproduces_the_fixture() {
    for (raw, span) in fixture_span_lines() {
        assert_eq!(redump(&raw), raw);
        assert!(raw.starts_with(r#"{"name": ""#));
        assert!(is_iso_micros(span.get("start_time").str()));
        check_context(span.get("context"), span.get("context"));
    }
}

#[test]
fn rank_files_are_separate_and_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("spans-{rank}.jsonl");
    let template = template.to_str().unwrap();
    let run = |rank: u32, name: &'static str| {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(ConsoleSpanExporter::new(
                ConsoleWriter::to_path(template, rank).unwrap(),
            ))
            .build();
        provider.tracer("t").in_span(name, |_| {});
        provider.shutdown().unwrap();
    };
    run(0, "first");
    run(1, "other-rank");
    run(0, "second");

    let read = |rank: u32| std::fs::read_to_string(resolve_path(template, rank)).unwrap();
    let rank0: Vec<String> = read(0)
        .lines()
        .map(|l| parse(l).get("name").str().to_owned())
        .collect();
    assert_eq!(rank0, ["first", "second"]);
    assert_eq!(read(1).lines().count(), 1);
    // No resource was configured by hand: the SDK's default resource is still embedded.
    let line = read(1);
    let line = parse(line.trim_end());
    let attrs = line.get("resource").get("attributes");
    assert_eq!(attrs.get("telemetry.sdk.language").str(), "rust");
}

/// The file a `{rank}` template names for `rank` (the documented rule of `NEMO_LENS_CONSOLE_PATH`).
fn resolve_path(template: &str, rank: u32) -> std::path::PathBuf {
    template.replace("{rank}", &rank.to_string()).into()
}
