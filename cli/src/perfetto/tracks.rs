//! The names of the processes (ranks) and thread tracks of the trace, within
//! [`TRACK_TABLE_BYTES`]: each is named once, the first time an event lands on it.

use std::collections::{HashMap, HashSet};

use nemo_lens::semconv;
use serde_json::{Map, Value};

use super::{ENTRY_BYTES, TRACK_TABLE_BYTES};

/// The processes and tracks named so far.
#[derive(Default)]
pub(super) struct Tracks {
    processes: HashSet<i64>,
    /// `(pid, thread.name)` → tid, for tracks named but not numbered.
    named_threads: HashMap<i64, HashMap<String, i64>>,
    /// Tracks numbered for their `thread.name` so far.
    named_count: i64,
    threads: HashSet<(i64, i64)>,
    /// Bytes charged to `processes`, `threads` and `named_threads`.
    bytes: usize,
    /// Events placed on a process or track left unnamed (or on the rank's main track) because
    /// the table was full.
    pub(super) unnamed: u64,
}

impl Tracks {
    /// Charges `bytes` to the table; false when it is full.
    fn charge(&mut self, bytes: usize) -> bool {
        if self.bytes + bytes > TRACK_TABLE_BYTES {
            return false;
        }
        self.bytes += bytes;
        true
    }

    /// Whether process `pid` is to be named now: the first time it is seen, with room in the
    /// table.
    pub(super) fn new_process(&mut self, pid: i64) -> bool {
        if self.processes.contains(&pid) {
            return false;
        }
        if !self.charge(ENTRY_BYTES) {
            self.unnamed += 1;
            return false;
        }
        self.processes.insert(pid);
        true
    }

    /// The track of an event with `attributes` on process `pid`: `thread.id`, else a number for
    /// `thread.name`, else 0 (one per rank); with the track's label when it is to be named now.
    pub(super) fn thread(
        &mut self,
        pid: i64,
        attributes: &Map<String, Value>,
    ) -> (i64, Option<String>) {
        let id = attributes.get(semconv::THREAD_ID).and_then(Value::as_i64);
        let mut name = attributes.get(semconv::THREAD_NAME).and_then(Value::as_str);
        let mut over_budget = false;
        let tid = match (id, name) {
            (Some(id), _) => id,
            (None, Some(n)) => match self.named_threads.get(&pid).and_then(|m| m.get(n)).copied() {
                Some(tid) => tid,
                // Room for the name twice: its entry here and its track's label below.
                None if self.bytes + 2 * (n.len() + ENTRY_BYTES) <= TRACK_TABLE_BYTES => {
                    self.bytes += n.len() + ENTRY_BYTES;
                    self.named_count += 1;
                    let tid = self.named_count;
                    self.named_threads
                        .entry(pid)
                        .or_default()
                        .insert(n.to_owned(), tid);
                    tid
                }
                None => {
                    // The rank's main track, under its own name.
                    over_budget = true;
                    name = None;
                    0
                }
            },
            (None, None) => 0,
        };
        let mut label = None;
        if !self.threads.contains(&(pid, tid)) {
            if self.charge(name.map_or(16, str::len) + ENTRY_BYTES) {
                self.threads.insert((pid, tid));
                label = Some(match (name, tid) {
                    (Some(n), _) => n.to_owned(),
                    (None, 0) => "spans".to_owned(),
                    (None, t) => format!("thread {t}"),
                });
            } else {
                over_budget = true;
            }
        }
        if over_budget {
            self.unnamed += 1;
        }
        (tid, label)
    }
}
