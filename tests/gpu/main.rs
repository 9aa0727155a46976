//! On the GPU, tested without one: the trainer example runs as a real process and loads the
//! libraries as it does in production, stand-ins of their real interfaces built here from C.
//!
//! * [`nvml`]: `NEMO_LENS_DETECT_GPU` against a stand-in `libnvidia-ml.so.1` (`nvml_standin.c`)
//!   first on `LD_LIBRARY_PATH`: the `nv.gpu.*` resource attributes in the console JSONL, the
//!   local-rank mapping, NVML errors, the library missing, the variable off;
//! * [`nvtx`]: `NEMO_LENS_NVTX` under an NVTX injection library that records what it receives
//!   (`nvtx_recorder.c`, named by `NVTX_INJECTION64_PATH`, as Nsight Systems attaches): ranges,
//!   nesting, domain, categories, marks, and nothing where nothing should be pushed.
//!
//! The tests run in every build: without the `nvml` or `nvtx` feature they check that the
//! variables then change nothing but one warning. A C compiler (`cc`, or `$CC`) builds the
//! libraries; a build failure fails the test. The trainer must be built (`cargo test` builds
//! the examples; `cargo test --test gpu` alone does not: run `cargo build --examples` first).

mod nvml;
mod nvtx;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// Builds the shared library `name` from the C file `source` of this directory with `defines`
/// (once per test run), into `CARGO_TARGET_TMPDIR/gpu/<variant>/`, and returns its path.
fn c_library(source: &str, name: &str, variant: &str, defines: &[&str]) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("gpu")
        .join(variant);
    let lib = dir.join(name);
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if built.contains(&lib) {
        return lib;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/gpu")
        .join(source);
    // Built under a name of this process, then renamed: another test run may use the library.
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-pthread"])
        .arg(format!("-Wl,-soname,{name}"))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {cc:?} for {source}: {e}"));
    assert!(
        out.status.success(),
        "{cc:?} failed to build {source}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&tmp, &lib).unwrap();
    built.insert(lib.clone());
    lib
}

/// The trainer example, exporting its spans to the console file `<dir>/rank{rank}.jsonl`, with
/// metrics off and short steps.
fn trainer(dir: &Path) -> nemo_lens_test_support::child::Child {
    nemo_lens_test_support::child::Child::example("trainer")
        .env("NEMO_LENS_ENABLED", "1")
        .env("NEMO_LENS_EXPORTER", "console")
        .env("NEMO_LENS_METRICS_ENABLED", "0")
        .env(
            "NEMO_LENS_CONSOLE_PATH",
            dir.join("rank{rank}.jsonl").display().to_string(),
        )
        .env_remove("LOCAL_RANK")
        .env_remove("SLURM_LOCALID")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("RUST_LOG")
        .args(["--step-ms", "1"])
}
