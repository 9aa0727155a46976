//! `NEMO_LENS_DETECT_GPU`: the trainer's resource names the GPU of its rank, read from the
//! stand-in `libnvidia-ml.so.1` (three devices with known values; `nvml_standin.c`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use nemo_lens_test_support::console;

/// The directory holding the stand-in (`variant`: a build without one symbol, or `""`).
fn standin(variant: &str) -> PathBuf {
    let defines: Vec<String> = (!variant.is_empty())
        .then(|| format!("STANDIN_{variant}"))
        .into_iter()
        .collect();
    let defines: Vec<&str> = defines.iter().map(String::as_str).collect();
    let dir = format!("nvml{}{variant}", if variant.is_empty() { "" } else { "-" });
    crate::c_library("nvml_standin.c", "libnvidia-ml.so.1", &dir, &defines)
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The `nv.gpu.*` attributes of the stand-in's device `index`, with their JSON types.
fn device(index: usize) -> BTreeMap<String, Value> {
    let (model, uuid, serial, bus_id, cc, memory) = [
        (
            "NVIDIA H100 80GB HBM3",
            "GPU-0b1d2c3e-4f50-6172-8394-a5b6c7d8e9f0",
            "1650123000001",
            "00000000:18:00.0",
            "9.0",
            85_520_809_984_u64,
        ),
        (
            "NVIDIA A100-SXM4-40GB",
            "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809",
            "1562320011222",
            "00000000:3B:00.0",
            "8.0",
            42_949_672_960,
        ),
        (
            "NVIDIA L40S",
            "GPU-2c3d4e5f-6071-8293-a4b5-c6d7e8f90a1b",
            "1324021033344",
            "00000001:86:00.0",
            "8.9",
            48_305_799_168,
        ),
    ][index];
    BTreeMap::from([
        ("nv.gpu.index".into(), json!(index)),
        ("nv.gpu.model".into(), json!(model)),
        ("nv.gpu.uuid".into(), json!(uuid)),
        ("nv.gpu.serial".into(), json!(serial)),
        ("nv.gpu.pci_bus_id".into(), json!(bus_id)),
        ("nv.gpu.compute_capability".into(), json!(cc)),
        ("nv.gpu.memory_total".into(), json!(memory)),
        ("nv.gpu.driver_version".into(), json!("550.54.15")),
    ])
}

/// Variables of one run.
type Vars<'a> = &'a [(&'a str, &'a str)];

/// One trainer run with detection on.
struct Run {
    /// The `nv.gpu.*` attributes of the exported resource.
    gpu: BTreeMap<String, Value>,
    /// The other resource attributes.
    resource: BTreeMap<String, Value>,
    stderr: String,
    /// The NVML calls the stand-in received (`name[ device]`).
    calls: Vec<String>,
}

/// Runs the trainer (rank 0 of 1, exporting) with `LD_LIBRARY_PATH=lib_dir`, detection on
/// (unless `envs` say otherwise), `envs` and `args`.
fn run(lib_dir: &Path, envs: &[(&str, &str)], args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nvml-calls.log");
    let out = crate::trainer(dir.path())
        .env("LD_LIBRARY_PATH", lib_dir)
        .env("NVML_STANDIN_LOG", &log)
        .env("NEMO_LENS_DETECT_GPU", "1")
        .envs(envs.iter().copied())
        .args(["--steps", "1"])
        .args(args)
        .run();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{envs:?}: {stderr}");
    let spans = console::spans(console::read(&dir.path().join("rank0.jsonl")));
    assert!(!spans.is_empty(), "{envs:?}: no span exported");
    let attributes = |span: &Value| -> BTreeMap<String, Value> {
        let map = span["resource"]["attributes"].as_object().unwrap();
        map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let all = attributes(&spans[0]);
    for span in &spans {
        assert_eq!(attributes(span), all, "one resource for every span");
    }
    let (gpu, resource) = all.into_iter().partition(|(k, _)| k.starts_with("nv.gpu."));
    let calls = match std::fs::read_to_string(&log) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", log.display()),
    };
    Run {
        gpu,
        resource,
        stderr,
        calls,
    }
}

/// The line of a build without the `nvml` feature, which never loads NVML.
#[track_caller]
fn assert_feature_off(run: &Run) {
    assert!(run.gpu.is_empty(), "{:?}", run.gpu);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("`nvml` feature"), "{}", run.stderr);
    assert!(run.calls.is_empty(), "{:?}", run.calls);
}

/// The eight attributes of device `index`, with their types, and nothing on stderr.
#[track_caller]
fn assert_device(run: &Run, index: usize) {
    if !cfg!(feature = "nvml") {
        return assert_feature_off(run);
    }
    assert_eq!(run.gpu, device(index), "stderr: {}", run.stderr);
    assert_eq!(run.stderr, "");
}

/// No `nv.gpu.*` attribute, and one stderr line that gives `reason`.
#[track_caller]
fn assert_none(run: &Run, reason: &str) {
    if !cfg!(feature = "nvml") {
        return assert_feature_off(run);
    }
    assert!(run.gpu.is_empty(), "{:?}", run.gpu);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr
            .starts_with("nemo-lens: warning: no nv.gpu.* attributes")
            && run.stderr.contains(reason),
        "want {reason:?} in {}",
        run.stderr
    );
    assert!(
        run.resource.contains_key("service.name"),
        "the rest of the resource is kept"
    );
}

#[test]
fn the_resource_names_the_ranks_gpu_with_what_nvml_reports() {
    let run = run(
        &standin(""),
        &[("CUDA_VISIBLE_DEVICES", "2,1"), ("LOCAL_RANK", "1")],
        &[],
    );
    assert_device(&run, 1);
    if cfg!(feature = "nvml") {
        // One initialisation, one device read the way Python reads it, one shutdown.
        let calls: Vec<&str> = run.calls.iter().map(String::as_str).collect();
        assert_eq!(
            calls,
            [
                "nvmlInitWithFlags",
                "nvmlSystemGetDriverVersion", // nvml-wrapper's, at initialisation
                "nvmlDeviceGetHandleByIndex_v2 1",
                "nvmlDeviceGetName 1",
                "nvmlDeviceGetUUID 1",
                "nvmlDeviceGetSerial 1",
                "nvmlDeviceGetPciInfo_v3 1",
                "nvmlDeviceGetCudaComputeCapability 1",
                "nvmlDeviceGetMemoryInfo_v2 1",
                "nvmlSystemGetDriverVersion",
                "nvmlShutdown",
            ]
        );
    }
}

#[test]
fn the_local_rank_picks_the_gpu_through_cuda_visible_devices() {
    let lib = standin("");
    let cases: &[(Vars, &[&str], usize)] = &[
        (&[], &[], 0),
        (&[("LOCAL_RANK", "2")], &[], 2),
        (&[("SLURM_LOCALID", "1")], &[], 1),
        (&[("LOCAL_RANK", ""), ("SLURM_LOCALID", "2")], &[], 2),
        // Set but not an integer: rank 0 (SLURM_LOCALID is not consulted), as Python.
        (&[("LOCAL_RANK", "x"), ("SLURM_LOCALID", "2")], &[], 0),
        (
            &[("LOCAL_RANK", "1"), ("CUDA_VISIBLE_DEVICES", "2,0")],
            &[],
            0,
        ),
        (&[("CUDA_VISIBLE_DEVICES", " 2 , 1 ")], &[], 2),
        (&[("CUDA_VISIBLE_DEVICES", "   ")], &[], 0),
        // The program's local rank wins over the variables.
        (
            &[("LOCAL_RANK", "0"), ("CUDA_VISIBLE_DEVICES", "0,2")],
            &["--local-rank", "1"],
            2,
        ),
    ];
    for (envs, args, want) in cases {
        let run = run(&lib, envs, args);
        if cfg!(feature = "nvml") {
            assert_eq!(run.gpu, device(*want), "{envs:?} {args:?}: {}", run.stderr);
        }
        assert_device(&run, *want);
    }
}

#[test]
fn a_local_rank_with_no_gpu_index_gives_no_attributes() {
    let lib = standin("");
    let cases: &[(Vars, &str)] = &[
        (
            &[(
                "CUDA_VISIBLE_DEVICES",
                "GPU-1a2b3c4d-5e6f-7081-92a3-b4c5d6e7f809",
            )],
            "entry 'GPU-1a2b3c4d",
        ),
        (
            &[("CUDA_VISIBLE_DEVICES", "0,,1"), ("LOCAL_RANK", "1")],
            "entry ''",
        ),
        (
            &[("CUDA_VISIBLE_DEVICES", "0,1"), ("LOCAL_RANK", "2")],
            "past the 2 entries",
        ),
        // Python would index from the end, or hand NVML a wrapped-around number.
        (
            &[("CUDA_VISIBLE_DEVICES", "0,2"), ("LOCAL_RANK", "-1")],
            "local rank -1",
        ),
        (&[("LOCAL_RANK", "4294967296")], "local rank 4294967296"),
        (&[("CUDA_VISIBLE_DEVICES", "-1")], "entry '-1'"),
    ];
    for (envs, reason) in cases {
        let run = run(&lib, envs, &[]);
        assert_none(&run, reason);
        assert!(run.calls.is_empty(), "{envs:?}: NVML was not needed");
    }
}

#[test]
fn a_failing_optional_call_leaves_out_its_attribute_only() {
    let lib = standin("");
    for (fault, missing) in [
        ("nvmlDeviceGetSerial=3", "nv.gpu.serial"),
        ("nvmlDeviceGetSerial=badutf8", "nv.gpu.serial"),
        ("nvmlDeviceGetPciInfo_v3", "nv.gpu.pci_bus_id"),
        ("nvmlDeviceGetPciInfo_v3=badutf8", "nv.gpu.pci_bus_id"),
        (
            "nvmlDeviceGetCudaComputeCapability",
            "nv.gpu.compute_capability",
        ),
        ("nvmlDeviceGetMemoryInfo_v2", "nv.gpu.memory_total"),
        ("nvmlSystemGetDriverVersion", "nv.gpu.driver_version"),
    ] {
        let run = run(&lib, &[("NVML_STANDIN_FAIL", fault)], &[]);
        if !cfg!(feature = "nvml") {
            assert_feature_off(&run);
            continue;
        }
        let mut want = device(0);
        want.remove(missing);
        assert_eq!(run.gpu, want, "{fault}");
        assert_eq!(run.stderr, "", "{fault}");
    }
}

#[test]
fn a_failing_required_call_gives_no_attributes_and_one_line() {
    let lib = standin("");
    for (envs, reason) in [
        (
            [("NVML_STANDIN_FAIL", "nvmlInitWithFlags=9")],
            "NVIDIA driver is not loaded",
        ),
        (
            [("NVML_STANDIN_FAIL", "nvmlDeviceGetHandleByIndex_v2=2")],
            "NVML: ",
        ),
        ([("NVML_STANDIN_FAIL", "nvmlDeviceGetName")], "NVML: "),
        (
            [("NVML_STANDIN_FAIL", "nvmlDeviceGetUUID=badutf8")],
            "utf-8",
        ),
        ([("NVML_STANDIN_FAIL", "nvmlShutdown")], "NVML: "),
        ([("NVML_STANDIN_DEVICES", "0")], "NVML: "),
    ] {
        let run = run(&lib, &envs, &[]);
        assert_none(&run, reason);
        if cfg!(feature = "nvml") && envs[0].1 != "nvmlInitWithFlags=9" {
            assert!(
                run.calls.iter().any(|c| c == "nvmlShutdown"),
                "{envs:?}: NVML is shut down after a failed read: {:?}",
                run.calls
            );
        }
    }
}

#[test]
fn libraries_that_lack_a_symbol() {
    // A driver before R510 has no nvmlDeviceGetMemoryInfo_v2: the v1 call gives the total.
    let run_v1 = run(&standin("NO_MEMORY_V2"), &[], &[]);
    assert_device(&run_v1, 0);
    if cfg!(feature = "nvml") {
        assert!(
            run_v1
                .calls
                .iter()
                .any(|c| c == "nvmlDeviceGetMemoryInfo 0"),
            "{:?}",
            run_v1.calls
        );
    }
    // Without nvmlShutdown the binding would panic when dropped: no attributes, no panic.
    let no_shutdown = run(&standin("NO_SHUTDOWN"), &[], &[]);
    assert_none(&no_shutdown, "nvmlShutdown");
    assert!(
        !no_shutdown.stderr.contains("panicked"),
        "{}",
        no_shutdown.stderr
    );
    let no_init = run(&standin("NO_INIT_WITH_FLAGS"), &[], &[]);
    assert_none(&no_init, "nvmlInitWithFlags");
}

/// Whether the dynamic linker's cache knows a `libnvidia-ml.so.1` (a machine with the NVIDIA
/// driver): it is found there whatever `LD_LIBRARY_PATH` says.
fn system_has_nvml() -> bool {
    for ldconfig in ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"] {
        if let Ok(out) = Command::new(ldconfig).arg("-p").output()
            && out.status.success()
        {
            return String::from_utf8_lossy(&out.stdout).contains("libnvidia-ml.so.1");
        }
    }
    panic!("cannot run `ldconfig -p` to tell whether this machine has NVML");
}

#[test]
fn without_the_library_detection_says_so_once() {
    let empty = tempfile::tempdir().unwrap();
    let run = run(empty.path(), &[], &[]);
    if !cfg!(feature = "nvml") {
        return assert_feature_off(&run);
    }
    if !system_has_nvml() {
        assert_none(&run, "libnvidia-ml.so.1");
    } else if run.gpu.is_empty() {
        // The driver's library, on a machine without a usable GPU: loaded, and its error told.
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(
            !run.stderr.contains("cannot open shared object"),
            "{}",
            run.stderr
        );
    } else {
        // A GPU machine: the eight attributes of its GPU 0, with their types.
        assert_eq!(run.gpu.len(), 8, "{:?}", run.gpu);
        for (key, value) in &run.gpu {
            let int = key == "nv.gpu.index" || key == "nv.gpu.memory_total";
            assert_eq!(value.is_u64(), int, "{key}: {value}");
            assert!(int || value.is_string(), "{key}: {value}");
        }
        assert_eq!(run.gpu["nv.gpu.index"], json!(0));
    }
}

#[test]
fn values_from_the_launcher_win() {
    let run = run(
        &standin(""),
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "nv.gpu.uuid=GPU-from-the-launcher,team=ml",
        )],
        &[],
    );
    if !cfg!(feature = "nvml") {
        let launcher = BTreeMap::from([("nv.gpu.uuid".into(), json!("GPU-from-the-launcher"))]);
        assert_eq!(run.gpu, launcher);
        assert!(run.stderr.contains("`nvml` feature"), "{}", run.stderr);
        return;
    }
    let mut want = device(0);
    want.insert("nv.gpu.uuid".into(), json!("GPU-from-the-launcher"));
    assert_eq!(run.gpu, want);
    assert_eq!(run.resource["team"], json!("ml"));
}

#[test]
fn detection_off_or_on_a_rank_that_does_not_export_never_loads_nvml() {
    let lib = standin("");
    let off = run(&lib, &[("NEMO_LENS_DETECT_GPU", "0")], &[]);
    assert!(
        off.gpu.is_empty() && off.calls.is_empty(),
        "{:?}",
        off.calls
    );
    assert_eq!(off.stderr, "");
    let unset = run(&lib, &[("NEMO_LENS_DETECT_GPU", "")], &[]);
    assert!(unset.gpu.is_empty() && unset.calls.is_empty());
    assert_eq!(unset.stderr, "");

    // Rank 0 of 2 under `single_rank` (rank 1 exports): nothing is detected, nothing printed.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nvml-calls.log");
    let out = crate::trainer(dir.path())
        .env("LD_LIBRARY_PATH", &lib)
        .env("NVML_STANDIN_LOG", &log)
        .env("NEMO_LENS_DETECT_GPU", "1")
        .args(["--steps", "1", "--rank", "0", "--world-size", "2"])
        .run();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert!(!log.exists(), "a rank that does not export called NVML");
    assert!(console::read_if_any(&dir.path().join("rank0.jsonl")).is_empty());
}

#[test]
fn a_bad_value_is_an_error_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::trainer(dir.path())
        .env("NEMO_LENS_DETECT_GPU", "maybe")
        .args(["--steps", "1"])
        .run();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NEMO_LENS_DETECT_GPU") && stderr.contains("maybe"),
        "{stderr}"
    );
}

/// A `libnvidia-ml.so.1` whose loading never returns (its constructor blocks, as a library on
/// a hung NFS mount does) holds nothing of the process: the trainer trains and exports its
/// spans, says once that NVML did not answer, and SIGTERM ends it with its open spans flushed.
#[test]
fn an_nvml_library_that_never_loads_holds_nothing() {
    use std::os::unix::process::ExitStatusExt;
    use std::time::Duration;

    let lib = standin("HANG_IN_CONSTRUCTOR");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rank0.jsonl");
    let trainer = crate::trainer(dir.path())
        .env("LD_LIBRARY_PATH", &lib)
        .env("NEMO_LENS_DETECT_GPU", "1")
        .env("NEMO_LENS_SPAN_GROUPS", "per_step")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("RUST_LOG", "trainer=debug")
        .args(["--steps", "0", "--checkpoint-every", "0"])
        .timeout(Duration::from_secs(120))
        .spawn();
    let exported = nemo_lens_test_support::wait::try_wait_for(Duration::from_secs(60), || {
        // The lines written so far (the last may be half written).
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let spans = console::spans(console::parse(complete));
        (console::all_named(&spans, "train_step").len() >= 3).then_some(())
    });
    assert!(
        exported.is_some(),
        "no 3 train_step spans exported within 60 s; stderr:\n{}",
        trainer.stderr()
    );
    trainer.signal(libc::SIGTERM);
    let output = trainer.wait();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.signal(), Some(libc::SIGTERM), "{stderr}");
    let spans = console::spans(console::read(&out));
    // The run span, open at the signal, is flushed truncated (its reason event may be past
    // the event limit: one event per step).
    let train = console::named(&spans, "train");
    assert!(console::truncated(train), "{train}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("nemo-lens: warning: no nv.gpu.* attributes"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    if cfg!(feature = "nvml") {
        assert!(warnings[0].contains("did not answer"), "{stderr}");
    }
    assert!(
        spans
            .iter()
            .all(|s| s["resource"]["attributes"]["nv.gpu.uuid"].is_null())
    );
}

/// A library that fills the whole buffer of every string it returns and writes no terminating
/// NUL: each string is read within its buffer (as Python's ctypes buffers are), never past it.
#[test]
fn strings_without_a_terminating_nul_are_read_within_their_buffers() {
    let lib = standin("");
    let all = [
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlSystemGetDriverVersion",
    ]
    .map(|f| format!("{f}=unterminated"))
    .join(",");
    let run = run(&lib, &[("NVML_STANDIN_FAIL", &all)], &[]);
    if !cfg!(feature = "nvml") {
        return assert_feature_off(&run);
    }
    // The buffer sizes of nvml.h (and of Python's pynvml).
    let mut want = device(0);
    for (key, len) in [
        ("nv.gpu.model", 96),
        ("nv.gpu.uuid", 96),
        ("nv.gpu.serial", 30),
        ("nv.gpu.pci_bus_id", 32),
        ("nv.gpu.driver_version", 80),
    ] {
        want.insert(key.into(), json!("X".repeat(len)));
    }
    assert_eq!(run.gpu, want, "stderr: {}", run.stderr);
    assert_eq!(run.stderr, "");
}
