//! Child processes, one API for all of them: this test binary re-executed to run one of its
//! tests alone, a fixture program of this crate, or an example program.
//!
//! A test runs its body in a child when it needs a process of its own: process-wide state (the
//! global providers, the double-init guard, signal handlers, `fork`, the environment, resident
//! memory, thread and descriptor counts) that the other tests of its binary, threads of one
//! process, would share. The child is a user's program with only the environment the test gives
//! it: every inherited `NEMO_LENS_*`, `OTEL_*` and `TRACEPARENT` variable is removed.
//!
//! A process that plays a role for a test (a rank exporting to the test's collector, a program
//! that panics) is a fixture program ([`Child::fixture`]), not a test: it runs only when a test
//! starts it, so `cargo test -- --include-ignored` has nothing to run by mistake.
//!
//! Every run is bounded: a child still running after its timeout is killed, and the test fails
//! showing what the child printed.
//!
//! ```no_run
//! use nemo_lens_test_support::child::{self, Child};
//!
//! #[test]
//! fn a_test_with_a_process_of_its_own() {
//!     child::run_in_child([("OTEL_TRACES_SAMPLER", "always_off")], || {
//!         // In the child: set up telemetry, fork, install handlers...
//!     });
//! }
//!
//! let out = Child::example("trainer").env("NEMO_LENS_ENABLED", "1").args(["--steps", "1"]).run();
//! let mut running = Child::fixture("panic_exit").env("NEMO_LENS_ENABLED", "1").spawn();
//! running.wait_for_output("the panic", |_, stderr| stderr.contains("panicked"));
//! running.signal(libc::SIGTERM);
//! let out = running.wait();
//! ```

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wait;

/// Set in a re-executed test binary to the name of the test it runs as the child.
pub const CHILD_VAR: &str = "LENSTEST_CHILD_TEST";

/// How long a child may run unless the test says otherwise: a bound against hangs, far above
/// what any child takes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The running test's name as libtest knows it (`module::test`): the name of its thread.
#[track_caller]
pub fn current_test() -> String {
    let thread = std::thread::current();
    match thread.name() {
        Some(name) if name != "main" => name.to_string(),
        other => panic!("not on a test's own thread (thread {other:?})"),
    }
}

/// Whether this process is the child [`Child::this_test`] started for the running test.
pub fn is_child() -> bool {
    std::env::var(CHILD_VAR).is_ok_and(|name| name == current_test())
}

/// Runs `body` in a process of its own: the parent starts the running test again as a child
/// with `envs` and asserts it passed; the child runs `body`.
#[track_caller]
pub fn run_in_child<K, V>(envs: impl IntoIterator<Item = (K, V)>, body: impl FnOnce())
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    if is_child() {
        body();
    } else {
        Child::this_test().envs(envs).run_passing();
    }
}

/// Set in a child [`run_in_child_dir`] started: the directory its parent made for it.
pub const CHILD_DIR_VAR: &str = "LENSTEST_CHILD_DIR";

/// [`run_in_child`] with a fresh directory: the parent makes a temporary directory (removed
/// when the child has passed) and the child runs `body` with its path.
#[track_caller]
pub fn run_in_child_dir(body: impl FnOnce(&Path)) {
    if is_child() {
        let dir = std::env::var_os(CHILD_DIR_VAR).expect("the directory the parent made");
        body(Path::new(&dir));
    } else {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Child::this_test()
            .env(CHILD_DIR_VAR, dir.path())
            .run_passing();
    }
}

/// [`run_in_child`] with no variables of its own: `body` runs alone in a fresh process.
#[track_caller]
pub fn run_alone(body: impl FnOnce()) {
    run_in_child::<&str, &str>([], body)
}

/// The wait status of `pid`, a child this process made with `fork`, once it has ended; `None`
/// if it is still running after `timeout` (it is left running).
pub fn try_wait_pid(pid: libc::pid_t, timeout: Duration) -> Option<libc::c_int> {
    wait::try_wait_for(timeout, || {
        let mut status = 0;
        // SAFETY: a non-blocking waitpid on our own child.
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        assert!(
            reaped >= 0,
            "waitpid({pid}): {}",
            std::io::Error::last_os_error()
        );
        (reaped == pid).then_some(status)
    })
}

/// A child process to start: a test of this binary, a fixture program or an example, its
/// environment and arguments, and its timeout.
pub struct Child {
    cmd: Command,
    what: String,
    timeout: Duration,
    /// A test of this binary: it passed only if libtest says so.
    test: bool,
}

impl Child {
    /// This test binary, running only its test `name` (`module::test`, ignored or not) with
    /// [`CHILD_VAR`] set to `name`.
    pub fn test(name: &str) -> Child {
        let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
        cmd.args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        let mut child = Child::new(cmd, format!("test {name}"), true);
        child.cmd.env(CHILD_VAR, name);
        child
    }

    /// The running test, started again as a child ([`is_child`] holds there).
    #[track_caller]
    pub fn this_test() -> Child {
        Child::test(&current_test())
    }

    /// The example program `name` (`target/<profile>/examples/<name>`).
    pub fn example(name: &str) -> Child {
        let mut child = Child::new(
            Command::new(crate::example(name)),
            format!("example {name}"),
            false,
        );
        child.cmd.env_remove(CHILD_VAR);
        child
    }

    /// This crate's fixture program `name` (built on first use, see
    /// [`fixture_program`](crate::fixture_program)).
    #[track_caller]
    pub fn fixture(name: &str) -> Child {
        let mut child = Child::new(
            Command::new(crate::fixture_program(name)),
            format!("fixture program {name}"),
            false,
        );
        child.cmd.env_remove(CHILD_VAR);
        child
    }

    fn new(mut cmd: Command, what: String, test: bool) -> Child {
        crate::clear_telemetry_env(&mut cmd);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Child {
            cmd,
            what,
            timeout: DEFAULT_TIMEOUT,
            test,
        }
    }

    /// Sets a variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Child {
        self.cmd.env(key, value);
        self
    }

    /// Sets variables.
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Child
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        self.cmd.envs(vars);
        self
    }

    /// Removes a variable.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Child {
        self.cmd.env_remove(key);
        self
    }

    /// Removes every inherited variable whose name starts with `prefix`.
    pub fn env_remove_prefix(mut self, prefix: &str) -> Child {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with(prefix) {
                self.cmd.env_remove(key);
            }
        }
        self
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Child {
        self.cmd.arg(arg);
        self
    }

    /// Adds arguments.
    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Child {
        self.cmd.args(args);
        self
    }

    /// Limits the size of every file the child writes to `bytes` (`RLIMIT_FSIZE`, a full disk
    /// as a process sees it): a write beyond it fails with `EFBIG` (`SIGXFSZ` is ignored, as
    /// the limit's signal would otherwise kill the child). Pipes are not limited.
    pub fn limit_file_size(mut self, bytes: u64) -> Child {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (`setrlimit`, `signal`) between fork and exec.
        unsafe {
            self.cmd.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: bytes,
                    rlim_max: bytes,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
                    || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self
    }

    /// Runs the child in `dir`.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Child {
        self.cmd.current_dir(dir);
        self
    }

    /// Kills the child (and fails the test) if it runs longer than `timeout` (default
    /// [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Child {
        self.timeout = timeout;
        self
    }

    /// Runs the child to its end and returns its status, stdout and stderr.
    #[track_caller]
    pub fn run(self) -> Output {
        self.spawn().wait()
    }

    /// Runs the child to its end and asserts it succeeded (for a test: that it ran and passed).
    #[track_caller]
    pub fn run_passing(self) -> Output {
        let (what, test) = (self.what.clone(), self.test);
        let out = self.run();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && (!test || stdout.contains("1 passed")),
            "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Starts the child; its stdout and stderr are read meanwhile (it never blocks on a full
    /// pipe) and can be looked at while it runs.
    #[track_caller]
    pub fn spawn(mut self) -> Running {
        let mut child = self
            .cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.what));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let open = Arc::new(AtomicUsize::new(0));
        let mut readers = Vec::new();
        if let Some(pipe) = child.stdout.take() {
            readers.push(read_into(pipe, stdout.clone(), open.clone()));
        }
        if let Some(pipe) = child.stderr.take() {
            readers.push(read_into(pipe, stderr.clone(), open.clone()));
        }
        let pid = child.id() as libc::pid_t;
        let (tx, exit) = mpsc::channel();
        // Tells when the child has exited, without reaping it: only `Running` reaps, so until
        // then its pid cannot be reused and a signal by pid always reaches it.
        std::thread::spawn(move || {
            // SAFETY: a zeroed siginfo_t is a valid out-parameter of waitid.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waits on our own child; WNOWAIT leaves it to be reaped by `Running`.
            while unsafe {
                libc::waitid(
                    libc::P_PID,
                    pid as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOWAIT,
                )
            } != 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
            }
            let _ = tx.send(());
        });
        Running {
            what: self.what,
            timeout: self.timeout,
            deadline: Instant::now() + self.timeout,
            child,
            exit,
            exited: None,
            stdout,
            stderr,
            open,
            readers,
        }
    }
}

fn read_into(
    mut pipe: impl Read + Send + 'static,
    buffer: Arc<Mutex<Vec<u8>>>,
    open: Arc<AtomicUsize>,
) -> JoinHandle<()> {
    open.fetch_add(1, Ordering::SeqCst);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n @ 1..) = pipe.read(&mut chunk) {
            buffer.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
        open.fetch_sub(1, Ordering::SeqCst);
    })
}

/// A started child. Dropped before it exits (a failed test), it is killed.
pub struct Running {
    what: String,
    timeout: Duration,
    deadline: Instant,
    child: std::process::Child,
    /// Receives once the child has exited (not yet reaped).
    exit: mpsc::Receiver<()>,
    exited: Option<ExitStatus>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Output pipes not yet at their end.
    open: Arc<AtomicUsize>,
    readers: Vec<JoinHandle<()>>,
}

impl Running {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the child.
    #[track_caller]
    pub fn signal(&self, signal: libc::c_int) {
        assert!(self.exited.is_none(), "{} already exited", self.what);
        // SAFETY: the child is not reaped yet (`exited` is unset), so the pid is still ours.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "kill {}", self.what);
    }

    /// What the child printed on stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// What the child printed on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until `printed(stdout, stderr)` holds. Fails (killing the child) when the child
    /// ends without it or the timeout passes.
    #[track_caller]
    pub fn wait_for_output(&mut self, what: &str, mut printed: impl FnMut(&str, &str) -> bool) {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let outcome = wait::try_wait_for(remaining, || {
            // The exit first: once the pipes are closed too, the output below is complete.
            if self.exited.is_none() {
                self.exited = self.child.try_wait().expect("poll the child");
            }
            let ended = self.exited.is_some() && self.open.load(Ordering::SeqCst) == 0;
            if printed(&self.stdout(), &self.stderr()) {
                Some(true)
            } else {
                ended.then_some(false)
            }
        });
        match outcome {
            Some(true) => {}
            Some(false) => panic!(
                "{} exited ({}) without printing {what}:\n{}",
                self.what,
                self.exited.unwrap(),
                self.printed()
            ),
            None => {
                self.kill();
                panic!(
                    "{} printed no {what} within {:?} (killed):\n{}",
                    self.what,
                    self.timeout,
                    self.printed()
                )
            }
        }
    }

    /// Waits for a whole stderr line starting with `prefix` and returns the rest of it (a line
    /// still being written is not read). Fails as [`Running::wait_for_output`] does.
    #[track_caller]
    pub fn wait_for_stderr_line(&mut self, prefix: &str) -> String {
        let line = |stderr: &str| {
            stderr
                .split_inclusive('\n')
                .find_map(|l| l.strip_prefix(prefix)?.strip_suffix('\n'))
                .map(str::to_string)
        };
        self.wait_for_output(&format!("a `{prefix}` line"), |_, stderr| {
            line(stderr).is_some()
        });
        line(&self.stderr()).expect("the line just seen")
    }

    /// Waits for the child to exit and returns its status and everything it printed; kills it
    /// and fails if it is still running at its timeout.
    #[track_caller]
    pub fn wait(mut self) -> Output {
        if self.exited.is_none() {
            let remaining = self.deadline.saturating_duration_since(Instant::now());
            if self.exit.recv_timeout(remaining).is_err() {
                self.kill();
                panic!(
                    "{} did not exit within {:?} (killed):\n{}",
                    self.what,
                    self.timeout,
                    self.printed()
                );
            }
            self.exited = Some(self.child.wait().expect("reap the child"));
        }
        // The pipes close with the child, unless a process it started still holds them.
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let closed = wait::try_wait_for(remaining.max(Duration::from_secs(5)), || {
            (self.open.load(Ordering::SeqCst) == 0).then_some(())
        });
        assert!(
            closed.is_some(),
            "{} exited ({}), but a process it started still holds its stdout or stderr:\n{}",
            self.what,
            self.exited.unwrap(),
            self.printed()
        );
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        Output {
            status: self.exited.unwrap(),
            stdout: std::mem::take(&mut *self.stdout.lock().unwrap()),
            stderr: std::mem::take(&mut *self.stderr.lock().unwrap()),
        }
    }

    fn printed(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr())
    }

    /// Kills the child, unless it already exited, and reaps it.
    fn kill(&mut self) {
        if self.exited.is_none() {
            // `Child::kill` does nothing for a child it has reaped already.
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
    }
}
