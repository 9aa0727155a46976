//! The flight recorder: which rank is stuck, in which span, since when, from every rank.
//!
//! A hung collective leaves thousands of ranks waiting and the exporting ranks waiting with
//! them, so the exported telemetry ends where the hang starts. The flight recorder keeps, in the
//! memory of **every enabled rank** (exporting or not), the last `N` closed spans and every open
//! span of a few coarse [span groups](crate::groups), and writes them to a file when asked:
//!
//! ```text
//! NEMO_LENS_ENABLED=1 NEMO_LENS_FLIGHT_RECORDER=4096 NEMO_LENS_HANG_TIMEOUT=300 \
//! NEMO_LENS_DUMP_DIR=/scratch/job42/dumps  my-trainer ...
//! ```
//!
//! ```
//! use tracing_subscriber::prelude::*;
//! let dir = tempfile::tempdir().unwrap();
//! let mut config = nemo_lens::LensConfig::default().with_enabled(true);
//! config.flight_recorder.capacity = 64;
//! config.flight_recorder.dump_dir = Some(dir.path().to_path_buf());
//! let telemetry = nemo_lens::Telemetry::builder(config)
//!     .place(nemo_lens::Place::rank(0).of(2)) // rank 0 of 2 does not export under `single_rank`...
//!     .allow_reinit_for_testing(true)
//!     .build().unwrap();
//! assert!(!telemetry.is_exporting());
//! let _guard = tracing_subscriber::registry()
//!     .with(telemetry.layer())
//!     .with(telemetry.recorder_layer()) // ...but it records
//!     .set_default();
//! let step = tracing::info_span!("train_step", nemo.group.step = tracing::field::Empty, step = 7);
//! let _entered = step.enter();
//! let recorder = telemetry.flight_recorder().unwrap();
//! let path = recorder.dump().unwrap();
//! let text = std::fs::read_to_string(path).unwrap();
//! assert!(text.contains(r#""name": "train_step""#) && text.contains(r#""nemo.span.open": true"#));
//! ```
//!
//! # Configuration
//!
//! See [`RecorderConfig`]: `NEMO_LENS_FLIGHT_RECORDER` (ring size, 0 = off, the default),
//! `NEMO_LENS_FLIGHT_RECORDER_GROUPS` (default `job,step,checkpoint,collective`; `collective` is
//! the group libraries put around communication), `NEMO_LENS_DUMP_DIR`,
//! `NEMO_LENS_HANG_TIMEOUT`, `NEMO_LENS_CONTROL_FILE`. They are read with the rest of
//! [`LensConfig`]; a bad value is a typed error naming the variable.
//!
//! # Dumps
//!
//! One file per rank and dump, `nemo-lens-dump-rank<R>-pid<P>-<n>-<reason>.jsonl` in
//! `NEMO_LENS_DUMP_DIR` (default: the working directory at setup; created if missing), written whole under a temporary name
//! and renamed. Each line is a span in the [console layout](crate::export::ConsoleSpanExporter) (the
//! resource of the rank included), so `nemo-lens perfetto` and `nemo-lens summary` read dumps
//! like any span file. Closed spans come first, oldest first; open spans follow, ended at the
//! dump time, with `nemo.span.open = true` and `nemo.span.open_age_s` (seconds since they
//! started). Every dumped span carries its group as `nemo.group`. A dump is written:
//!
//! * on **`SIGUSR1`**: the handler only writes a byte to a pipe; the recorder's thread writes
//!   the dump while the training thread goes on (signals coalesce: one dump in flight plus one
//!   queued, however many arrive);
//! * by the **watchdog**, once, when no span of the recorder's groups has closed for
//!   `NEMO_LENS_HANG_TIMEOUT` seconds (default 600; `0` turns it off), with a warning on stderr
//!   naming the innermost open span and the file;
//! * at a **panic on the main thread** through
//!   [`Telemetry::install_panic_hook`](crate::Telemetry::install_panic_hook), before unwinding
//!   ends the spans it crosses (the first such panic of the process only: a program may catch
//!   many);
//! * at **truncation**, when spans of the recorder's groups are still open: shutdown, SIGTERM or
//!   SIGINT through [`Telemetry::install_signal_handlers`](crate::Telemetry::install_signal_handlers),
//!   the end of a process that panicked;
//! * on demand: [`FlightRecorder::dump`].
//!
//! `nemo-lens hang DUMPS...` merges the dumps of many ranks and names the stuck rank.
//!
//! # On-demand capture: `SIGUSR2` and the control file
//!
//! With `NEMO_LENS_CONTROL_FILE` set, `SIGUSR2` makes the recorder's thread re-read that file:
//! a group spec (as `NEMO_LENS_SPAN_GROUPS`) and an optional step count, e.g. `per_step 100`.
//! The exported span groups switch to the spec (callsite interest is rebuilt once, by the
//! thread, not checked per span); with a count, after that many `step`-group spans (started
//! after the switch) have closed, the thread switches back to the configured groups (a step
//! that starts before it has done so is still captured: one at most unless the thread waits for
//! a core). An empty file switches back at once. With per-step detail capture
//! (`NEMO_LENS_DETAIL_GROUPS`), a file `detail N` keeps the held detail of the next N steps to
//! end instead (the span groups do not change). A bad spec
//! is reported on stderr and changes nothing. Only exporting ranks switch (the others export
//! nothing whatever the groups).
//!
//! # Cost and memory
//!
//! Only spans of the recorder's groups are recorded; [`RecorderLayer`]'s per-layer filter
//! decides once per callsite (see [`RecorderLayer`] for the exact rules), so every other
//! callsite keeps its cost. Recording a span takes a slot of the open table (a compare-and-swap),
//! fills it (the callsite's static metadata, ids, times and up to six field values, strings cut
//! to 24 bytes) and, on close, copies it into the ring: no allocation, no lock, no waiting; a
//! slot held by another writer drops the record and counts it ([`FlightRecorder::dropped`]).
//! Memory is fixed at setup: `(N + 1024) × 256` bytes; a dump streams to its file and adds at
//! most the open spans it copies (1024 records of about 200 bytes) and a 64 KiB buffer, whatever
//! N. `benches/recorder.rs` measures the costs.
//!
//! # Threads and signals
//!
//! With the recorder on (or a control file set), setup starts one thread, `nemo-lens-recorder`,
//! on every enabled rank, exporting or not: it serves `SIGUSR1`/`SIGUSR2` and runs the
//! watchdog. It is the recorder's own: it opens no socket, and a non-exporting rank still builds
//! no provider, exporter thread or socket. `SIGUSR1` is handled only when the ring is on and
//! `SIGUSR2` only when a control file is set (otherwise they keep their default action). In a
//! process forked without exec, the thread is gone and the signals are ignored.

pub(crate) mod control;
mod dump;
mod layer;
mod ring;
mod thread;

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};

pub use self::layer::RecorderLayer;
pub use crate::config::flight_recorder::RecorderConfig;

use self::ring::{OpenTable, Record, Ring};
use crate::config::LensConfig;
use crate::error::Result;
use crate::layer::detail::DetailCapture;
use crate::layer::filter::LensFilter;
use crate::rank::groups::{self, GroupGate};
use crate::record::attributes::RedactKeys;

/// File names of dumps start with this.
const DUMP_PREFIX: &str = "nemo-lens-dump-";

pub(crate) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the layer, the thread and the handle share.
pub(crate) struct Shared {
    /// Recorded groups (plus `step` with a control file, to count steps).
    pub(crate) groups: Vec<String>,
    pub(crate) lens: LensFilter,
    /// The keys whose string values are recorded as `[REDACTED]`.
    pub(crate) redact: RedactKeys,
    pub(crate) ring: Ring,
    pub(crate) open: OpenTable,
    next_id: AtomicU64,
    pub(crate) last_close_ns: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// `step` spans left in a control-file capture (0: none running).
    pub(crate) capture_left: AtomicI64,
    /// Only `step` spans started after the switch count toward a capture.
    pub(crate) capture_since_ns: AtomicU64,
    /// The recorder layer was added to a subscriber.
    pub(crate) registered: AtomicBool,
    pub(crate) watchdog_fired: AtomicBool,
    /// Truncation dumped (or the telemetry shut down): no more watchdog.
    pub(crate) stopped: AtomicBool,
    /// A main-thread panic was dumped (once per process: a program may catch many).
    panic_dumped: AtomicBool,
    pub(crate) dumps: AtomicU64,
    pub(crate) generation: u64,
    pub(crate) started_ns: u64,
    pub(crate) capacity: usize,
    pub(crate) rank: u32,
    pub(crate) trace_id: u128,
    pub(crate) resource_json: String,
    pub(crate) dump_dir: PathBuf,
    pub(crate) hang_timeout: Option<Duration>,
    pub(crate) control_file: Option<PathBuf>,
    pub(crate) exporting: bool,
    pub(crate) gate: Arc<GroupGate>,
    pub(crate) configured: BTreeSet<String>,
    /// The exporting rank's per-step detail capture: the control file's `detail N` requests
    /// reach it, and dumps write the detail its open steps hold.
    pub(crate) detail: Option<Arc<DetailCapture>>,
}

impl Shared {
    #[inline]
    pub(crate) fn wants(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    pub(crate) fn next_id(&self) -> u64 {
        (u64::from(self.rank) << 40)
            | (self.next_id.fetch_add(1, Ordering::Relaxed) & 0xff_ffff_ffff)
    }

    /// A span closed: into the ring, and count it for the watchdog and a capture.
    /// `words`: the encoded record ([`ring`] layout: metadata address, id, parent, start, end).
    pub(crate) fn closed(&self, words: &[u64]) {
        if self.capacity > 0 && !self.ring.push_words(words) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.last_close_ns
            .store(words[ring::END_WORD], Ordering::Relaxed);
        if self.control_file.is_some()
            && self.capture_left.load(Ordering::Acquire) > 0
            && words[3] >= self.capture_since_ns.load(Ordering::Relaxed)
            && meta_of(&Record {
                meta: words[0] as usize,
                ..Record::default()
            })
            .and_then(groups::declared_group)
                == Some(groups::STEP)
            && self.capture_left.fetch_sub(1, Ordering::Relaxed) == 1
        {
            thread::notify(thread::CAPTURE_DONE);
        }
    }

    pub(crate) fn dump(&self, reason: &str) -> io::Result<PathBuf> {
        dump::write(self, reason)
    }
}

/// The callsite metadata of a record.
pub(crate) fn meta_of(record: &Record) -> Option<&'static tracing_core::Metadata<'static>> {
    // SAFETY: `meta` is 0 or the address of a `&'static Metadata<'static>` stored by the layer
    // (records are only decoded from consistent seqlock reads).
    (record.meta != 0).then(|| unsafe { &*(record.meta as *const tracing_core::Metadata<'static>) })
}

/// The flight recorder of this process's telemetry: get it from
/// [`Telemetry::flight_recorder`](crate::Telemetry::flight_recorder) (`None` when it is off).
#[derive(Clone)]
pub struct FlightRecorder {
    shared: Arc<Shared>,
}

impl fmt::Debug for FlightRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlightRecorder")
            .field("groups", &self.shared.groups)
            .field("capacity", &self.shared.capacity)
            .field("dump_dir", &self.shared.dump_dir)
            .finish_non_exhaustive()
    }
}

impl FlightRecorder {
    /// Writes a dump now (reason `manual`) on the calling thread and returns its path.
    pub fn dump(&self) -> io::Result<PathBuf> {
        self.shared.dump("manual")
    }

    /// Spans of the recorder's groups open now.
    pub fn open_spans(&self) -> usize {
        self.shared.open.len()
    }

    /// Records dropped: the open table's probe window was full, or a ring slot was being
    /// written by another thread.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// The recorded groups.
    pub fn groups(&self) -> &[String] {
        &self.shared.groups
    }

    /// Where dumps go.
    pub fn dump_dir(&self) -> &std::path::Path {
        &self.shared.dump_dir
    }

    pub(crate) fn layer<S>(this: Option<&Self>) -> RecorderLayer<S>
    where
        S: tracing_core::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        RecorderLayer::new(this.map(|r| r.shared.clone()))
    }

    /// At a main-thread panic, before unwinding ends the spans it crosses: dump if spans are
    /// open, for the first such panic of the process only (a program that catches its panics
    /// may have many). The recorder keeps running.
    pub(crate) fn on_panic(&self) {
        let s = &self.shared;
        if s.capacity == 0 || s.open.len() == 0 || s.panic_dumped.swap(true, Ordering::SeqCst) {
            return;
        }
        match s.dump("panic") {
            Ok(path) => eprintln!(
                "nemo-lens: {} span(s) open at a panic on the main thread; flight recorder dump: {}",
                s.open.len(),
                path.display()
            ),
            Err(e) => eprintln!("nemo-lens: cannot write the flight recorder dump: {e}"),
        }
    }

    /// At truncation (shutdown, SIGTERM/SIGINT, the end of a panicked process): dump if spans
    /// are open; the watchdog stops either way.
    pub(crate) fn on_truncation(&self, reason: &str) {
        let s = &self.shared;
        if s.stopped.swap(true, Ordering::SeqCst) || s.capacity == 0 || s.open.len() == 0 {
            return;
        }
        let tag = if reason.contains("SIGTERM") {
            "sigterm"
        } else if reason.contains("SIGINT") {
            "sigint"
        } else if reason.contains("panic") {
            "panic"
        } else {
            "shutdown"
        };
        match s.dump(tag) {
            Ok(path) => eprintln!(
                "nemo-lens: {} span(s) open at truncation ({reason}); flight recorder dump: {}",
                s.open.len(),
                path.display()
            ),
            Err(e) => eprintln!("nemo-lens: cannot write the flight recorder dump: {e}"),
        }
    }
}

/// What setup resolved before building anything: `None` when the recorder is off.
pub(crate) struct Plan {
    groups: Vec<String>,
}

impl Plan {
    /// Resolves the recorder's groups (an unknown name fails setup on every enabled rank).
    pub(crate) fn new(config: &LensConfig) -> Result<Option<Plan>> {
        let rc = &config.flight_recorder;
        if !config.enabled || !rc.is_active() {
            return Ok(None);
        }
        let mut set = if rc.capacity > 0 {
            groups::resolve(&rc.groups, "NEMO_LENS_FLIGHT_RECORDER_GROUPS")?
        } else {
            BTreeSet::new()
        };
        if rc.control_file.is_some() {
            set.insert(groups::STEP.to_string());
        }
        Ok(Some(Plan {
            groups: set.into_iter().collect(),
        }))
    }

    /// Builds the slots and starts the recorder's thread.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        self,
        config: &LensConfig,
        rank: u32,
        exporting: bool,
        resource: &opentelemetry_sdk::Resource,
        gate: Arc<GroupGate>,
        lens: LensFilter,
        redact: RedactKeys,
        detail: Option<Arc<DetailCapture>>,
    ) -> Result<FlightRecorder> {
        let rc = &config.flight_recorder;
        let digest = Md5::digest(config.identity.run_id.as_bytes());
        let trace_id = u128::from_be_bytes(digest.into()).max(1);
        let resource_json = crate::pyjson::resource_json(resource);
        let shared = Arc::new(Shared {
            groups: self.groups,
            lens,
            redact,
            ring: Ring::new(rc.capacity),
            open: OpenTable::new(),
            next_id: AtomicU64::new(1),
            last_close_ns: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            capture_left: AtomicI64::new(0),
            capture_since_ns: AtomicU64::new(0),
            registered: AtomicBool::new(false),
            watchdog_fired: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            panic_dumped: AtomicBool::new(false),
            dumps: AtomicU64::new(0),
            generation: crate::ids::fork_generation(),
            started_ns: unix_ns(),
            capacity: rc.capacity,
            rank,
            trace_id,
            resource_json,
            // Resolved now: a later `chdir` of the trainer does not move the dumps.
            dump_dir: std::path::absolute(rc.dump_dir.as_deref().unwrap_or(Path::new(".")))
                .unwrap_or_else(|_| rc.dump_dir.clone().unwrap_or_default()),
            hang_timeout: rc.hang_timeout.filter(|_| rc.capacity > 0),
            control_file: rc.control_file.clone(),
            exporting,
            configured: gate.snapshot(),
            gate,
            detail,
        });
        thread::serve(&shared)?;
        Ok(FlightRecorder { shared })
    }
}
