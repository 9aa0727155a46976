//! NVML is read in a child process, never in the application's.
//!
//! Loading `libnvidia-ml.so.1` runs code nemo-lens does not control while glibc's loader lock
//! is held: a library on a hung NFS mount, or a constructor that blocks, never returns, and
//! every other thread that then needs the loader (starting a thread that uses thread-locals of
//! a loaded library, resolving a symbol lazily, unwinding) blocks behind it: no span is
//! exported and SIGTERM's flush never runs. A driver stuck in the kernel holds `nvmlInit` the
//! same way, and a crashing library would take the training process with it.
//!
//! So the process loads nothing. It starts its own executable again (`/proc/self/exe`, through
//! `posix_spawn`: no `fork` of a large process, no `pthread_atfork` handler of the
//! application runs) with [`PROBE_VAR`] set; a constructor of nemo-lens
//! ([`PROBE_ENTRY`], in `.init_array`) sees the variable before `main`, reads the GPU's
//! identity, writes it to its stdout as one JSON line and ends with `_exit`: the program's
//! `main` never runs in the probe. The parent waits for the answer at most its timeout, then
//! kills the probe and goes on without `nv.gpu.*`; a probe that cannot die at once (stuck in
//! the kernel) is reaped by a thread of its own.
//!
//! The probe needs nemo-lens linked into the executable (the constructor must be the
//! executable's): in a shared library loaded by another program (a Python extension) nothing is
//! probed and detection says why.

use std::ffi::{c_char, c_int};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use opentelemetry::{KeyValue, Value};

/// Makes a process started from this program's executable the NVML probe:
/// `<physical GPU index>:<the parent's pid>` (a variable inherited from elsewhere names another
/// parent, and the program runs as usual).
const PROBE_VAR: &str = "NEMO_LENS_NVML_PROBE";

/// The most of the probe's answer read (eight attributes are a few hundred bytes).
const MAX_ANSWER_BYTES: usize = 64 << 10;

/// The constructor that turns a process into the probe: the executable's (see the module
/// docs). Every process that links nemo-lens with the `nvml` feature runs it once before
/// `main`: one environment lookup.
#[used]
#[unsafe(link_section = ".init_array")]
static PROBE_ENTRY: unsafe extern "C" fn(c_int, *const *const c_char, *const *const c_char) =
    probe_entry;

unsafe extern "C" fn probe_entry(_: c_int, _: *const *const c_char, _: *const *const c_char) {
    let Some(index) = std::env::var_os(PROBE_VAR).and_then(|v| probe_index(v.to_str()?)) else {
        return;
    };
    let answer = match std::panic::catch_unwind(|| super::nvml::read(index)) {
        Ok(Ok(attributes)) => encode(&attributes),
        Ok(Err(e)) => serde_json::json!({ "error": format!("NVML: {e}") }),
        Err(_) => serde_json::json!({ "error": "the NVML binding panicked" }),
    };
    let mut line = answer.to_string().into_bytes();
    line.push(b'\n');
    let mut rest = &line[..];
    while !rest.is_empty() {
        // SAFETY: writes bytes of a live buffer to this process's stdout.
        let n = unsafe { libc::write(1, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            break;
        }
        rest = &rest[n as usize..];
    }
    // SAFETY: ends the probe without running the program's `atexit` handlers or destructors.
    unsafe { libc::_exit(0) }
}

/// The GPU index [`PROBE_VAR`] asks for, when it was set by this process's parent.
fn probe_index(value: &str) -> Option<u32> {
    let (index, parent) = value.split_once(':')?;
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    (parent.parse::<libc::pid_t>().ok()? == ppid)
        .then(|| index.parse().ok())
        .flatten()
}

/// The answer line of attributes: `{"attributes": [[key, value], ...]}` in their order.
fn encode(attributes: &[KeyValue]) -> serde_json::Value {
    let pairs: Vec<serde_json::Value> = attributes
        .iter()
        .map(|kv| {
            let value = match &kv.value {
                Value::I64(i) => serde_json::json!(i),
                other => serde_json::json!(other.as_str()),
            };
            serde_json::json!([kv.key.as_str(), value])
        })
        .collect();
    serde_json::json!({ "attributes": pairs })
}

/// The attributes of an answer line, or the probe's error.
fn decode(line: &[u8]) -> Result<Vec<KeyValue>, String> {
    let bad = || "the NVML probe gave an unreadable answer".to_string();
    let answer: serde_json::Value = serde_json::from_slice(line).map_err(|_| bad())?;
    if let Some(error) = answer.get("error").and_then(|e| e.as_str()) {
        return Err(error.to_string());
    }
    let pairs = answer
        .get("attributes")
        .and_then(|a| a.as_array())
        .ok_or_else(bad)?;
    pairs
        .iter()
        .map(|pair| {
            let key = pair.get(0).and_then(|k| k.as_str()).ok_or_else(bad)?;
            if !key.starts_with("nv.gpu.") {
                return Err(bad());
            }
            let value = match pair.get(1) {
                Some(serde_json::Value::String(s)) => Value::from(s.clone()),
                Some(v) => Value::I64(v.as_i64().ok_or_else(bad)?),
                None => return Err(bad()),
            };
            Ok(KeyValue::new(key.to_string(), value))
        })
        .collect()
}

/// Whether [`PROBE_ENTRY`] is part of the program's executable (not of a shared library
/// another program loaded), so that the executable started again becomes the probe.
fn linked_into_the_executable() -> bool {
    // SAFETY: dladdr only reads the loader's tables; `info` is written on success.
    let base_of = |addr: *const libc::c_void| unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        (libc::dladdr(addr, &mut info) != 0).then_some(info.dli_fbase)
    };
    // SAFETY: getauxval has no preconditions; AT_PHDR points into the executable's image.
    let program = unsafe { libc::getauxval(libc::AT_PHDR) } as *const libc::c_void;
    let ours = std::ptr::addr_of!(PROBE_ENTRY).cast::<libc::c_void>();
    matches!((base_of(program), base_of(ours)), (Some(a), Some(b)) if a == b)
}

/// The `nv.gpu.*` attributes of the GPU at physical `index`, read by a probe process within
/// `timeout`, or why there are none.
pub(super) fn read(index: u32, timeout: Duration) -> Result<Vec<KeyValue>, String> {
    if !linked_into_the_executable() {
        return Err(
            "NVML is read by a probe process started from the program's executable, and \
             nemo-lens is not linked into it (a shared library loaded by another program)"
                .into(),
        );
    }
    let deadline = Instant::now() + timeout;
    let mut child = Command::new("/proc/self/exe")
        .arg0("nemo-lens-nvml-probe")
        .env(PROBE_VAR, format!("{index}:{}", std::process::id()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the NVML probe: {e}"))?;
    let answer = read_answer(&mut child, deadline);
    end(child);
    match answer {
        Some(line) if !line.is_empty() => decode(&line),
        Some(_) => Err("the NVML probe ended without an answer".into()),
        None => Err(format!(
            "NVML did not answer within {} s",
            timeout.as_secs()
        )),
    }
}

/// The probe's stdout up to its end (or [`MAX_ANSWER_BYTES`]); `None` if it is not done by
/// `deadline`.
fn read_answer(child: &mut Child, deadline: Instant) -> Option<Vec<u8>> {
    let stdout = child.stdout.as_mut()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let mut fd = libc::pollfd {
            fd: stdout.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(left.as_millis().max(1)).unwrap_or(c_int::MAX);
        // SAFETY: polls one descriptor we own.
        let ready = unsafe { libc::poll(&mut fd, 1, ms) };
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Some(Vec::new());
        }
        if ready <= 0 {
            continue;
        }
        // Readable or hung up: this read does not block.
        match stdout.read(&mut buf) {
            Ok(0) => return Some(answer),
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() >= MAX_ANSWER_BYTES {
                    answer.truncate(MAX_ANSWER_BYTES);
                    return Some(answer);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(answer),
        }
    }
}

/// Kills and reaps the probe without waiting on it here: a probe stuck in the kernel dies
/// only when it leaves it, and a thread of its own waits for that.
fn end(mut child: Child) {
    let _ = child.kill();
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let reaper = std::thread::Builder::new()
        .name("nemo-lens-nvml".into())
        .spawn(move || {
            let _ = child.wait();
        });
    // Without a thread the probe stays a zombie until this process ends.
    drop(reaper);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_bad_ones_are_errors() {
        let attributes = vec![
            KeyValue::new("nv.gpu.index", 1_i64),
            KeyValue::new("nv.gpu.model", "NVIDIA \"A100\"\n"),
        ];
        let line = encode(&attributes).to_string();
        assert_eq!(decode(line.as_bytes()).unwrap(), attributes);
        assert_eq!(
            decode(br#"{"error":"NVML: Uninitialized"}"#).unwrap_err(),
            "NVML: Uninitialized"
        );
        for bad in [
            &b"not json"[..],
            br#"{"attributes":[["service.name","x"]]}"#,
            br#"{"attributes":[["nv.gpu.index",1.5]]}"#,
            br#"{"attributes":[["nv.gpu.index"]]}"#,
            br#"{}"#,
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn only_the_parent_named_by_the_variable_makes_a_probe() {
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() };
        assert_eq!(probe_index(&format!("2:{ppid}")), Some(2));
        assert_eq!(probe_index(&format!("2:{}", ppid + 1)), None);
        assert_eq!(probe_index("2"), None);
        assert_eq!(probe_index(&format!("x:{ppid}")), None);
    }

    #[test]
    fn the_probe_entry_is_the_executables() {
        // This test binary links nemo-lens statically, as a program does.
        assert!(linked_into_the_executable());
    }
}
