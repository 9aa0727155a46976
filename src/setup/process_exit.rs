//! When the process dies: the opt-in panic hook and SIGTERM/SIGINT handlers.
//!
//! A panic hook runs before unwinding and cannot know whether the panic will be caught, so it
//! only records the panic (and, for a main-thread panic, has the flight recorder dump what is
//! open). The telemetry ends where the process does: when the handle is dropped while its
//! thread unwinds (a handle in `main`'s frame), or, for a main-thread panic, at `exit` (an
//! `atexit` handler: a handle in a static). Under `panic = "abort"` nothing runs after the hook,
//! so the hook ends it itself.
//!
//! A signal that arrives decides how the process ends, whatever `main` does meanwhile: the
//! signal thread flushes and then dies by the signal; if `main` finishes first (its own
//! `shutdown` waits for the signal thread's flush) and returns, an `atexit` handler waits for
//! that flush too and ends the process by the signal, so the exit status always says a signal
//! ended the run (128 + signo in a shell), never 0.

use std::io::Read;
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::panic::PanicHookInfo;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Once, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, Mutex as ParkingMutex};
use signal_hook::consts::{SIGINT, SIGTERM};

use crate::error::{LensError, Result};
use crate::ids;

/// What the exit paths need of a telemetry handle: record a panic on the current span, and
/// shut down truncating open spans with a reason.
pub(crate) trait ExitTarget: Send + Sync {
    /// Records `message` as a panic on the innermost span the layer records on this thread.
    fn record_panic(&self, message: &str);
    /// A panic that may end the process: the flight recorder dumps the spans open now.
    fn dump_for_panic(&self);
    /// Ends open spans as truncated with `reason` and flushes within `timeout`.
    fn shutdown_because(&self, timeout: Duration, reason: &'static str) -> Result<()>;
}

/// How long the panic hook and the signal handlers wait for the final flush.
pub(crate) const EXIT_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Why spans open at a fatal panic were truncated.
pub(crate) const REASON_PANIC: &str = "process panicked";
const REASON_SIGTERM: &str = "process received SIGTERM";
const REASON_SIGINT: &str = "process received SIGINT";

/// `1 +` the fork generation in which the main thread panicked (0: it has not).
static MAIN_PANICKED: AtomicU64 = AtomicU64::new(0);
/// The telemetry the `atexit` handler ends after a main-thread panic.
static PANIC_TARGET: Mutex<Option<Weak<dyn ExitTarget>>> = Mutex::new(None);
static REGISTER_PANIC_EXIT: Once = Once::new();

/// Installs the panic hook for `inner` (chaining the previous hook), and the `atexit` handler
/// that ends `inner` when the process exits after a main-thread panic.
pub(crate) fn install_panic_hook(inner: Weak<dyn ExitTarget>) {
    *PANIC_TARGET.lock() = Some(inner.clone());
    REGISTER_PANIC_EXIT.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function that never unwinds. Should it fail,
        // a handle held in `main`'s frame still ends when unwinding drops it.
        unsafe { libc::atexit(end_after_main_panic) };
    });
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info);
        crate::layer::unwind::note_panic(&message);
        if let Some(inner) = inner.upgrade() {
            on_panic(&*inner, &message);
        }
        previous(info);
    }));
}

/// Whether this is the program's main thread (the one Rust names `main`).
pub(crate) fn on_main_thread() -> bool {
    std::thread::current().name() == Some("main")
}

/// The panic's message and location, as spans record it.
fn panic_message(info: &PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("Box<dyn Any>");
    match info.location() {
        Some(at) => format!("{text} (at {}:{}:{})", at.file(), at.line(), at.column()),
        None => text.to_string(),
    }
}

fn on_panic(inner: &dyn ExitTarget, message: &str) {
    inner.record_panic(message);
    if cfg!(panic = "abort") {
        // The process aborts when the hooks return: nothing else will end the telemetry.
        let _ = inner.shutdown_because(EXIT_FLUSH_TIMEOUT, REASON_PANIC);
    } else if on_main_thread() {
        // It ends the process unless the program catches it: what is open now is dumped, and
        // the telemetry ends when the process does (`atexit`, or the handle's drop while
        // unwinding), not here.
        inner.dump_for_panic();
        MAIN_PANICKED.store(ids::fork_generation() + 1, Ordering::Release);
    }
}

/// Runs at `exit` (after `main` returns, unwound by a panic or not, and on
/// `std::process::exit`): once the main thread has panicked, a telemetry still running is
/// ended as the panic's (open spans truncated, queues flushed within [`EXIT_FLUSH_TIMEOUT`]).
extern "C" fn end_after_main_panic() {
    if MAIN_PANICKED.load(Ordering::Acquire) != ids::fork_generation() + 1 {
        return;
    }
    let target = PANIC_TARGET.lock().clone();
    if let Some(inner) = target.and_then(|w| w.upgrade()) {
        // Never unwind out of an `extern "C"` function.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            inner.shutdown_because(EXIT_FLUSH_TIMEOUT, REASON_PANIC)
        }));
    }
}

/// The fork generation the handlers serve (`1 +` it; 0 = none), and their pipe's write end.
static SIGNAL_GENERATION: AtomicU64 = AtomicU64::new(0);
static SIGNAL_FD: AtomicI32 = AtomicI32::new(-1);
/// Set when the first signal is being handled: the next one terminates at once.
static TERMINATING: AtomicBool = AtomicBool::new(false);
/// The signal that ended the run (0: none), set by the handler itself; read at exit.
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Whether the signal thread's flush is over (it is about to re-raise the signal).
static FLUSHED: ParkingMutex<bool> = ParkingMutex::new(false);
static FLUSHED_CV: Condvar = Condvar::new();
static REGISTER: Once = Once::new();
/// The telemetry the signal thread shuts down.
static TARGET: Mutex<Option<Weak<dyn ExitTarget>>> = Mutex::new(None);

/// Runs inside the signal handler: async-signal-safe calls only (atomic loads, `write`, and
/// `sigaction`/`raise` through `emulate_default_handler`).
fn on_signal(signal: libc::c_int) {
    let serving = SIGNAL_GENERATION.load(Ordering::Acquire);
    if TERMINATING.load(Ordering::Acquire) || serving != ids::fork_generation() + 1 {
        let _ = signal_hook::low_level::emulate_default_handler(signal);
        return;
    }
    // The first signal decides the exit status (an atomic store is async-signal-safe).
    let _ = RECEIVED.compare_exchange(0, signal, Ordering::AcqRel, Ordering::Acquire);
    let byte = signal as u8;
    let fd: RawFd = SIGNAL_FD.load(Ordering::Acquire);
    // SAFETY: `write` is async-signal-safe; the descriptor is non-blocking and never closed.
    unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
}

/// Installs the SIGTERM/SIGINT handlers for `inner` (once per process and fork generation; a
/// later call re-targets them to `inner`).
pub(crate) fn install_signal_handlers(inner: Weak<dyn ExitTarget>) -> Result<()> {
    let err = |what: &str, e: std::io::Error| LensError::Signals(format!("{what}: {e}"));
    *TARGET.lock() = Some(inner);
    let generation = ids::fork_generation() + 1;
    if SIGNAL_GENERATION.load(Ordering::Acquire) == generation {
        return Ok(());
    }
    let (mut reader, writer) = UnixStream::pair().map_err(|e| err("cannot create a pipe", e))?;
    writer
        .set_nonblocking(true)
        .map_err(|e| err("cannot make the pipe non-blocking", e))?;
    std::thread::Builder::new()
        .name("nemo-lens-signals".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            while reader.read_exact(&mut byte).is_ok() {
                TERMINATING.store(true, Ordering::Release);
                terminate(libc::c_int::from(byte[0]));
            }
        })
        .map_err(|e| err("cannot start the signal thread", e))?;
    SIGNAL_FD.store(writer.into_raw_fd(), Ordering::Release);
    SIGNAL_GENERATION.store(generation, Ordering::Release);
    let mut registered = Ok(());
    REGISTER.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function that never unwinds.
        if unsafe { libc::atexit(exit_by_received_signal) } != 0 {
            registered = Err(err(
                "cannot register the exit handler",
                std::io::Error::other("atexit failed"),
            ));
        }
        for signal in [SIGTERM, SIGINT] {
            // SAFETY: `on_signal` is async-signal-safe (see there).
            if let Err(e) =
                unsafe { signal_hook::low_level::register(signal, move || on_signal(signal)) }
            {
                registered = Err(err("cannot install the signal handler", e));
            }
        }
    });
    registered
}

/// On the signal thread: truncate, flush, then die by `signal`.
fn terminate(signal: libc::c_int) {
    let reason = if signal == SIGINT {
        REASON_SIGINT
    } else {
        REASON_SIGTERM
    };
    let target = TARGET.lock().clone();
    if let Some(inner) = target.and_then(|w| w.upgrade())
        && let Err(e) = inner.shutdown_because(EXIT_FLUSH_TIMEOUT, reason)
    {
        eprintln!("nemo-lens: {e}");
    }
    *FLUSHED.lock() = true;
    FLUSHED_CV.notify_all();
    die_by(signal);
}

/// Ends the process by `signal` (default action), or with status 128 + `signal` if that does
/// not end it.
fn die_by(signal: libc::c_int) -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(signal);
    // Only reached if the default action did not end the process.
    // SAFETY: `_exit` ends the process at once; nothing runs after it.
    unsafe { libc::_exit(128 + signal) }
}

/// Runs at `exit` (also when `main` returns): when a handled signal ended the run, waits for
/// the signal thread's flush (at most [`EXIT_FLUSH_TIMEOUT`] and a moment) and ends the process
/// by that signal instead of the status `main` chose.
extern "C" fn exit_by_received_signal() {
    let signal = RECEIVED.load(Ordering::Acquire);
    if signal == 0 || SIGNAL_GENERATION.load(Ordering::Acquire) != ids::fork_generation() + 1 {
        return;
    }
    let deadline = std::time::Instant::now() + EXIT_FLUSH_TIMEOUT + Duration::from_secs(1);
    let mut flushed = FLUSHED.lock();
    while !*flushed {
        if FLUSHED_CV.wait_until(&mut flushed, deadline).timed_out() {
            break;
        }
    }
    drop(flushed);
    die_by(signal);
}
