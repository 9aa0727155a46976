//! Peak resident memory of a command, from `wait4(2)`, measured by a probe process.
//!
//! Linux folds the address space a process had *before* `exec` into its `ru_maxrss`, and a
//! child spawned by a test or bench process starts in a copy (or, with `posix_spawn`, in the
//! very address space) of a process that may hold large inputs. So the executable re-runs
//! itself as a small probe: the probe, fresh from `exec` and a few MiB in size, spawns the
//! command, waits for it with `wait4` and writes its `ru_maxrss` to a file. An executable that
//! measures calls [`serve_as_probe`] first in its own `main` (`harness = false`).

use std::ffi::OsString;
use std::fs;
use std::process::{Command, Stdio};

/// Set in the probe's environment: where it writes the peak RSS of the command it runs.
const PROBE_ENV: &str = "NEMO_LENS_CLI_BOUNDS_PROBE_OUT";

/// What [`run_measured`] saw.
#[derive(Debug)]
pub struct Measured {
    /// Exit code (`None` when a signal ended the process).
    pub code: Option<i32>,
    /// Everything the process wrote to stdout.
    pub stdout: String,
    /// Everything the process wrote to stderr.
    pub stderr: String,
    /// Peak resident set size of the process, in bytes.
    pub peak_rss: u64,
}

/// The probe: runs the command after the first argument with this process's stdio, waits for
/// it with `wait4`, writes its `ru_maxrss` (bytes) to `out` and exits with its status.
fn probe(out: OsString) -> ! {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().expect("probe: no command");
    let child = Command::new(program)
        .args(args)
        .spawn()
        .expect("probe: spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes; `pid` is our unwaited child.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::Interrupted,
            "probe: wait4: {err}"
        );
    }
    // Linux reports ru_maxrss in KiB.
    fs::write(out, (usage.ru_maxrss as u64 * 1024).to_string()).expect("probe: write");
    std::process::exit(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    });
}

/// Runs `cmd` (no stdin, stdout and stderr captured) through the probe; see the module
/// documentation.
pub fn run_measured(cmd: &Command) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("peak-rss");
    let mut probe = Command::new(std::env::current_exe().unwrap());
    probe
        .env(PROBE_ENV, &out)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => probe.env(k, v),
            None => probe.env_remove(k),
        };
    }
    let output = probe.stdin(Stdio::null()).output().expect("run the probe");
    let peak_rss = fs::read_to_string(&out)
        .unwrap_or_else(|e| panic!("the probe wrote no figure ({e}): {output:?}"))
        .parse()
        .unwrap();
    Measured {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        peak_rss,
    }
}

/// In the probe (the executable re-run by [`run_measured`]): runs the command and exits.
/// Elsewhere: returns at once.
pub fn serve_as_probe() {
    if let Some(out) = std::env::var_os(PROBE_ENV) {
        probe(out);
    }
}
