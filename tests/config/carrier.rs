//! `nemo_lens::carrier`: round trips through the environment of a spawned trainer (the encoder's
//! and decoder's vectors against Python are unit tests in `src/carrier/`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use nemo_lens::{Overwrite, carrier};
use opentelemetry::KeyValue;

use nemo_lens_test_support::child::{Child, run_alone};
use nemo_lens_test_support::console;

const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
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
            let _scope = unsafe { carrier::publish(&published, Overwrite::Yes) };
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
            let inner = unsafe {
                carrier::publish(&[kv("nv.dl.rank", 3_i64), kv("x", 1_i64)], Overwrite::No)
            };
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
            let _scope = unsafe { carrier::publish(&[kv("nv.dl.rank", 1_i64)], Overwrite::Yes) };
            assert_eq!(
                std::env::var(OTEL_RESOURCE_ATTRIBUTES).unwrap(),
                "nv.dl.rank=1"
            );
            panic!("worker start failed");
        });
        assert!(caught.is_err());
        assert_eq!(value(()), None);

        // A kept publication stays (Python's `set_otel_resource_attributes`), keeping what is
        // there unless told to overwrite.
        // SAFETY: as above.
        let kept = unsafe {
            std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, "nv.dl.rank=1,launcher.id=abc");
            carrier::publish(
                &[kv("nv.dl.rank", 2_i64), kv("nv.dl.world_size", 8_i64)],
                Overwrite::No,
            )
            .keep()
        };
        assert_eq!(kept, "nv.dl.rank=1,launcher.id=abc,nv.dl.world_size=8");
        assert_eq!(std::env::var_os(OTEL_RESOURCE_ATTRIBUTES), Some(kept));
    });
}

/// The safe way for a launcher: `extend` into a `Command`'s environment.
#[test]
fn an_extended_value_given_to_a_command_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let value = carrier::extend(
        "slurm.job.id=from-launch,nv.dl.rank=9",
        &[kv("nv.dl.rank", 1_i64), kv("nv.dl.world_size", 2_i64)],
        Overwrite::Yes,
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
