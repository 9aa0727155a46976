//! The `--span` arguments of `emit-spans`: each read as Python's `_parse_span_arg`, all checked
//! together as `_validate_span_args` (Python's messages), ordered parents first, and refused
//! when OTLP cannot carry their times.

use std::collections::HashMap;

use anyhow::anyhow;

use nemo_lens::{EpochSeconds, LensError};

/// The latest time OTLP carries: `u64::MAX` nanoseconds after the epoch.
const LATEST_NS: i128 = u64::MAX as i128;

/// One valid `--span`.
#[derive(Debug)]
pub(super) struct SpanSpec {
    pub(super) name: String,
    pub(super) start: EpochSeconds,
    pub(super) end: EpochSeconds,
    pub(super) start_ns: i128,
    pub(super) end_ns: i128,
    pub(super) parent: Option<String>,
}

/// Reads one `--span` as Python's `_parse_span_arg`: the reason it is skipped, else the span.
fn parse_one(arg: &str) -> Result<SpanSpec, String> {
    let fields: Vec<&str> = arg.split(',').map(str::trim).collect();
    if !(3..=4).contains(&fields.len()) {
        return Err(format!(
            "skipping {}: expected NAME,START,END[,PARENT]",
            py_repr(arg)
        ));
    }
    let name = fields[0];
    if name.is_empty() {
        return Err(format!("skipping {}: missing span name", py_repr(arg)));
    }
    let skip = |why: &str| format!("skipping {}: {why}", py_repr(name));
    if fields[1].is_empty() || fields[2].is_empty() {
        return Err(skip("missing timestamp"));
    }
    let (start, end) = match (
        fields[1].parse::<EpochSeconds>(),
        fields[2].parse::<EpochSeconds>(),
    ) {
        (Ok(start), Ok(end)) => (start, end),
        (Err(LensError::InvalidArgument(_)), _) | (_, Err(LensError::InvalidArgument(_))) => {
            return Err(skip("unparseable timestamp"));
        }
        _ => return Err(skip("timestamp must be finite")),
    };
    let (Ok(start_ns), Ok(end_ns)) = (start.to_nanos("START"), end.to_nanos("END")) else {
        return Err(skip("timestamp out of range"));
    };
    let parent = fields
        .get(3)
        .filter(|p| !p.is_empty())
        .map(|p| (*p).to_owned());
    Ok(SpanSpec {
        name: name.to_owned(),
        start,
        end,
        start_ns,
        end_ns,
        parent,
    })
}

/// Python's `repr` of a string: in single quotes (double quotes when it holds a `'` and no
/// `"`), backslash escapes for the quote, `\\`, `\n`, `\r`, `\t`, and `\x..` / `\u....`
/// for other control and invisible characters.
fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let n = u32::from(c);
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for the characters a command line plausibly holds: not a control
/// character, not a separator other than the space, not an invisible format character.
fn printable(c: char) -> bool {
    !(c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{feff}'))
}

/// Checks every `--span` and orders them parents first, as Python's `_validate_span_args`:
/// the specs in emission order, or every problem found (stderr lines without `error: `).
pub(super) fn plan(args: &[String]) -> Result<Vec<SpanSpec>, Vec<String>> {
    let mut problems = Vec::new();
    let mut specs = Vec::new();
    for arg in args {
        match parse_one(arg) {
            Ok(s) => specs.push(s),
            Err(e) => problems.push(e),
        }
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in &specs {
        *counts.entry(&s.name).or_default() += 1;
    }
    let mut duplicated: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(name, _)| *name)
        .collect();
    duplicated.sort_unstable();
    for name in &duplicated {
        problems.push(format!(
            "invalid span {}: duplicate span name",
            py_repr(name)
        ));
    }
    let mut candidates = Vec::new();
    for s in &specs {
        if duplicated.contains(&s.name.as_str()) {
            continue;
        }
        match s.parent.as_deref() {
            Some(p) if duplicated.contains(&p) => problems.push(format!(
                "invalid span {}: parent {} is duplicated",
                py_repr(&s.name),
                py_repr(p)
            )),
            Some(p) if !counts.contains_key(p) => problems.push(format!(
                "invalid span {}: missing parent {}",
                py_repr(&s.name),
                py_repr(p)
            )),
            _ => candidates.push(s.name.clone()),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    order_parents_first(specs)
}

/// Where a span is in the walk of [`order_parents_first`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Depth {
    Unknown,
    /// On the chain being walked.
    Walking,
    /// Its distance from its root.
    Known(usize),
    /// In a parent cycle, or below one.
    Cyclic,
}

/// Python's emission order, in linear time: rounds where each takes, in input order, every
/// span whose parent an earlier round placed, i.e. spans by depth (a root is depth 0), input
/// order within a depth. Each span's depth is found once, walking up its parent chain only as
/// far as the first span already known, so a chain of n spans costs n steps, not n².
fn order_parents_first(specs: Vec<SpanSpec>) -> Result<Vec<SpanSpec>, Vec<String>> {
    let index: HashMap<&str, usize> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let parent_of: Vec<Option<usize>> = specs
        .iter()
        .map(|s| s.parent.as_deref().and_then(|p| index.get(p).copied()))
        .collect();
    drop(index);
    let mut depth = vec![Depth::Unknown; specs.len()];
    let mut chain = Vec::new();
    for start in 0..specs.len() {
        // Up the chain to a root, a span already known, or a span of this walk (a cycle).
        let mut at = Some(start);
        let mut base = None;
        while let Some(i) = at {
            match depth[i] {
                Depth::Unknown => {
                    depth[i] = Depth::Walking;
                    chain.push(i);
                    at = parent_of[i];
                }
                Depth::Walking => {
                    base = Some(Depth::Cyclic);
                    break;
                }
                known => {
                    base = Some(known);
                    break;
                }
            }
        }
        // Back down: each span one deeper than its parent, or cyclic with it.
        let mut below = base;
        while let Some(i) = chain.pop() {
            let d = match below {
                None => Depth::Known(0),
                Some(Depth::Known(d)) => Depth::Known(d + 1),
                Some(_) => Depth::Cyclic,
            };
            depth[i] = d;
            below = Some(d);
        }
    }
    if depth.contains(&Depth::Cyclic) {
        return Err(specs
            .iter()
            .zip(&depth)
            .filter(|(_, d)| **d == Depth::Cyclic)
            .map(|(s, _)| {
                format!(
                    "invalid span graph: parent cycle prevents emitting {}",
                    py_repr(&s.name)
                )
            })
            .collect());
    }
    // A counting sort by depth keeps the input order within a depth.
    let depths: Vec<usize> = depth
        .iter()
        .map(|d| match d {
            Depth::Known(d) => *d,
            _ => 0,
        })
        .collect();
    let mut starts = vec![0usize; depths.iter().max().map_or(0, |m| m + 1) + 1];
    for &d in &depths {
        starts[d + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    let mut slots: Vec<Option<SpanSpec>> = (0..specs.len()).map(|_| None).collect();
    for (s, d) in specs.into_iter().zip(depths) {
        slots[starts[d]] = Some(s);
        starts[d] += 1;
    }
    Ok(slots.into_iter().flatten().collect())
}

/// `max(end - start, 0)` seconds as Python's `f"{d:8.3f}"` of a `Decimal` (half-even).
pub(super) fn duration(start_ns: i128, end_ns: i128) -> String {
    let ns = (end_ns - start_ns).max(0);
    let (mut ms, rest) = (ns / 1_000_000, ns % 1_000_000);
    if rest > 500_000 || (rest == 500_000 && ms % 2 == 1) {
        ms += 1;
    }
    format!("{:>8}", format!("{}.{:03}", ms / 1000, ms % 1000))
}

/// Refuses a span whose start or end OTLP cannot carry (before 1970, after 2554-07-21), which
/// the exporter would otherwise clamp into another time: exit 2, nothing emitted.
pub(super) fn out_of_range(specs: &[SpanSpec]) -> anyhow::Result<()> {
    let bad: Vec<String> = specs
        .iter()
        .flat_map(|s| {
            [("START", &s.start, s.start_ns), ("END", &s.end, s.end_ns)]
                .into_iter()
                .filter(|(_, _, ns)| !(0..=LATEST_NS).contains(ns))
                .map(|(which, value, ns)| {
                    let why = if ns < 0 {
                        "before 1970-01-01T00:00:00Z"
                    } else {
                        "after 2554-07-21T23:34:33Z (epoch milliseconds or microseconds given as seconds?)"
                    };
                    format!("span {}: {which} {value} is {why}", py_repr(&s.name))
                })
        })
        .collect();
    match bad.as_slice() {
        [] => Ok(()),
        [first, ..] => Err(anyhow!(
            "{first}{}; OTLP carries times from 1970 to 2554: nothing emitted",
            match bad.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more time(s) out of range)"),
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(args: &[&str]) -> Result<Vec<String>, Vec<String>> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        plan(&args).map(|v| v.into_iter().map(|s| s.name).collect())
    }

    #[test]
    fn parents_come_first_in_rounds_of_input_order() {
        assert_eq!(
            names(&["child,1,2,root", "root,1,2", "grandchild,1,2,child"]).unwrap(),
            ["root", "child", "grandchild"]
        );
        assert_eq!(
            names(&["c,1,2,b", "b,1,2,a", "a,1,2", "d,1,2"]).unwrap(),
            ["a", "d", "b", "c"]
        );
    }

    #[test]
    fn a_long_chain_is_ordered_by_one_walk() {
        // Children first: each round of the quadratic order would place one span.
        let n = 100_000;
        let args: Vec<String> = (0..n)
            .rev()
            .map(|i| match i {
                0 => "s0,1,2".to_owned(),
                i => format!("s{i},1,2,s{}", i - 1),
            })
            .collect();
        let order = plan(&args).unwrap();
        assert_eq!(order.len(), n);
        assert!(
            order
                .iter()
                .enumerate()
                .all(|(i, s)| s.name == format!("s{i}"))
        );
    }

    #[test]
    fn times_otlp_cannot_carry_are_refused_naming_the_span() {
        let args = [
            "ok,0,18446744073.709551615",
            "ms,1795989600000,1795989601000",
            "old,-1,2",
        ]
        .map(String::from);
        let specs = plan(&args).unwrap();
        let err = out_of_range(&specs).unwrap_err().to_string();
        assert!(
            err.starts_with("span 'ms': START 1795989600000 is after 2554-07-21T23:34:33Z"),
            "{err}"
        );
        assert!(err.contains("(and 2 more time(s) out of range)"), "{err}");
        assert!(out_of_range(&specs[..1]).is_ok());
    }

    #[test]
    fn problems_are_python_s_messages() {
        let problems = names(&[
            "a,1",
            ",1,2",
            "m,,2",
            "bad,one,2",
            "nf,nan,2",
            "root,1,2",
            "root,1,2",
            "orphan,1,2,missing",
        ])
        .unwrap_err();
        assert_eq!(
            problems,
            [
                "skipping 'a,1': expected NAME,START,END[,PARENT]",
                "skipping ',1,2': missing span name",
                "skipping 'm': missing timestamp",
                "skipping 'bad': unparseable timestamp",
                "skipping 'nf': timestamp must be finite",
                "invalid span 'root': duplicate span name",
                "invalid span 'orphan': missing parent 'missing'",
            ]
        );
        assert_eq!(
            names(&["a,1,2,b", "b,1,2,a", "c,1,2,a", "ok,1,2"]).unwrap_err(),
            [
                "invalid span graph: parent cycle prevents emitting 'a'",
                "invalid span graph: parent cycle prevents emitting 'b'",
                "invalid span graph: parent cycle prevents emitting 'c'",
            ]
        );
        // An end before its start is accepted (`EmitSpan` clamps it).
        assert_eq!(names(&["backwards,2,1"]).unwrap(), ["backwards"]);
    }

    #[test]
    fn repr_and_durations_are_python_s() {
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a\u{1}\n'\""), "'a\\x01\\n\\'\"'");
        assert_eq!(duration(0, 500_000), "   0.000");
        assert_eq!(duration(0, 1_500_000), "   0.002");
        assert_eq!(duration(0, 2_500_000), "   0.002");
        assert_eq!(duration(0, 3_000_000_000), "   3.000");
        assert_eq!(duration(5, 1), "   0.000");
    }
}
