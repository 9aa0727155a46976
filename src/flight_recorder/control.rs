//! The control file, re-read on `SIGUSR2`: switch the exported span groups of a running job.
//!
//! The file holds a group spec (as `NEMO_LENS_SPAN_GROUPS`: groups and presets separated by
//! commas or white space) and, optionally, a step count as the last word:
//!
//! | file | effect |
//! |---|---|
//! | `per_step 100` | export the `per_step` groups for the next 100 `step` spans, then the configured groups again |
//! | `default,forward_backward` | export those groups until the next switch |
//! | *(empty)* | back to the configured groups now |
//! | `detail 5` | with per-step detail capture (`NEMO_LENS_DETAIL_GROUPS`): keep the held detail of the next 5 steps to end (reason `requested`); groups unchanged |
//!
//! Lines starting with `#` are comments. Each switch rebuilds callsite interest once (on the
//! recorder's thread); nothing is checked per span. The file must be a regular file of at most
//! 64 KiB: anything else (a FIFO, a device, a directory) is refused with one line on stderr and
//! changes nothing.

use std::sync::atomic::Ordering;

use super::Shared;
use crate::rank::groups;

/// Variable named in messages about the file.
const VAR: &str = "NEMO_LENS_CONTROL_FILE";

/// The word that asks per-step detail capture to keep the next steps (`detail N`).
const DETAIL_WORD: &str = "detail";

/// The most of the file read: a group spec is a few words.
const MAX_BYTES: u64 = 64 * 1024;

/// `(group spec, step count)` of the file's text; an empty spec means "configured groups".
pub(crate) fn parse(text: &str) -> (String, Option<u64>) {
    let mut words: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|w| !w.is_empty())
        .collect();
    let count = match words.last().map(|w| w.parse::<u64>()) {
        Some(Ok(n)) if words.len() >= 2 => {
            words.pop();
            Some(n).filter(|&n| n > 0)
        }
        _ => None,
    };
    (words.join(","), count)
}

/// On `SIGUSR2`: read the file and switch. The recorder's thread reads it, so it must never
/// block there: a FIFO, a device or a file over [`MAX_BYTES`] is refused
/// ([`named_file`](crate::config::named_file)).
pub(crate) fn reload(shared: &Shared) {
    let Some(path) = &shared.control_file else {
        return;
    };
    let text = match crate::config::named_file::read(path, MAX_BYTES)
        .and_then(|bytes| String::from_utf8(bytes).map_err(std::io::Error::other))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!(
                "nemo-lens: SIGUSR2: cannot read {VAR} '{}': {e}; span groups unchanged",
                path.display()
            );
            return;
        }
    };
    let (spec, count) = parse(&text);
    if spec.eq_ignore_ascii_case(DETAIL_WORD) {
        return request_detail(shared, count.unwrap_or(1));
    }
    if spec.is_empty() {
        return capture_done(shared);
    }
    let set = match groups::resolve(&spec, VAR) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("nemo-lens: SIGUSR2: {e}; span groups unchanged");
            return;
        }
    };
    if shared.exporting {
        shared.capture_left.store(0, Ordering::Release);
        shared.gate.set(set);
        // Steps that start from now on run with the new interest: they are the ones counted.
        shared
            .capture_since_ns
            .store(super::unix_ns(), Ordering::Relaxed);
        shared
            .capture_left
            .store(count.map_or(0, |n| n as i64), Ordering::Release);
    }
    match count {
        Some(n) => eprintln!("nemo-lens: SIGUSR2: span groups '{spec}' for {n} steps"),
        None => eprintln!("nemo-lens: SIGUSR2: span groups '{spec}'"),
    }
}

/// `detail N`: the detail capture keeps the next `steps` steps.
fn request_detail(shared: &Shared, steps: u64) {
    match &shared.detail {
        Some(detail) => {
            detail.request(steps);
            eprintln!("nemo-lens: SIGUSR2: keeping the detail of the next {steps} steps");
        }
        // A non-exporting rank has nothing to keep; an exporting one without detail groups
        // says why nothing happens.
        None if shared.exporting => eprintln!(
            "nemo-lens: SIGUSR2: 'detail' asks for per-step detail capture, which is off \
             (NEMO_LENS_DETAIL_GROUPS is not set); nothing changed"
        ),
        None => {}
    }
}

/// A capture's step count ran out (or the file was emptied): back to the configured groups.
pub(crate) fn capture_done(shared: &Shared) {
    shared.capture_left.store(0, Ordering::Relaxed);
    if shared.exporting {
        shared.gate.set(shared.configured.iter().cloned());
    }
    eprintln!("nemo-lens: span groups back to the configured ones");
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn spec_and_optional_count() {
        assert_eq!(parse("per_step 100\n"), ("per_step".into(), Some(100)));
        assert_eq!(
            parse("default, forward_backward"),
            ("default,forward_backward".into(), None)
        );
        assert_eq!(parse("# comment\n\n"), (String::new(), None));
        assert_eq!(parse("step 0"), ("step".into(), None));
        assert_eq!(parse("42"), ("42".into(), None));
    }
}
