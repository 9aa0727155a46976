//! The recorder's thread (`nemo-lens-recorder`): `SIGUSR1` dumps, `SIGUSR2` control-file
//! switches, the end of a capture, and the watchdog.
//!
//! The signal handlers only set a request bit and, when it was not set yet, write one byte to a
//! non-blocking socket pair (async-signal-safe); the thread reads the bytes, takes the bits and
//! does the work, so neither a dump nor a rebuild of callsite interest ever runs in a handler or
//! on the training thread. Requests coalesce: a storm of `SIGUSR1` while a dump is being written
//! queues one more dump, not one per signal. Between bytes the thread wakes every tick (a tenth
//! of the hang timeout, between 10 ms and 1 s) to check the watchdog.

use std::io::{ErrorKind, Read};
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Once, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use signal_hook::consts::{SIGUSR1, SIGUSR2};

use super::{Shared, control, unix_ns};
use crate::error::{LensError, Result};
use crate::ids;

/// Request bits: a dump (`SIGUSR1`), a control-file reload (`SIGUSR2`), the end of a capture.
pub(crate) const DUMP: u8 = 1;
pub(crate) const CONTROL: u8 = 2;
pub(crate) const CAPTURE_DONE: u8 = 4;

/// Requests not yet taken by the thread.
static PENDING: AtomicU8 = AtomicU8::new(0);

/// `1 +` the fork generation the thread serves (0 = none) and the pipe's write end.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static FD: AtomicI32 = AtomicI32::new(-1);
static TARGET: Mutex<Option<Weak<Shared>>> = Mutex::new(None);
static USR1: Once = Once::new();
static USR2: Once = Once::new();

/// Requests `request` of the thread (async-signal-safe; never blocks). A request already
/// pending is not queued again, and only a new one wakes the thread.
pub(crate) fn notify(request: u8) {
    if GENERATION.load(Ordering::Acquire) != ids::fork_generation() + 1 {
        return;
    }
    if PENDING.fetch_or(request, Ordering::AcqRel) & request != 0 {
        return;
    }
    let byte = request;
    let fd: RawFd = FD.load(Ordering::Acquire);
    // SAFETY: `write` is async-signal-safe; the descriptor is non-blocking and never closed.
    unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
}

/// Makes `shared` the recorder the thread serves, starting the thread and installing the
/// handlers on first use (per process and fork generation).
pub(crate) fn serve(shared: &Arc<Shared>) -> Result<()> {
    let err = |what: &str, e: std::io::Error| LensError::Signals(format!("{what}: {e}"));
    *TARGET.lock() = Some(Arc::downgrade(shared));
    let generation = ids::fork_generation() + 1;
    if GENERATION.load(Ordering::Acquire) != generation {
        let (mut reader, writer) =
            UnixStream::pair().map_err(|e| err("cannot create the recorder's pipe", e))?;
        writer
            .set_nonblocking(true)
            .map_err(|e| err("cannot make the recorder's pipe non-blocking", e))?;
        std::thread::Builder::new()
            .name("nemo-lens-recorder".into())
            .spawn(move || run(&mut reader))
            .map_err(|e| err("cannot start the recorder's thread", e))?;
        FD.store(writer.into_raw_fd(), Ordering::Release);
        // A forked child may inherit its parent's pending bits; its thread starts afresh.
        PENDING.store(0, Ordering::Release);
        GENERATION.store(generation, Ordering::Release);
    }
    let mut registered = Ok(());
    let mut register = |signal, byte| {
        // SAFETY: `notify` is async-signal-safe (atomic loads and `write`).
        if let Err(e) = unsafe { signal_hook::low_level::register(signal, move || notify(byte)) } {
            registered = Err(err("cannot install the recorder's signal handler", e));
        }
    };
    if shared.capacity > 0 {
        USR1.call_once(|| register(SIGUSR1, DUMP));
    }
    if shared.control_file.is_some() {
        USR2.call_once(|| register(SIGUSR2, CONTROL));
    }
    registered
}

fn target() -> Option<Arc<Shared>> {
    TARGET.lock().as_ref().and_then(Weak::upgrade)
}

fn tick(shared: Option<&Shared>) -> Duration {
    shared
        .and_then(|s| s.hang_timeout)
        .map_or(Duration::from_secs(1), |t| {
            (t / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
        })
}

fn run(reader: &mut UnixStream) {
    // The bytes only wake the thread; what to do is in `PENDING`.
    let mut bytes = [0u8; 64];
    loop {
        let shared = target();
        let _ = reader.set_read_timeout(Some(tick(shared.as_deref())));
        drop(shared);
        match reader.read(&mut bytes) {
            Ok(0) => return,
            Ok(_) => {
                let requests = PENDING.swap(0, Ordering::AcqRel);
                if let Some(shared) = target() {
                    handle(&shared, requests);
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
        if let Some(shared) = target() {
            watchdog(&shared);
        }
    }
}

fn handle(shared: &Shared, requests: u8) {
    // The end of a running capture before a reload: a switch the user asked for wins.
    if requests & CAPTURE_DONE != 0 {
        control::capture_done(shared);
    }
    if requests & CONTROL != 0 {
        control::reload(shared);
    }
    if requests & DUMP != 0 {
        match shared.dump("signal") {
            Ok(path) => eprintln!(
                "nemo-lens: SIGUSR1: flight recorder dump: {}",
                path.display()
            ),
            Err(e) => eprintln!("nemo-lens: SIGUSR1: cannot write the flight recorder dump: {e}"),
        }
    }
}

/// Dumps once when no recorded span has closed for the hang timeout.
fn watchdog(shared: &Shared) {
    let Some(timeout) = shared.hang_timeout else {
        return;
    };
    if shared.stopped.load(Ordering::Relaxed) || shared.watchdog_fired.load(Ordering::Relaxed) {
        return;
    }
    let last = shared
        .last_close_ns
        .load(Ordering::Relaxed)
        .max(shared.started_ns);
    let quiet = Duration::from_nanos(unix_ns().saturating_sub(last));
    if quiet < timeout || shared.watchdog_fired.swap(true, Ordering::SeqCst) {
        return;
    }
    let innermost = shared
        .open
        .snapshot()
        .into_iter()
        .max_by_key(|r| r.start_ns)
        .and_then(|r| {
            let meta = super::meta_of(&r)?;
            let age = unix_ns().saturating_sub(r.start_ns) as f64 / 1e9;
            Some(format!("`{}` (open {age:.1} s)", meta.name()))
        })
        .unwrap_or_else(|| "none".into());
    let dumped = match shared.dump("watchdog") {
        Ok(path) => format!("flight recorder dump: {}", path.display()),
        Err(e) => format!("cannot write the flight recorder dump: {e}"),
    };
    eprintln!(
        "nemo-lens: WARNING: no span of groups [{}] has closed for {:.1} s \
         (NEMO_LENS_HANG_TIMEOUT = {} s): this rank may be hung. Innermost open span: {innermost}; {dumped}",
        shared.groups.join(", "),
        quiet.as_secs_f64(),
        timeout.as_secs_f64(),
    );
    if !shared.registered.load(Ordering::Relaxed) {
        eprintln!(
            "nemo-lens: WARNING: the flight recorder's layer is not in the subscriber \
             (add `.with(telemetry.recorder_layer())`): it recorded nothing"
        );
    }
}
