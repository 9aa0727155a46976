//! The encoder and decoder against Python's vectors and Python's `urllib.parse` (run as
//! `python3`, the oracle: a missing `python3` fails the test).

use opentelemetry::KeyValue;
use serde_json::json;

use super::*;
use nemo_lens_test_support::python::map_lines as python_map_lines;

fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
}

#[test]
fn format_parse_and_extend_follow_python_s_vectors() {
    assert_eq!(
        format(&[kv("nemo.run.id", "exp/1,seed=7")]),
        "nemo.run.id=exp%2F1%2Cseed%3D7"
    );
    assert_eq!(
        format(&[
            kv("bad,key", "v"),
            kv("bad=key", "v"),
            kv("  ", 1_i64),
            KeyValue::new("list", opentelemetry::Value::Array(vec![1_i64, 2].into())),
            kv("good", 3_i64),
        ]),
        "good=3"
    );
    assert_eq!(format(&[kv("a", 1_i64), kv(" a ", 2_i64)]), "a=2");
    assert_eq!(
        format(&[
            kv("i", 9_007_199_254_740_993_i64),
            kv("neg", -1_i64),
            kv("b", false)
        ]),
        "i=9007199254740993,neg=-1,b=False"
    );
    for (value, text) in [
        ("with space", "k=with%20space"),
        ("ü€", "k=%C3%BC%E2%82%AC"),
        ("a~b_c.d-e", "k=a~b_c.d-e"),
        ("100%", "k=100%25"),
        ("a+b", "k=a%2Bb"),
        ("", "k="),
        ("a\nb", "k=a%0Ab"),
    ] {
        assert_eq!(format(&[kv("k", value)]), text);
    }
    assert_eq!(format(&[kv("k y", "v")]), "k y=v");

    // A round trip: every value comes back as a string.
    let attrs = [
        kv("service.name", "nv.dl.launch"),
        kv("slurm.job.name", "train,comma"),
        kv("nv.dl.launch.container.image", "image=name:tag"),
        kv("slurm.array.count", 4_i64),
    ];
    let back = parse(&format(&attrs));
    assert_eq!(back[3], kv("slurm.array.count", "4"));
    assert_eq!(back[..3], attrs[..3]);

    for (text, want) in [
        (
            "key%2Cpart=value%2Cpart",
            vec![kv("key%2Cpart", "value,part")],
        ),
        ("a=1,a=2", vec![kv("a", "2")]),
        (" a = b ", vec![kv("a", "b")]),
        ("a==b", vec![kv("a", "=b")]),
        ("a=b+c", vec![kv("a", "b+c")]),
        ("=x,b,c=", vec![kv("c", "")]),
        (",,a=1,,", vec![kv("a", "1")]),
        ("a=%ZZ", vec![kv("a", "%ZZ")]),
        ("a=%C3%28", vec![kv("a", "\u{fffd}(")]),
        ("a=%%41", vec![kv("a", "%A")]),
    ] {
        assert_eq!(parse(text), want, "{text}");
    }

    // Existing keys win unless told to overwrite; inherited bytes are untouched.
    let added = [kv("slurm.job.id", "current")];
    assert_eq!(
        extend("slurm.job.id=stale,launcher.id=abc", &added, Overwrite::Yes),
        "launcher.id=abc,slurm.job.id=current"
    );
    assert_eq!(
        extend("slurm.job.id=stale,launcher.id=abc", &added, Overwrite::No),
        "slurm.job.id=stale,launcher.id=abc"
    );
    assert_eq!(
        extend(
            "run.id=current,launcher.id=abc",
            &[kv("run.id", "")],
            Overwrite::Yes
        ),
        "run.id=current,launcher.id=abc"
    );
    assert_eq!(
        extend(
            "",
            &[
                kv("nv.dl.rank", 5_i64),
                kv("nv.dl.world_size", 8_i64),
                kv("nemo.run.id", "exp,2026")
            ],
            Overwrite::No
        ),
        "nv.dl.rank=5,nv.dl.world_size=8,nemo.run.id=exp%2C2026"
    );
}

/// Values Python's encoder and decoder are hard on: every ASCII control character, quotes,
/// separators, escapes, astral characters, a long value.
fn hostile_values() -> Vec<String> {
    let mut values: Vec<String> = (0u8..0x20)
        .map(|b| format!("a{}b", char::from(b)))
        .collect();
    values.extend(
        [
            "\u{7f}",
            "a,b=c;d",
            "%",
            "%2",
            "%zz",
            "%%",
            "%C3",
            "%c3%bc",
            "%E2%82",
            "%F0%80%80",
            "%ED%A0%80",
            "+ +",
            "'\"\\",
            "ü€😀\u{fffd}",
            "\u{a0}nbsp\u{2028}",
            " \t padded \t ",
            "~._-",
        ]
        .map(String::from),
    );
    values.push("x%41".repeat(20_000));
    values
}

#[test]
fn hostile_values_encode_and_decode_as_python_s_urllib() {
    let values = hostile_values();
    // Lines cannot hold a newline: Python reads each value escaped as JSON.
    let lines: Vec<String> = values.iter().map(|v| json!(v).to_string()).collect();
    let quoted = python_map_lines(
        "import json, urllib.parse",
        "urllib.parse.quote(json.loads(line), safe='')",
        &lines,
    );
    let unquoted = python_map_lines(
        "import json, urllib.parse",
        "json.dumps(urllib.parse.unquote(json.loads(line).strip()))",
        &lines,
    );
    for (i, value) in values.iter().enumerate() {
        // The encoder, through a whole carrier.
        let text = format(&[KeyValue::new("k", value.clone())]);
        assert_eq!(text, format!("k={}", quoted[i]), "{value:?}");
        assert_eq!(parse(&text), [KeyValue::new("k", value.clone())]);
        // The decoder, on the value as written (a raw newline or comma splits segments, as in
        // every reader; those values are checked through the encoder above).
        if !value.contains([',', '\n', '\r']) && !value.contains('=') {
            let want: String = serde_json::from_str(&unquoted[i]).unwrap();
            assert_eq!(
                parse(&format!("k={value}")),
                [KeyValue::new("k", want)],
                "{value:?}"
            );
        }
    }
}

#[test]
fn hostile_keys_are_refused_or_kept_as_python_does() {
    // Keys are never encoded: only blank ones and those holding `,` or `=` are refused.
    assert_eq!(
        format(&[
            kv("a,b", 1_i64),
            kv("a=b", 1_i64),
            kv("\u{1c}\u{85} ", 1_i64),
            kv("ü key\u{1}", 1_i64),
            kv("%41", 1_i64),
        ]),
        "ü key\u{1}=1,%41=1"
    );
    // A key Python strips (U+001C..U+001F count as blanks in Python) is stripped.
    assert_eq!(parse("\u{1f}k\u{1c}=v,\u{a0}=x"), [kv("k", "v")]);
}
