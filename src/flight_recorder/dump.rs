//! Writing a dump: the ring and the open table as console JSONL, one file per dump.
//!
//! A dump streams: the ring is read one slot at a time and each line goes through a small
//! buffer to the file, so a dump holds the open spans (at most [`OPEN_SLOTS`] records) and
//! [`BUFFER_BYTES`] whatever the ring's size. It is written under a temporary name (created
//! new, never following a link) and renamed when complete; a dump that fails (a full disk)
//! removes its temporary file. A process killed mid-dump leaves its temporary file: the next
//! dump into the directory removes such files once untouched for [`STALE_TMP`] (a dump in
//! progress writes its file continuously), and replaces one under its own name (a process of
//! an earlier run with the same pid, as in a restarted container).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write as _};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;

#[cfg(doc)]
use super::ring::OPEN_SLOTS;
use super::ring::{Kind, Record};
use super::{Shared, meta_of, unix_ns};
use crate::pyjson::{write_attributes, write_json_str, write_time};
use crate::record::held::HeldView;
use crate::semconv::{NEMO_DETAIL_REASON, NEMO_GROUP, NEMO_SPAN_OPEN, NEMO_SPAN_OPEN_AGE_S};

/// The file buffer of a dump.
pub(crate) const BUFFER_BYTES: usize = 64 * 1024;

/// A dump's temporary file untouched this long belongs to a process that died mid-dump.
pub(crate) const STALE_TMP: Duration = Duration::from_secs(60);

/// Directory entries looked at for stale temporary files per dump (a directory of many files
/// costs a dump this much at most).
const STALE_SCAN: usize = 10_000;

/// Writes the dump (closed spans oldest first, then the open ones ended now) and returns its
/// path. Called off the training thread (the recorder's thread) except at truncation, at a
/// main-thread panic and by [`FlightRecorder::dump`](super::FlightRecorder::dump).
pub(crate) fn write(shared: &Shared, reason: &str) -> io::Result<PathBuf> {
    let n = shared.dumps.fetch_add(1, Ordering::Relaxed) + 1;
    let name = format!(
        "{}rank{}-pid{}-{n}-{reason}.jsonl",
        super::DUMP_PREFIX,
        shared.rank,
        std::process::id()
    );
    std::fs::create_dir_all(&shared.dump_dir)?;
    remove_stale_tmp(&shared.dump_dir);
    let path = shared.dump_dir.join(&name);
    let tmp = shared.dump_dir.join(format!(".{name}.tmp"));
    // Dump names are unique within a process: a file under this one was left by an earlier
    // process with the same pid, killed mid-dump.
    let file = match create_new(&tmp) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(&tmp)?;
            create_new(&tmp)?
        }
        other => other?,
    };
    let written = write_lines(shared, file, reason).and_then(|()| std::fs::rename(&tmp, &path));
    match written {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Removes the dumps' temporary files in `dir` untouched for [`STALE_TMP`] (never following a
/// link: a link is removed, not its target).
fn remove_stale_tmp(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{}", super::DUMP_PREFIX);
    let now = SystemTime::now();
    for entry in entries.take(STALE_SCAN).flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(&prefix) || !name.ends_with(".tmp") {
            continue;
        }
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age >= STALE_TMP));
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Creates `path`, which must not exist: a file, FIFO or link someone left under the
/// temporary name is never written through.
fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Streams the lines into `file` and syncs it: the ring, the open spans, then the detail the
/// open steps hold (per-step detail capture), which would otherwise never leave a hung rank.
fn write_lines(shared: &Shared, file: File, reason: &str) -> io::Result<()> {
    // What is open at the dump's time, taken first: the ring is streamed after it.
    let now = unix_ns();
    let mut open = shared.open.snapshot();
    open.sort_by_key(|r| (r.start_ns, r.id));
    let mut out = BufWriter::with_capacity(BUFFER_BYTES, file);
    let mut buf = Vec::with_capacity(1024);
    shared.ring.try_for_each(|r| {
        buf.clear();
        line(shared, r, None, &mut buf);
        out.write_all(&buf)
    })?;
    for r in &open {
        buf.clear();
        line(shared, r, Some(now), &mut buf);
        out.write_all(&buf)?;
    }
    if let Some(detail) = &shared.detail {
        for view in detail.held_views() {
            buf.clear();
            held_line(shared, view, reason, &mut buf);
            out.write_all(&buf)?;
        }
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_data()
}

/// One span line; `open_at` is the dump time for a span still open.
fn line(shared: &Shared, r: &Record, open_at: Option<u64>, out: &mut Vec<u8>) {
    let Some(meta) = meta_of(r) else { return };
    let fields: Vec<&'static str> = meta.fields().iter().map(|f| f.name()).collect();
    let mut attrs: Vec<KeyValue> = Vec::with_capacity(r.n_attrs as usize + 3);
    for a in &r.attrs[..r.n_attrs as usize] {
        let Some(&key) = fields.get(a.field as usize) else {
            continue;
        };
        let bits = a.number();
        let kv = match a.kind {
            Kind::I64 => KeyValue::new(key, bits as i64),
            Kind::U64 => match i64::try_from(bits) {
                Ok(v) => KeyValue::new(key, v),
                Err(_) => KeyValue::new(key, bits.to_string()),
            },
            Kind::F64 => KeyValue::new(key, f64::from_bits(bits)),
            Kind::Bool => KeyValue::new(key, bits != 0),
            Kind::Str => KeyValue::new(
                key,
                String::from_utf8_lossy(&a.bytes[..a.len as usize]).into_owned(),
            ),
            Kind::Empty => continue,
        };
        attrs.push(kv);
    }
    if let Some(group) = shared.lens.group_of(meta) {
        attrs.push(KeyValue::new(NEMO_GROUP, group.to_string()));
    }
    let end_ns = match open_at {
        Some(now) => {
            let age = now.saturating_sub(r.start_ns) as f64 / 1e9;
            attrs.push(KeyValue::new(NEMO_SPAN_OPEN, true));
            attrs.push(KeyValue::new(
                NEMO_SPAN_OPEN_AGE_S,
                (age * 1000.0).round() / 1000.0,
            ));
            now.max(r.start_ns)
        }
        None => r.end_ns,
    };
    out.extend_from_slice(b"{\"name\": ");
    write_json_str(out, meta.name());
    out.extend_from_slice(b", \"context\": ");
    context(out, shared.trace_id, r.id);
    out.extend_from_slice(b", \"kind\": \"SpanKind.INTERNAL\", \"parent_id\": ");
    if r.parent == 0 {
        out.extend_from_slice(b"null");
    } else {
        let _ = write!(out, "\"0x{:016x}\"", r.parent);
    }
    out.extend_from_slice(b", \"start_time\": ");
    write_time(out, UNIX_EPOCH + Duration::from_nanos(r.start_ns));
    out.extend_from_slice(b", \"end_time\": ");
    write_time(out, UNIX_EPOCH + Duration::from_nanos(end_ns));
    out.extend_from_slice(b", \"status\": {\"status_code\": \"UNSET\"}, \"attributes\": ");
    write_attributes(out, &attrs);
    out.extend_from_slice(b", \"events\": [], \"links\": [], \"resource\": ");
    out.extend_from_slice(shared.resource_json.as_bytes());
    out.extend_from_slice(b"}\n");
}

/// One line for a record held by an open step: its own ids (those of the exported spans, not
/// the recorder's), marked with the dump's reason in `nemo.detail.reason`.
fn held_line(shared: &Shared, view: HeldView, reason: &str, out: &mut Vec<u8>) {
    let mut attrs = view.attributes;
    attrs.push(KeyValue::new(NEMO_DETAIL_REASON, reason.to_string()));
    out.extend_from_slice(b"{\"name\": ");
    write_json_str(out, &view.name);
    out.extend_from_slice(b", \"context\": ");
    context(
        out,
        u128::from_be_bytes(view.cx.trace_id().to_bytes()),
        u64::from_be_bytes(view.cx.span_id().to_bytes()),
    );
    out.extend_from_slice(b", \"kind\": \"SpanKind.INTERNAL\", \"parent_id\": ");
    match view.parent {
        Some(p) => {
            let _ = write!(out, "\"0x{p}\"");
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b", \"start_time\": ");
    write_time(out, view.start);
    out.extend_from_slice(b", \"end_time\": ");
    write_time(out, view.end.unwrap_or(view.start));
    out.extend_from_slice(if view.error {
        b", \"status\": {\"status_code\": \"ERROR\"}, \"attributes\": "
    } else {
        b", \"status\": {\"status_code\": \"UNSET\"}, \"attributes\": "
    });
    write_attributes(out, &attrs);
    out.extend_from_slice(b", \"events\": [], \"links\": [], \"resource\": ");
    out.extend_from_slice(shared.resource_json.as_bytes());
    out.extend_from_slice(b"}\n");
}

fn context(out: &mut Vec<u8>, trace_id: u128, span_id: u64) {
    let _ = write!(
        out,
        "{{\"trace_id\": \"0x{trace_id:032x}\", \"span_id\": \"0x{span_id:016x}\", \"trace_state\": \"[]\"}}"
    );
}
