//! `nemo-lens set-slurm-resource-attrs`: one shell line that adds the Slurm job's identity to
//! `OTEL_RESOURCE_ATTRIBUTES`, for `eval` in a batch script or a task prolog, as Python NeMo
//! Lens's command of the same name.
//!
//! ```sh
//! eval "$(nemo-lens set-slurm-resource-attrs --stage sbatch)"           # in the batch script
//! srun sh -c 'eval "$(nemo-lens set-slurm-resource-attrs --stage task --container-image "$IMAGE")"; exec trainer'
//! ```
//!
//! The attributes are the Slurm part of [`nemo_lens::identity::job_attributes`] (typed Slurm
//! attributes and `nv.dl.job.uuid`; nothing outside a job; not the run's UUID). `--stage sbatch` leaves out the task-local
//! `slurm.topology.addr` / `slurm.topology.addr_pattern`; `--stage task` adds `host.name` and,
//! with `--container-image`, `nv.dl.launch.container.image`. Keys the variable already holds
//! win: only missing keys are appended, and the segments already there are kept byte for byte
//! ([`nemo_lens::carrier::extend`]). The value is quoted as Python's `shlex.quote`.
//! Stdout closed (`>&-`) or any write error exits 2: the line is the command's whole output.

use std::io::Write;

use anyhow::anyhow;
use nemo_lens::{Overwrite, carrier, identity, semconv};
use opentelemetry::KeyValue;

use crate::Failure;

/// Where in the launch the command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stage {
    /// The batch script, once per job (on the head node, outside any step).
    Sbatch,
    /// Each task (inside `srun`), once per process.
    Task,
}

/// Runs `nemo-lens set-slurm-resource-attrs`.
pub fn run(stage: Stage, container_image: Option<&str>) -> Result<(), Failure> {
    let image = container_image.filter(|i| !i.is_empty());
    if image.is_some() && stage != Stage::Task {
        return Err(Failure::setup(anyhow!(
            "--container-image requires --stage task"
        )));
    }
    if stdout_closed() {
        // Nothing would reach the `eval`: the job would run without its identity.
        return Err(Failure::setup(anyhow!(
            "cannot write to stdout: it is closed (the export line goes to stdout, for eval)"
        )));
    }
    let line = export_line(stage, image, &|k| std::env::var(k).ok(), &inherited());
    let mut out = std::io::stdout().lock();
    out.write_all(&line)
        .and_then(|()| out.flush())
        .map_err(|e| Failure::setup(anyhow!(e).context("cannot write to stdout")))
}

/// The variable the identity is carried in.
const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// Whether the process started with stdout closed (`>&-`). Rust's runtime puts `/dev/null`,
/// opened read-write, on a closed standard descriptor before `main`, so writes to it succeed;
/// a shell's `>/dev/null` opens it write-only, and is an ordinary output.
fn stdout_closed() -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: fcntl and fstat on descriptor 1 with a zeroed, owned `stat` buffer.
    let (flags, stat) = unsafe {
        let flags = libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFL);
        let mut stat: libc::stat = std::mem::zeroed();
        let rc = libc::fstat(libc::STDOUT_FILENO, &mut stat);
        (flags, (rc == 0).then_some(stat))
    };
    let Some(stat) = stat else {
        return true;
    };
    if flags < 0 {
        return true;
    }
    let null = std::fs::metadata("/dev/null").map(|m| m.rdev()).ok();
    stat.st_mode & libc::S_IFMT == libc::S_IFCHR
        && Some(stat.st_rdev) == null
        && flags & libc::O_ACCMODE == libc::O_RDWR
}

/// The variable's current bytes (empty when unset).
fn inherited() -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    std::env::var_os(OTEL_RESOURCE_ATTRIBUTES)
        .map(|v| v.as_bytes().to_vec())
        .unwrap_or_default()
}

/// `export OTEL_RESOURCE_ATTRIBUTES=<quoted value>\n`.
fn export_line(
    stage: Stage,
    image: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
    inherited: &[u8],
) -> Vec<u8> {
    let mut additions = identity::job_attributes(lookup, None);
    // The shell line hands down the job, not one run of it.
    additions.retain(|kv| kv.key.as_str() != semconv::NV_DL_RUN_UUID);
    match stage {
        Stage::Sbatch => additions.retain(|kv| {
            ![
                semconv::SLURM_TOPOLOGY_ADDR,
                semconv::SLURM_TOPOLOGY_ADDR_PATTERN,
            ]
            .contains(&kv.key.as_str())
        }),
        Stage::Task => {
            if let Some(host) = hostname() {
                additions.push(KeyValue::new(semconv::HOST_NAME, host));
            }
            if let Some(image) = image {
                additions.push(KeyValue::new(
                    semconv::NV_DL_LAUNCH_CONTAINER_IMAGE,
                    image.to_owned(),
                ));
            }
        }
    }
    let value = {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        carrier::extend(
            std::ffi::OsStr::from_bytes(inherited),
            &additions,
            Overwrite::No,
        )
        .into_vec()
    };
    let mut line = format!("export {OTEL_RESOURCE_ATTRIBUTES}=").into_bytes();
    line.extend_from_slice(&shell_quote(&value));
    line.push(b'\n');
    line
}

/// Python's `shlex.quote`: `''` for nothing; the value itself when every byte is one of
/// `A–Z a–z 0–9 _ @ % + = : , . / -`; else the value in single quotes, each `'` written
/// `'"'"'`.
fn shell_quote(value: &[u8]) -> Vec<u8> {
    if value.is_empty() {
        return b"''".to_vec();
    }
    let safe = |b: &u8| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(b);
    if value.iter().all(safe) {
        return value.to_vec();
    }
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'\'');
    for &b in value {
        if b == b'\'' {
            out.extend_from_slice(b"'\"'\"'");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    out
}

/// This machine's host name (`gethostname`), as Python's `socket.gethostname()`.
fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the pointer and length describe `buf`, which outlives the call.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<libc::c_char>(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..len]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_is_shlex_s() {
        assert_eq!(shell_quote(b""), b"''");
        assert_eq!(shell_quote(b"a=1,b=x%20y"), b"a=1,b=x%20y");
        assert_eq!(shell_quote(b"a=~"), b"'a=~'");
        assert_eq!(shell_quote(b"it's"), b"'it'\"'\"'s'");
    }

    #[test]
    fn sbatch_drops_topology_and_keeps_what_is_there() {
        let env = [
            ("SLURM_JOB_ID", "7"),
            ("SLURM_TOPOLOGY_ADDR", "a.b"),
            ("SLURM_TOPOLOGY_ADDR_PATTERN", "s.n"),
        ];
        let lookup = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let line = export_line(Stage::Sbatch, None, &lookup, b"a=x%20y,slurm.job.name=");
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "export OTEL_RESOURCE_ATTRIBUTES=a=x%20y,slurm.job.name=,slurm.job.id=7,\
             slurm.job.id.raw=7,slurm.array.job_id=7,slurm.array.task_id=0,slurm.array.count=1,\
             slurm.restart_count=0,nv.dl.job.uuid=f9f08413-8d27-50e7-bbee-41ce6d4a3c5a\n"
        );
    }
}
