//! The thread a span is made on, as OpenTelemetry's `thread.id` and `thread.name`
//! ([`GroupsConfig::thread_attributes`](crate::GroupsConfig::thread_attributes), off by
//! default). Each thread reads its identity once and keeps the two values ready; a span gets
//! copies of them: an integer and a reference-counted string, no allocation.
//!
//! `thread.id` is the OS thread id on Linux and Android (the `gettid` system call, through
//! `libc::syscall`: glibc before 2.30 has no `gettid` wrapper), the id `ps -L`, `top -H`,
//! `perf` and Nsight Systems show; elsewhere a number counted per process from 1, in the order
//! threads first record a span. `thread.name` is the Rust thread's name
//! (`std::thread::Builder::name`; `main` for the main thread), absent for an unnamed thread.

use std::cell::RefCell;
use std::sync::Arc;

use opentelemetry::{Key, KeyValue, StringValue, Value};

use crate::ids;
use crate::record::attributes::SpanAttributes;
use crate::semconv;

/// One thread's identity, ready to be copied into spans.
struct ThreadIdentity {
    /// The [fork generation](crate::ids) it was read in: the thread of a forked child is
    /// another OS thread (another id).
    generation: u64,
    id: i64,
    name: Option<Arc<str>>,
}

impl ThreadIdentity {
    fn current(generation: u64) -> Self {
        ThreadIdentity {
            generation,
            id: os_thread_id(),
            name: std::thread::current().name().map(Arc::from),
        }
    }
}

thread_local! {
    static IDENTITY: RefCell<Option<ThreadIdentity>> = const { RefCell::new(None) };
}

/// The OS thread id (Linux, Android).
#[cfg(any(target_os = "linux", target_os = "android"))]
// `syscall` returns a `c_long`: `i64` on 64-bit targets, `i32` on 32-bit ones.
#[allow(clippy::unnecessary_cast)]
fn os_thread_id() -> i64 {
    // SAFETY: gettid takes no argument, cannot fail and touches no memory of ours.
    unsafe { libc::syscall(libc::SYS_gettid) as i64 }
}

/// A per-process thread number, from 1 (no OS thread id read here).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn os_thread_id() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static NEXT: AtomicI64 = AtomicI64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Appends `thread.id` and `thread.name` of the calling thread to a new span's `attributes`,
/// but not a key the span set itself; `thread.name` is cut to `limit` characters (the span
/// attribute value length limit). Nothing while the thread's locals are being destroyed.
pub(crate) fn append(attributes: &mut SpanAttributes, limit: Option<usize>) {
    let generation = ids::fork_generation();
    let _ = IDENTITY.try_with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return;
        };
        let identity = match &mut *slot {
            Some(identity) if identity.generation == generation => identity,
            other => other.insert(ThreadIdentity::current(generation)),
        };
        let set = |key: &str| attributes.iter().any(|kv| kv.key.as_str() == key);
        let (has_id, has_name) = (set(semconv::THREAD_ID), set(semconv::THREAD_NAME));
        if !has_id {
            attributes.push(KeyValue::new(
                Key::from_static_str(semconv::THREAD_ID),
                Value::I64(identity.id),
            ));
        }
        if let Some(name) = identity.name.as_ref().filter(|_| !has_name) {
            attributes.push(KeyValue::new(
                Key::from_static_str(semconv::THREAD_NAME),
                Value::String(name_value(name, limit)),
            ));
        }
    });
}

/// The thread's name as a value: shared, unless it is longer than `limit` characters.
fn name_value(name: &Arc<str>, limit: Option<usize>) -> StringValue {
    match limit {
        // Bytes bound characters from above: most names need no scan.
        Some(limit) if name.len() > limit => match name.char_indices().nth(limit) {
            Some((cut, _)) => StringValue::from(name[..cut].to_string()),
            None => StringValue::from(name.clone()),
        },
        _ => StringValue::from(name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(attributes: &'a SpanAttributes, key: &str) -> Option<&'a Value> {
        attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    #[test]
    fn a_named_thread_gives_its_id_and_name_the_same_for_every_span() {
        let (first, second, other) = std::thread::Builder::new()
            .name("loader".into())
            .spawn(|| {
                let (mut a, mut b) = (SpanAttributes::new(), SpanAttributes::new());
                append(&mut a, None);
                append(&mut b, None);
                let other = std::thread::spawn(|| {
                    let mut c = SpanAttributes::new();
                    append(&mut c, None);
                    c
                })
                .join()
                .unwrap();
                (a, b, other)
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(first, second);
        assert_eq!(
            value(&first, semconv::THREAD_NAME),
            Some(&Value::from("loader"))
        );
        let id = value(&first, semconv::THREAD_ID);
        assert!(matches!(id, Some(Value::I64(n)) if *n > 0), "{id:?}");
        // An unnamed thread: its own id, no name.
        assert_ne!(value(&other, semconv::THREAD_ID), id);
        assert_eq!(value(&other, semconv::THREAD_NAME), None);
    }

    #[test]
    fn a_key_the_span_set_is_kept_and_a_long_name_is_cut() {
        std::thread::Builder::new()
            .name("data-loader-7".into())
            .spawn(|| {
                let mut attributes = SpanAttributes::new();
                attributes.push(KeyValue::new(semconv::THREAD_ID, "mine"));
                append(&mut attributes, Some(4));
                assert_eq!(attributes.len(), 2, "{attributes:?}");
                assert_eq!(
                    value(&attributes, semconv::THREAD_ID),
                    Some(&Value::from("mine"))
                );
                assert_eq!(
                    value(&attributes, semconv::THREAD_NAME),
                    Some(&Value::from("data"))
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
