//! `nemo_lens::carrier`: Python's vectors, hostile keys and values checked against Python's
//! own `urllib.parse`, and round trips through the environment of a spawned trainer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use nemo_lens::carrier::{self, OTEL_RESOURCE_ATTRIBUTES};
use opentelemetry::KeyValue;
use serde_json::json;

use nemo_lens_test_support::child::{Child, run_alone};
use nemo_lens_test_support::{console, python};

fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
}

#[test]
fn format_parse_and_extend_follow_python_s_vectors() {
    assert_eq!(
        carrier::format(&[kv("nemo.run.id", "exp/1,seed=7")]),
        "nemo.run.id=exp%2F1%2Cseed%3D7"
    );
    assert_eq!(
        carrier::format(&[
            kv("bad,key", "v"),
            kv("bad=key", "v"),
            kv("  ", 1_i64),
            KeyValue::new("list", opentelemetry::Value::Array(vec![1_i64, 2].into())),
            kv("good", 3_i64),
        ]),
        "good=3"
    );
    assert_eq!(carrier::format(&[kv("a", 1_i64), kv(" a ", 2_i64)]), "a=2");
    assert_eq!(
        carrier::format(&[
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
        assert_eq!(carrier::format(&[kv("k", value)]), text);
    }
    assert_eq!(carrier::format(&[kv("k y", "v")]), "k y=v");

    // A round trip: every value comes back as a string.
    let attrs = [
        kv("service.name", "nv.dl.launch"),
        kv("slurm.job.name", "train,comma"),
        kv("nv.dl.launch.container.image", "image=name:tag"),
        kv("slurm.array.count", 4_i64),
    ];
    let back = carrier::parse(&carrier::format(&attrs));
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
        assert_eq!(carrier::parse(text), want, "{text}");
    }

    // Existing keys win unless told to overwrite; inherited bytes are untouched.
    let added = [kv("slurm.job.id", "current")];
    assert_eq!(
        carrier::extend("slurm.job.id=stale,launcher.id=abc", &added, true),
        "launcher.id=abc,slurm.job.id=current"
    );
    assert_eq!(
        carrier::extend("slurm.job.id=stale,launcher.id=abc", &added, false),
        "slurm.job.id=stale,launcher.id=abc"
    );
    assert_eq!(
        carrier::extend("run.id=current,launcher.id=abc", &[kv("run.id", "")], true),
        "run.id=current,launcher.id=abc"
    );
    assert_eq!(
        carrier::extend(
            "",
            &[
                kv("nv.dl.rank", 5_i64),
                kv("nv.dl.world_size", 8_i64),
                kv("nemo.run.id", "exp,2026")
            ],
            false
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
    let quoted = python::map_lines(
        "import json, urllib.parse",
        "urllib.parse.quote(json.loads(line), safe='')",
        &lines,
    );
    let unquoted = python::map_lines(
        "import json, urllib.parse",
        "json.dumps(urllib.parse.unquote(json.loads(line).strip()))",
        &lines,
    );
    for (i, value) in values.iter().enumerate() {
        // The encoder, through a whole carrier.
        let text = carrier::format(&[KeyValue::new("k", value.clone())]);
        assert_eq!(text, format!("k={}", quoted[i]), "{value:?}");
        assert_eq!(carrier::parse(&text), [KeyValue::new("k", value.clone())]);
        // The decoder, on the value as written (a raw newline or comma splits segments, as in
        // every reader; those values are checked through the encoder above).
        if !value.contains([',', '\n', '\r']) && !value.contains('=') {
            let want: String = serde_json::from_str(&unquoted[i]).unwrap();
            assert_eq!(
                carrier::parse(&format!("k={value}")),
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
        carrier::format(&[
            kv("a,b", 1_i64),
            kv("a=b", 1_i64),
            kv("\u{1c}\u{85} ", 1_i64),
            kv("ü key\u{1}", 1_i64),
            kv("%41", 1_i64),
        ]),
        "ü key\u{1}=1,%41=1"
    );
    // A key Python strips (U+001C..U+001F count as blanks in Python) is stripped.
    assert_eq!(carrier::parse("\u{1f}k\u{1c}=v,\u{a0}=x"), [kv("k", "v")]);
    let check = carrier::check(&[], &[], &[], Some("a=1,b=2,a=3,b=4,a=5"));
    assert_eq!(check.duplicates, ["a", "b"]);
}

/// The resource attributes of the span lines a trainer started by `cmd` wrote in `dir`.
fn trainer_resource(cmd: &mut std::process::Command, dir: &std::path::Path) -> serde_json::Value {
    nemo_lens_trainer_env(cmd, dir);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = console::spans(console::read(&dir.join("lens.jsonl")));
    spans[0]["resource"]["attributes"].clone()
}

fn nemo_lens_trainer_env(cmd: &mut std::process::Command, dir: &std::path::Path) {
    cmd.env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORT_STRATEGY", "all_ranks")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env("NEMO_LENS_CONSOLE_PATH", dir.join("lens.jsonl"))
        .args(["--steps", "1", "--step-ms", "0"]);
}

/// `publish` in a process of its own (it changes the environment): a spawned trainer inherits
/// the published values and reads them back exactly; dropping the guard restores the previous
/// bytes, also after a panic; scopes nest.
#[test]
fn published_attributes_reach_a_spawned_child_and_are_restored() {
    let trainer = nemo_lens_test_support::example("trainer");
    run_alone(|| {
        let before = b"launcher.id=abc,nv.dl.rank=0,odd=\xff%2Dx";
        // SAFETY: this child process runs one test on one thread.
        unsafe { std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, OsStr::from_bytes(before)) };
        let value = |_: ()| std::env::var_os(OTEL_RESOURCE_ATTRIBUTES);
        let published = [
            kv("nv.dl.rank", 2_i64),
            kv("nv.dl.world_size", 4_i64),
            kv("slurm.job.name", "train,comma"),
            kv("nv.dl.launch.container.image", "image=name:tag"),
            kv("weird", "a\u{1}b ü€ %41 +"),
            kv("bad,key", "refused"),
        ];
        {
            // SAFETY: as above.
            let _scope = unsafe { carrier::publish(&published, true) };
            let now = value(()).unwrap();
            assert!(
                now.as_bytes()
                    .starts_with(b"launcher.id=abc,odd=\xff%2Dx,nv.dl.rank=2,"),
                "{now:?}"
            );
            let dir = tempfile::tempdir().unwrap();
            let mut cmd = std::process::Command::new(&trainer);
            let resource = trainer_resource(&mut cmd, dir.path());
            assert_eq!(resource["nv.dl.rank"], 2);
            assert_eq!(resource["nv.dl.world_size"], 4);
            assert_eq!(resource["slurm.job.name"], "train,comma");
            assert_eq!(resource["nv.dl.launch.container.image"], "image=name:tag");
            assert_eq!(resource["weird"], "a\u{1}b ü€ %41 +");
            assert_eq!(resource["launcher.id"], "abc");
            assert_eq!(resource["odd"], "\u{fffd}-x");
            assert!(resource.get("bad,key").is_none());

            // Nested, keeping what is there.
            // SAFETY: as above.
            let inner =
                unsafe { carrier::publish(&[kv("nv.dl.rank", 3_i64), kv("x", 1_i64)], false) };
            assert!(value(()).unwrap().as_bytes().ends_with(b",x=1"));
            assert!(
                !value(())
                    .unwrap()
                    .as_bytes()
                    .windows(12)
                    .any(|w| w == b"nv.dl.rank=3")
            );
            drop(inner);
            assert_eq!(value(()), Some(now));
        }
        assert_eq!(value(()).unwrap().as_bytes(), before);

        // From unset, with a panic inside the scope: unset again.
        // SAFETY: as above.
        unsafe { std::env::remove_var(OTEL_RESOURCE_ATTRIBUTES) };
        let caught = std::panic::catch_unwind(|| {
            // SAFETY: as above.
            let _scope = unsafe { carrier::publish(&[kv("nv.dl.rank", 1_i64)], true) };
            assert_eq!(
                std::env::var(OTEL_RESOURCE_ATTRIBUTES).unwrap(),
                "nv.dl.rank=1"
            );
            panic!("worker start failed");
        });
        assert!(caught.is_err());
        assert_eq!(value(()), None);

        // `set` keeps what is there unless told to overwrite.
        // SAFETY: as above.
        unsafe {
            std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, "nv.dl.rank=1,launcher.id=abc");
            carrier::set(
                &[kv("nv.dl.rank", 2_i64), kv("nv.dl.world_size", 8_i64)],
                false,
            );
        }
        assert_eq!(
            std::env::var(OTEL_RESOURCE_ATTRIBUTES).unwrap(),
            "nv.dl.rank=1,launcher.id=abc,nv.dl.world_size=8"
        );
    });
}

/// The safe way for a launcher: `extend` into a `Command`'s environment.
#[test]
fn an_extended_value_given_to_a_command_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let value = carrier::extend(
        "slurm.job.id=from-launch,nv.dl.rank=9",
        &[kv("nv.dl.rank", 1_i64), kv("nv.dl.world_size", 2_i64)],
        true,
    );
    let out = Child::example("trainer")
        .env(OTEL_RESOURCE_ATTRIBUTES, &value)
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env("CUDA_VISIBLE_DEVICES", "")
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.path().join("lens-{rank}.jsonl"),
        )
        .args(["--steps", "1", "--step-ms", "0"])
        .run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = console::spans(console::read(&dir.path().join("lens-1.jsonl")));
    let resource = &spans[0]["resource"]["attributes"];
    assert_eq!(resource["nv.dl.rank"], 1);
    assert_eq!(resource["nv.dl.world_size"], 2);
    assert_eq!(resource["slurm.job.id"], "from-launch");
}
