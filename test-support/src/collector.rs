//! A real OTLP collector (rotel, from PyPI) on loopback ports, for the OTLP tests.
//!
//! The first use in a test run installs rotel into `<target>/tmp/rotel-venv` with the machine's
//! `python3 -m venv` + `pip` (a lock file serialises concurrent installs). When that is
//! impossible the test fails with the reason: it never skips.
//!
//! Each [`Collector`] is its own rotel process on free ports, printing everything it receives
//! (traces, metrics, logs) in the OpenTelemetry Collector "debug exporter" layout to a file that
//! the test reads ([`Collector::start_counting`]: one summary line per request instead, for runs
//! of many spans). Dropping it kills the process.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::wait;

/// The rotel release the tests are written against (rotel 0.0.1a15 from PyPI).
pub const ROTEL_VERSION: &str = "0.0.1a15";

fn venv_dir() -> PathBuf {
    crate::programs::target_tmp_dir().join("rotel-venv")
}

fn find_binary(venv: &Path) -> Option<PathBuf> {
    let lib = venv.join("lib");
    for entry in fs::read_dir(lib).ok()? {
        let candidate = entry.ok()?.path().join("site-packages/rotel/rotel-agent");
        if candidate.is_file() {
            return Some(candidate);
        }
    }
    None
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {cmd:?}: {e}; the OTLP tests need python3 with venv and pip")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}); the OTLP tests need python3 with venv and pip and access to PyPI:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rotel binary, installed on first use.
pub fn rotel_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let venv = venv_dir();
        fs::create_dir_all(venv.parent().unwrap()).unwrap();
        let lock = File::create(venv.with_extension("lock")).unwrap();
        // SAFETY: flock on a descriptor we own; released when `lock` is closed.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        if let Some(bin) = find_binary(&venv) {
            return bin;
        }
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(Command::new(&python).args(["-m", "venv"]).arg(&venv));
        run(Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("rotel=={ROTEL_VERSION}")));
        find_binary(&venv).unwrap_or_else(|| {
            panic!("rotel {ROTEL_VERSION} installed into {venv:?} but rotel-agent is missing")
        })
    })
}

/// A free loopback TCP port (bound and released; rotel binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// rotel's options printing every item received.
const DETAILED: [&str; 8] = [
    "--debug-log",
    "traces",
    "--debug-log",
    "metrics",
    "--debug-log",
    "logs",
    "--debug-log-verbosity",
    "detailed",
];

/// rotel's options printing one line per traces request.
const BASIC: [&str; 4] = ["--debug-log", "traces", "--debug-log-verbosity", "basic"];

/// Sums the span counts of rotel's `basic` summary lines
/// (`INFO Received traces. data_type="traces" resource_spans=1 spans=512`).
pub fn received_spans(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains("Received traces."))
        .filter_map(|l| {
            let rest = &l[l.find(" spans=")? + " spans=".len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u64>().ok()
        })
        .sum()
}

/// Waits until `count()` reaches `expected`, or has not moved for `quiet`; returns the last
/// count. Read every 20 ms.
pub fn settle(expected: u64, quiet: Duration, mut count: impl FnMut() -> u64) -> u64 {
    let mut last = count();
    let mut since = std::time::Instant::now();
    while last < expected && since.elapsed() < quiet {
        std::thread::sleep(Duration::from_millis(20));
        let now = count();
        if now != last {
            last = now;
            since = std::time::Instant::now();
        }
    }
    last
}

/// One running rotel process.
pub struct Collector {
    child: Child,
    /// The OTLP/gRPC port.
    pub grpc_port: u16,
    /// The OTLP/HTTP port.
    pub http_port: u16,
    out: PathBuf,
    /// Holds rotel's output, pid and log files; removed with the collector.
    _dir: tempfile::TempDir,
}

impl Collector {
    /// Starts rotel on fresh ports and waits until both accept connections.
    pub fn start() -> Collector {
        Self::start_on(free_port(), free_port())
    }

    /// Starts rotel on the given ports (to restart one where a client expects it).
    pub fn start_on(grpc_port: u16, http_port: u16) -> Collector {
        Self::spawn(grpc_port, http_port, &DETAILED)
    }

    /// Starts rotel on fresh ports printing one summary line per request (`basic`
    /// verbosity) instead of every item: for runs of many spans, counted with
    /// [`Collector::received_spans`].
    pub fn start_counting() -> Collector {
        Self::start_counting_on(free_port(), free_port())
    }

    /// [`Collector::start_counting`] on the given ports (a collector that restarts).
    pub fn start_counting_on(grpc_port: u16, http_port: u16) -> Collector {
        Self::spawn(grpc_port, http_port, &BASIC)
    }

    fn spawn(grpc_port: u16, http_port: u16, debug: &[&str]) -> Collector {
        let bin = rotel_binary();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rotel.out");
        let stdout = File::create(&out).unwrap();
        let stderr = stdout.try_clone().unwrap();
        let child = Command::new(bin)
            .arg("start")
            .args(["--otlp-grpc-endpoint", &format!("127.0.0.1:{grpc_port}")])
            .args(["--otlp-http-endpoint", &format!("127.0.0.1:{http_port}")])
            .args(["--exporter", "blackhole"])
            .args(debug)
            .arg("--pid-file")
            .arg(dir.path().join("rotel.pid"))
            .arg("--log-file")
            .arg(dir.path().join("rotel.log"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin:?}: {e}"));
        let mut collector = Collector {
            child,
            grpc_port,
            http_port,
            out,
            _dir: dir,
        };
        for port in [grpc_port, http_port] {
            let listening = wait::try_wait_for(Duration::from_secs(30), || {
                if let Ok(Some(status)) = collector.child.try_wait() {
                    panic!("rotel exited with {status}:\n{}", collector.output());
                }
                TcpStream::connect(("127.0.0.1", port)).ok()
            });
            assert!(
                listening.is_some(),
                "rotel did not listen on {port} within 30 s:\n{}",
                collector.output()
            );
        }
        collector
    }

    /// The rotel process's id (to stop and continue it: a collector that stalls).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The file rotel prints to.
    pub fn output_path(&self) -> &Path {
        &self.out
    }

    /// Spans received so far, from the per-request summary lines of a collector started with
    /// [`Collector::start_counting`].
    pub fn received_spans(&self) -> u64 {
        received_spans(&self.output())
    }

    /// Waits until at least `expected` spans were received, or until the count has not moved
    /// for `quiet`; returns the count (rotel prints a request's line after answering it).
    pub fn settled_spans(&self, expected: u64, quiet: Duration) -> u64 {
        settle(expected, quiet, || self.received_spans())
    }

    /// The endpoint for `OTEL_EXPORTER_OTLP_ENDPOINT` with `protocol` (`grpc`, `http/...`).
    pub fn endpoint(&self, protocol: &str) -> String {
        if protocol == "grpc" {
            format!("http://127.0.0.1:{}", self.grpc_port)
        } else {
            format!("http://127.0.0.1:{}", self.http_port)
        }
    }

    /// Everything rotel printed so far (ANSI colour codes removed).
    pub fn output(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = OpenOptions::new().read(true).open(&self.out) {
            let _ = f.read_to_string(&mut text);
        }
        strip_ansi(&text)
    }

    /// Waits until `done(output)` holds, or panics after `timeout` showing the output.
    pub fn wait_for(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        wait::try_wait_for(timeout, || Some(self.output()).filter(|text| done(text)))
            .unwrap_or_else(|| {
                panic!(
                    "collector did not receive {what} within {timeout:?}; it printed:\n{}",
                    self.output()
                )
            })
    }

    /// `OTEL_EXPORTER_OTLP_PROTOCOL` and `OTEL_EXPORTER_OTLP_ENDPOINT` for this collector.
    pub fn otlp_env(&self, protocol: &str) -> [(&'static str, String); 2] {
        [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_string()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint(protocol)),
        ]
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Item> {
        spans(&self.output())
    }

    /// Kills the collector now (a collector that dies mid-run).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.kill();
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One item (span, log record or data point) of the debug output: its header line and the lines
/// under it, up to the next item, with the resource attributes of its batch.
#[derive(Debug, Clone)]
pub struct Item {
    /// The lines of the item.
    pub lines: Vec<String>,
    /// The `Resource attributes:` lines of the batch it came in.
    pub resource: Vec<String>,
}

impl Item {
    /// The value after `label :` / `label:` on one of the item's lines (e.g. `Name`, `Trace ID`).
    pub fn field(&self, label: &str) -> Option<String> {
        self.lines.iter().find_map(|l| {
            let t = l.trim();
            let rest = t.strip_prefix(label)?.trim_start();
            let rest = rest.strip_prefix(':')?;
            Some(rest.trim().to_string())
        })
    }

    /// The attribute `key` as printed (`Str(x)`, `Int(3)`, `Bool(true)`, `Double(1.5)`).
    pub fn attr(&self, key: &str) -> Option<String> {
        find_attr(&self.lines, key)
    }

    /// The resource attribute `key` as printed.
    pub fn resource_attr(&self, key: &str) -> Option<String> {
        find_attr(&self.resource, key)
    }
}

fn find_attr(lines: &[String], key: &str) -> Option<String> {
    let prefix = format!("-> {key}: ");
    lines
        .iter()
        .find_map(|l| l.trim().strip_prefix(prefix.as_str()).map(str::to_string))
}

/// Splits the debug output into items whose header line starts with `header` (`Span #`,
/// `LogRecord #`, `Metric #`).
pub fn items(output: &str, header: &str) -> Vec<Item> {
    let mut result: Vec<Item> = Vec::new();
    let mut resource: Vec<String> = Vec::new();
    let mut in_resource = false;
    let mut current: Option<Item> = None;
    for line in output.lines() {
        let t = line.trim();
        if t.starts_with("ResourceSpans #")
            || t.starts_with("ResourceLog #")
            || t.starts_with("ResourceLogs #")
            || t.starts_with("ResourceMetrics #")
        {
            result.extend(current.take());
            resource.clear();
            in_resource = false;
            continue;
        }
        if t.starts_with("Resource attributes") {
            in_resource = true;
            continue;
        }
        if in_resource {
            if t.starts_with("->") {
                resource.push(t.to_string());
                continue;
            }
            in_resource = false;
        }
        if t.starts_with(header) {
            result.extend(current.take());
            current = Some(Item {
                lines: vec![t.to_string()],
                resource: resource.clone(),
            });
        } else if t.starts_with("ScopeSpans #")
            || t.starts_with("ScopeLogs #")
            || t.starts_with("ScopeMetrics #")
            || (header != "Metric #" && t.starts_with("Metric #"))
            || (header != "Span #" && t.starts_with("Span #"))
            || (header != "LogRecord #" && t.starts_with("LogRecord #"))
        {
            result.extend(current.take());
        } else if let Some(item) = &mut current {
            item.lines.push(t.to_string());
        }
    }
    result.extend(current);
    result
}

/// The spans of the debug output.
pub fn spans(output: &str) -> Vec<Item> {
    items(output, "Span #")
}

/// The first item whose `Name` is `name`; fails listing the items when there is none.
#[track_caller]
pub fn named<'a>(items: &'a [Item], name: &str) -> &'a Item {
    items
        .iter()
        .find(|i| i.field("Name").as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no {name} among {items:#?}"))
}

/// How many items are named `name`.
pub fn count_named(items: &[Item], name: &str) -> usize {
    items
        .iter()
        .filter(|i| i.field("Name").as_deref() == Some(name))
        .count()
}

/// How many items carry the string attribute `key` = `value`.
pub fn count_with(items: &[Item], key: &str, value: &str) -> usize {
    let printed = format!("Str({value})");
    items
        .iter()
        .filter(|i| i.attr(key).as_deref() == Some(printed.as_str()))
        .count()
}

/// Enabled telemetry exporting over OTLP, with the endpoint and protocol of the process
/// environment (as a user's job script sets them).
pub fn otlp_config() -> nemo_lens::LensConfig {
    nemo_lens::LensConfig::default()
        .with_enabled(true)
        .with(|c| c.export.exporter = nemo_lens::ExporterKind::Otlp)
}
