//! `NEMO_LENS_THREAD_ATTRIBUTES`: every recorded span carries `thread.id` (the OS thread id)
//! and `thread.name` of the thread it was created on; off by default, so that console JSONL
//! stays the Python library's. Real console JSONL files (a temporary directory), the
//! configuration read from the variables.

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

use nemo_lens::{LensConfig, LensError, Telemetry, semconv};
use nemo_lens_test_support::console;
use serde_json::Value;
use tracing_subscriber::prelude::*;

/// The configuration the variables `extra` (beside a console exporter writing into `dir`) give.
fn config(dir: &Path, extra: &[(&str, &str)]) -> nemo_lens::Result<LensConfig> {
    let path = dir.join("rank{rank}.jsonl").display().to_string();
    let mut vars = vec![
        ("NEMO_LENS_ENABLED", "1"),
        ("NEMO_LENS_EXPORTER", "console"),
        ("NEMO_LENS_EXPORT_STRATEGY", "all_ranks"),
        ("NEMO_LENS_METRICS_ENABLED", "0"),
        ("NEMO_LENS_CONSOLE_PATH", path.as_str()),
    ];
    vars.extend_from_slice(extra);
    LensConfig::from_lookup("NEMO_LENS", None, |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
}

/// The OS id of the calling thread, as `/proc/thread-self` names it (`<pid>/task/<tid>`).
fn os_thread_id() -> i64 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a thread link: {}", link.display()))
}

/// Two named threads, `loader` and `trainer`, each make a `work` span with a child `inner`,
/// both open at once; an unnamed thread makes a `quiet` span. Returns the span lines and the
/// OS thread ids of `loader`, `trainer` and the unnamed thread.
fn run(extra: &[(&str, &str)]) -> (Vec<Value>, [i64; 3]) {
    let dir = tempfile::tempdir().unwrap();
    let telemetry = Telemetry::builder(config(dir.path(), extra).unwrap())
        .allow_reinit_for_testing(true)
        .install_globals(false)
        .build()
        .unwrap();
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(telemetry.layer()));
    let both_open = Barrier::new(2);
    let ids = std::thread::scope(|s| {
        let named = |name: &'static str| {
            let (dispatch, both_open) = (&dispatch, &both_open);
            std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(s, move || {
                    tracing::dispatcher::with_default(dispatch, || {
                        tracing::info_span!("work", worker = name).in_scope(|| {
                            tracing::info_span!("inner").in_scope(|| both_open.wait());
                        });
                    });
                    os_thread_id()
                })
                .unwrap()
        };
        let (loader, trainer) = (named("loader"), named("trainer"));
        let unnamed = s.spawn(|| {
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::info_span!("quiet").in_scope(|| {});
            });
            os_thread_id()
        });
        [loader, trainer]
            .map(|h| h.join().unwrap())
            .into_iter()
            .chain([unnamed.join().unwrap()])
            .collect::<Vec<_>>()
    });
    drop(dispatch);
    telemetry.shutdown(Duration::from_secs(10)).unwrap();
    let spans = console::spans(console::lines(dir.path(), 0));
    (spans, [ids[0], ids[1], ids[2]])
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[test]
fn spans_of_two_named_threads_carry_each_threads_id_and_name() {
    let (spans, [loader, trainer, unnamed]) = run(&[("NEMO_LENS_THREAD_ATTRIBUTES", "true")]);
    assert_eq!(console::names(&spans).len(), 5, "{spans:#?}");
    assert_ne!(loader, trainer);
    for (name, tid) in [("loader", loader), ("trainer", trainer)] {
        let work = console::all_named(&spans, "work")
            .into_iter()
            .find(|s| attribute(s, "worker") == name)
            .unwrap_or_else(|| panic!("no work span of {name}: {spans:#?}"));
        let inner = console::all_named(&spans, "inner")
            .into_iter()
            .find(|s| s["parent_id"] == work["context"]["span_id"])
            .unwrap_or_else(|| panic!("no inner span of {name}: {spans:#?}"));
        for span in [work, inner] {
            assert_eq!(attribute(span, semconv::THREAD_ID), tid, "{span}");
            assert_eq!(attribute(span, semconv::THREAD_NAME), name, "{span}");
        }
        // After the span's own fields.
        let keys = console::keys(&work["attributes"]);
        assert_eq!(keys, ["worker", "thread.id", "thread.name"], "{work}");
    }
    // A thread without a name: its id only.
    let quiet = console::named(&spans, "quiet");
    assert_eq!(attribute(quiet, semconv::THREAD_ID), unnamed, "{quiet}");
    assert!(attribute(quiet, semconv::THREAD_NAME).is_null(), "{quiet}");
}

#[test]
fn off_by_default_and_when_turned_off_no_span_names_its_thread() {
    for extra in [&[][..], &[("NEMO_LENS_THREAD_ATTRIBUTES", "0")][..]] {
        let (spans, _) = run(extra);
        assert_eq!(spans.len(), 5, "{spans:#?}");
        for span in &spans {
            let keys = console::keys(&span["attributes"]);
            assert!(
                !keys.contains(&semconv::THREAD_ID) && !keys.contains(&semconv::THREAD_NAME),
                "{extra:?}: {span}"
            );
        }
    }
}

#[test]
fn a_bad_value_is_an_error_naming_the_variable_and_the_accepted_values() {
    let dir = tempfile::tempdir().unwrap();
    let err = config(dir.path(), &[("NEMO_LENS_THREAD_ATTRIBUTES", "threads")]).unwrap_err();
    assert!(
        matches!(&err, LensError::InvalidBool { var, value }
            if var == "NEMO_LENS_THREAD_ATTRIBUTES" && value == "threads"),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("NEMO_LENS_THREAD_ATTRIBUTES") && message.contains("'true'/'false'"),
        "{message}"
    );
}
