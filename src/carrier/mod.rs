//! `OTEL_RESOURCE_ATTRIBUTES` as the carrier of a job's identity: what a launcher hands to the
//! processes it starts, read and written as Python NeMo Lens's `resources.attributes` does.
//!
//! The variable holds `key=value` pairs separated by `,`. Values are percent-encoded (every byte
//! but `A–Z a–z 0–9 - . _ ~`, as Python's `urllib.parse.quote(value, safe="")`); keys are not
//! encoded, so a key holding `,` or `=` cannot be carried: such a key is refused with a warning.
//! Segments a launcher already put there pass through **byte for byte** (even bytes that are
//! not UTF-8, and escapes that are not the canonical ones); a segment without `=` or with a blank
//! key is dropped, as every reader would ignore it.
//!
//! | function | Python |
//! |---|---|
//! | [`extend`] | `extend_otel_resource_attributes(value, additions, overwrite=)` |
//! | [`publish`] | `publish_otel_resource_attributes(additions, overwrite=)`; [`Published::keep`]: `set_otel_resource_attributes` |
//!
//! A rank set up with [`crate::Telemetry::builder`] carries the job's identity on its resource
//! without calling anything here, and reads the variable itself. A launcher that starts ranks
//! (or a tool that prepares their environment) hands the identity down with these; the ranks
//! then keep the launcher's values.
//!
//! Warnings (a refused key, a value that cannot be carried) go to the `tracing` target
//! `nemo_lens::carrier` when a subscriber is installed, else to stderr.
//!
//! # Handing identity to a child
//!
//! The environment is shared by every thread of the process, and changing it while another
//! thread reads it is undefined behaviour on most platforms: [`publish`] is therefore `unsafe`.
//! A launcher that starts its children itself needs no such thing: it gives each
//! [`std::process::Command`] its own value.
//!
//! ```
//! use nemo_lens::{Overwrite, carrier};
//! use opentelemetry::KeyValue;
//!
//! // What this launcher inherited, and what it adds for one worker.
//! let inherited = "slurm.job.id=12345_7,team=ml%20infra";
//! let worker = [KeyValue::new("nv.dl.rank", 3_i64), KeyValue::new("nv.dl.world_size", 8_i64)];
//! let value = carrier::extend(inherited, &worker, Overwrite::Yes);
//! assert_eq!(value, "slurm.job.id=12345_7,team=ml%20infra,nv.dl.rank=3,nv.dl.world_size=8");
//!
//! let mut child = std::process::Command::new("trainer");
//! child.env("OTEL_RESOURCE_ATTRIBUTES", &value);
//! ```
//!
//! A launcher written in Rust derives the job's identity (the Slurm attributes, `nv.dl.job.uuid`
//! and `nv.dl.run.uuid`) from its environment with [`crate::identity`], and hands it down under
//! what it was given:
//!
//! ```
//! use nemo_lens::{Overwrite, carrier, identity};
//!
//! let env = |k: &str| std::env::var(k).ok();
//! let attrs = identity::job_attributes(env, Some("exp-42"));
//! let inherited = std::env::var_os("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
//! let value = carrier::extend(&inherited, &attrs, Overwrite::No); // what the launcher was given wins
//! assert!(value.to_string_lossy().contains("nv.dl.run.uuid="));
//! ```

mod encoding;

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};

use opentelemetry::{KeyValue, Value};

pub(crate) use encoding::{percent_decode, py_strip, python_float, segments};

use crate::Overwrite;

#[cfg(test)]
mod tests;

/// The variable the carrier lives in.
pub(crate) const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// The `tracing` target of the carrier's warnings.
const TARGET: &str = "nemo_lens::carrier";

/// Parses the text of `OTEL_RESOURCE_ATTRIBUTES` as the OpenTelemetry SDKs (and Python's
/// `parse_otel_resource_attributes`) do: split on `,`; a segment without `=` or with a blank
/// key is skipped; the key is the text before the first `=`, stripped (never decoded); the value
/// the text after it, stripped then percent-decoded (a malformed escape stays as written, `+`
/// stays `+`, bytes that are not UTF-8 become U+FFFD). A key given twice keeps its first
/// position and its last value. Every value is a string.
pub(crate) fn parse(text: &str) -> Vec<KeyValue> {
    let mut out: Vec<KeyValue> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for segment in segments(text.as_bytes()) {
        let key = String::from_utf8_lossy(segment.key).into_owned();
        let value = Value::from(percent_decode(segment.raw_value()).into_owned());
        match index.get(&key) {
            Some(&i) => out[i].value = value,
            None => {
                index.insert(key.clone(), out.len());
                out.push(KeyValue::new(key, value));
            }
        }
    }
    out
}

/// Formats attributes for `OTEL_RESOURCE_ATTRIBUTES`, as Python's
/// `format_otel_resource_attributes`: `key=value` joined by `,`, keys stripped and not encoded,
/// values percent-encoded. Values print as Python prints them: `True` / `False`, integers,
/// `repr(float)` (`0.5`, `1e-05`), strings as they are (`""` gives `key=`).
///
/// Dropped with a warning: a key that is blank or holds `,` or `=` (the format has no encoding
/// for them), and an array value. A key given twice (after stripping) keeps its first position
/// and its last value.
pub(crate) fn format(attributes: &[KeyValue]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for kv in attributes {
        let key = kv.key.as_str();
        let name = py_strip(key);
        if name.is_empty() || name.contains([',', '=']) {
            warn(&format!(
                "Resource attribute key {:?} cannot be carried in {OTEL_RESOURCE_ATTRIBUTES} and \
                 was dropped; ',' and '=' have no encoding in this format.",
                shown(key)
            ));
            continue;
        }
        let Some(text) = encoding::python_text(&kv.value) else {
            warn(&format!(
                "Resource attribute {:?} has value type array, which cannot survive \
                 {OTEL_RESOURCE_ATTRIBUTES} and was dropped; only str, bool, int and float \
                 round-trip.",
                shown(name)
            ));
            continue;
        };
        let part = format!("{name}={}", encoding::percent_encode(&text));
        match index.get(name) {
            Some(&i) => parts[i] = part,
            None => {
                index.insert(name, parts.len());
                parts.push(part);
            }
        }
    }
    parts.join(",")
}

/// Adds `additions` to the value of `OTEL_RESOURCE_ATTRIBUTES` (a `&str`, or the raw value
/// [`std::env::var_os`] gives), as Python's `extend_otel_resource_attributes(value, additions,
/// overwrite=...)`, and returns the new value (for [`std::process::Command::env`]).
///
/// * The segments of `inherited` pass through byte for byte, in order (a segment without `=` or
///   with a blank key is dropped), also bytes that are not UTF-8.
/// * An addition whose value is the empty string counts as absent.
/// * [`Overwrite::No`]: a key already present wins; only missing keys are appended.
/// * [`Overwrite::Yes`]: every inherited segment with a key being added is removed (duplicates
///   included) and the additions are appended.
///
/// The additions are formatted as Python's `format_otel_resource_attributes`: `key=value`
/// joined by `,`, keys stripped and not encoded, values percent-encoded and printed as Python
/// prints them (`True` / `False`, integers, `repr(float)` such as `0.5` or `1e-05`, strings as
/// they are). Dropped with a warning: a key that is blank or holds `,` or `=` (the format has no
/// encoding for them), and an array value. A key given twice keeps its first position and its
/// last value.
///
/// ```
/// use nemo_lens::{Overwrite, carrier};
/// use opentelemetry::KeyValue;
///
/// let inherited = "nv.dl.rank=1,launcher.id=abc,nv.dl.rank=2, malformed ";
/// let rank = [KeyValue::new("nv.dl.rank", 3_i64)];
/// assert_eq!(carrier::extend(inherited, &rank, Overwrite::Yes), "launcher.id=abc,nv.dl.rank=3");
/// assert_eq!(
///     carrier::extend(inherited, &rank, Overwrite::No),
///     "nv.dl.rank=1,launcher.id=abc,nv.dl.rank=2"
/// );
/// assert_eq!(
///     carrier::extend("", &[KeyValue::new("nemo.run.id", "exp/1,seed=7"), KeyValue::new("rate", 0.5)], Overwrite::No),
///     "nemo.run.id=exp%2F1%2Cseed%3D7,rate=0.5"
/// );
/// assert_eq!(
///     carrier::extend("odd=%2Fpre%2Dencoded", &[KeyValue::new("slurm.job.id", "12345")], Overwrite::No),
///     "odd=%2Fpre%2Dencoded,slurm.job.id=12345"
/// );
/// ```
pub fn extend(
    inherited: impl AsRef<OsStr>,
    additions: &[KeyValue],
    overwrite: Overwrite,
) -> OsString {
    from_bytes(extend_bytes(
        &to_bytes(inherited.as_ref()),
        additions,
        overwrite.yes(),
    ))
}

/// [`extend`] on raw bytes.
pub(crate) fn extend_bytes(inherited: &[u8], additions: &[KeyValue], overwrite: bool) -> Vec<u8> {
    let present: Vec<KeyValue> = additions
        .iter()
        .filter(|kv| !matches!(&kv.value, Value::String(s) if s.as_str().is_empty()))
        .cloned()
        .collect();
    let encoded = format(&present);
    let added: Vec<_> = segments(encoded.as_bytes()).collect();
    let added_keys: HashSet<&[u8]> = added.iter().map(|a| a.key).collect();
    let mut kept: Vec<_> = segments(inherited).collect();
    if overwrite {
        kept.retain(|s| !added_keys.contains(s.key));
    }
    let kept_keys: HashSet<&[u8]> = kept.iter().map(|s| s.key).collect();
    let appended = added
        .iter()
        .filter(|a| overwrite || !kept_keys.contains(a.key));
    let mut out = Vec::with_capacity(inherited.len() + encoded.len() + 1);
    for (i, raw) in kept
        .iter()
        .map(|s| s.raw)
        .chain(appended.map(|a| a.raw))
        .enumerate()
    {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(raw);
    }
    out
}

/// Reads the variable's raw bytes from the process environment (empty when unset).
fn current() -> Option<OsString> {
    std::env::var_os(OTEL_RESOURCE_ATTRIBUTES)
}

#[cfg(unix)]
fn to_bytes(value: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    value.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn to_bytes(value: &std::ffi::OsStr) -> Vec<u8> {
    value.to_string_lossy().into_owned().into_bytes()
}

#[cfg(unix)]
fn from_bytes(bytes: Vec<u8>) -> OsString {
    use std::os::unix::ffi::OsStringExt;
    OsString::from_vec(bytes)
}

#[cfg(not(unix))]
fn from_bytes(bytes: Vec<u8>) -> OsString {
    OsString::from(String::from_utf8_lossy(&bytes).into_owned())
}

/// Publishes `additions` in the process's `OTEL_RESOURCE_ATTRIBUTES` ([`extend`], on the
/// variable's raw bytes) for as long as the returned guard lives, as Python's
/// `publish_otel_resource_attributes` context manager: processes started meanwhile inherit
/// them. [`Overwrite::Yes`] (Python's default) replaces inherited values of the same keys;
/// [`Overwrite::No`] keeps them.
///
/// Dropping the guard restores the variable exactly as it was (the same bytes, or unset if it
/// was unset), also when a panic unwinds through the scope. Guards nest: drop them in reverse
/// order of creation (Rust's scoping does this for guards held in local variables).
/// [`Published::keep`] leaves the new value in place instead (Python's
/// `set_otel_resource_attributes`).
///
/// # Safety
///
/// This changes the process environment ([`std::env::set_var`]), and so does the guard's drop:
/// no other thread may read or write the environment while either happens (that includes
/// `getenv` inside C libraries, DNS resolution and time-zone lookups). Call it at startup,
/// before other threads exist, or serialise every access yourself. Scopes may nest in one
/// thread; they must not overlap across threads. To hand a value to one child, prefer
/// [`extend`] and [`std::process::Command::env`], which are safe.
///
/// ```
/// use nemo_lens::{Overwrite, carrier};
/// use opentelemetry::KeyValue;
///
/// // SAFETY: a doctest's only thread touches the environment.
/// unsafe {
///     std::env::set_var("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.rank=0,launcher.id=abc");
///     {
///         let _scope = carrier::publish(&[KeyValue::new("nv.dl.rank", 2_i64)], Overwrite::Yes);
///         assert_eq!(
///             std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap(),
///             "launcher.id=abc,nv.dl.rank=2"
///         );
///         // ... start the worker here ...
///     }
/// }
/// assert_eq!(std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap(), "nv.dl.rank=0,launcher.id=abc");
/// ```
#[must_use = "the previous value is restored when the guard is dropped; `keep()` keeps the new one"]
pub unsafe fn publish(additions: &[KeyValue], overwrite: Overwrite) -> Published {
    let previous = current();
    let inherited = previous.as_deref().map(to_bytes).unwrap_or_default();
    let value = from_bytes(extend_bytes(&inherited, additions, overwrite.yes()));
    // SAFETY: the caller guarantees that no other thread accesses the environment meanwhile.
    unsafe { std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, &value) };
    Published {
        previous: Some(previous),
        value,
    }
}

/// Installs `value` as the process's `OTEL_RESOURCE_ATTRIBUTES` until the guard drops: an exact
/// map, as setup's `publish_resource_attributes` hands its resolved resource to children.
///
/// # Safety
///
/// As [`publish`]: no other thread may read or write the environment meanwhile, nor while the
/// guard drops.
pub(crate) unsafe fn install(value: OsString) -> Published {
    let previous = current();
    // SAFETY: the caller guarantees that no other thread accesses the environment meanwhile.
    unsafe { std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, &value) };
    Published {
        previous: Some(previous),
        value,
    }
}

/// The scope of [`publish`]: restores `OTEL_RESOURCE_ATTRIBUTES` when dropped, unless kept.
#[derive(Debug)]
#[must_use = "the previous value is restored when the guard is dropped; `keep()` keeps the new one"]
pub struct Published {
    /// What to restore (`Some(None)`: unset the variable); `None` once kept.
    previous: Option<Option<OsString>>,
    /// The value published.
    value: OsString,
}

impl Published {
    /// Keeps the published value in the environment for the rest of the process (Python's
    /// `set_otel_resource_attributes`) and returns it.
    ///
    /// ```
    /// use nemo_lens::{Overwrite, carrier};
    /// use opentelemetry::KeyValue;
    ///
    /// // SAFETY: a doctest's only thread touches the environment.
    /// let value = unsafe { carrier::publish(&[KeyValue::new("nv.dl.world_size", 8_i64)], Overwrite::No) }
    ///     .keep();
    /// assert!(value.to_string_lossy().ends_with("nv.dl.world_size=8"));
    /// assert_eq!(std::env::var_os("OTEL_RESOURCE_ATTRIBUTES"), Some(value));
    /// ```
    pub fn keep(mut self) -> OsString {
        self.previous = None;
        std::mem::take(&mut self.value)
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        let Some(previous) = &self.previous else {
            return;
        };
        // SAFETY: `publish`'s caller promised that no other thread accesses the environment
        // while the scope is opened or closed.
        unsafe {
            match previous {
                Some(value) => std::env::set_var(OTEL_RESOURCE_ATTRIBUTES, value),
                None => std::env::remove_var(OTEL_RESOURCE_ATTRIBUTES),
            }
        }
    }
}

/// A key as a warning shows it: at most 64 characters.
fn shown(key: &str) -> String {
    crate::text::shown(key)
}

/// A warning on the `tracing` target [`TARGET`] when a subscriber can take it; otherwise (none
/// installed, as at startup) one line on stderr.
pub(crate) fn warn(message: &str) {
    let no_subscriber =
        tracing::dispatcher::get_default(|d| d.is::<tracing_core::subscriber::NoSubscriber>());
    if no_subscriber {
        eprintln!("nemo-lens: warning: {message}");
    } else {
        tracing::warn!(target: TARGET, "{message}");
    }
}
