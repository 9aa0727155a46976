//! Span groups: coarse on/off switches per instrumentation family.
//!
//! Every instrumented site may name a *group* (`step`, `forward_backward`, …). Only groups in
//! the process's enabled set emit spans; the set comes from `NEMO_LENS_SPAN_GROUPS`, a
//! comma-separated, case-insensitive list of group names and *presets*:
//!
//! | preset | groups |
//! |---|---|
//! | `default` | `job`, `checkpoint`, `evaluate` |
//! | `goodput` | `job`, `checkpoint`, `evaluate`, `model_init`, `load_checkpoint`, `step` |
//! | `per_step` | `goodput`'s plus `forward_backward`, `optimizer` |
//! | `profiling`, `all` | every registered group |
//!
//! The built-in groups are the eight above (those of the Python library), `collective`
//! (communication between ranks: all-reduce, barriers, …), which the
//! [flight recorder](crate::flight_recorder) records by default, and `ops` (a framework's tensor
//! operations); those two are in no preset but `profiling` and `all`. An unknown name in
//! [`set_enabled_span_groups`] is an error that lists the
//! registered groups and presets; in `NEMO_LENS_SPAN_GROUPS` it is reported once and ignored (a
//! job shares one value across processes that register different groups).
//!
//! # Declaring a group on a span
//!
//! A span declares its group with a **field name** of the form `nemo.group.<group>` (the prefix
//! `nemo.group.`). Field names
//! are part of a callsite's static metadata, so the lens layer decides once per callsite
//! (`Interest::never` for a disabled group) and a span in a disabled group costs what a disabled
//! `tracing` callsite costs. The field needs no value and is never exported as an attribute.
//!
//! ```
//! #[tracing::instrument(fields(nemo.group.step))]
//! fn train_step(step: i64) { /* ... */ }
//!
//! let _span = tracing::info_span!("optimizer", nemo.group.optimizer = tracing::field::Empty);
//! # train_step(1);
//! ```
//!
//! Spans of other crates (a framework's) join a group through span-group rules on their target
//! (`NEMO_LENS_SPAN_GROUP_RULES`, [`GroupsConfig::rules`](crate::GroupsConfig::rules)). Spans in no group are recorded from the span level
//! `NEMO_LENS_SPAN_LEVEL` on (default `info`), so a dependency's `TRACE` and `DEBUG` spans stay
//! out unless asked for.
//!
//! # Groups of other libraries
//!
//! A library registers its own groups and presets at start-up; presets of the same name union
//! across libraries, as in the Python `SpanRegistry`:
//!
//! ```
//! use nemo_lens::groups;
//! groups::register_span_groups(&["microbatch", "communication"], &[("per_step", &["microbatch"])]).unwrap();
//! let telemetry = nemo_lens::Telemetry::builder(nemo_lens::LensConfig::default()).build().unwrap();
//! groups::set_enabled_span_groups("per_step").unwrap(); // now holds "microbatch" too
//! ```
//!
//! Megatron-LM's and NVRx's vocabularies are constants of [`GroupsConfig`](crate::GroupsConfig),
//! so a Rust rank in a Megatron job takes the same `NEMO_LENS_SPAN_GROUPS` as its Python
//! ranks (register before setup):
//!
//! ```
//! use nemo_lens::{groups, GroupsConfig};
//! groups::register_span_groups(&GroupsConfig::MEGATRON_SPAN_GROUPS, &GroupsConfig::MEGATRON_SPAN_PRESETS).unwrap();
//! groups::register_span_groups(&GroupsConfig::NVRX_SPAN_GROUPS, &GroupsConfig::NVRX_SPAN_PRESETS).unwrap();
//! ```
//!
//! # Categories: `lens.group`, `lens.span_category`, `purpose`
//!
//! Every exported span of a group carries `lens.group` (its group), as NeMo Lens tags the spans
//! of its `managed_span`. A group has a *category* when it is built in or its library registered
//! a `goodput` preset in the same call (Python's span-group class of the job, whose
//! `categories()` setup registers): `goodput` for the groups of the `goodput` preset, else
//! `profiling`. A span of a group with a category also carries `lens.span_category` (that
//! category) and `purpose`, the list attribute the collector configurations of NeMo Lens route
//! on (`["goodput"]`, `["profiling"]`), unless the span sets `purpose` itself. The attributes are
//! added by the export worker, off the training thread.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use tracing_core::Metadata;

use crate::error::{LensError, Result};
use crate::rank::rules::CallsiteRules;

/// Field-name prefix that declares a span's group: `nemo.group.step`.
pub(crate) const GROUP_FIELD_PREFIX: &str = "nemo.group.";

/// `job`: the whole training job.
pub(crate) const JOB: &str = "job";
/// `checkpoint`: saving a checkpoint.
pub(crate) const CHECKPOINT: &str = "checkpoint";
/// `evaluate`: evaluation passes.
pub(crate) const EVALUATE: &str = "evaluate";
/// `model_init`: building the model.
pub(crate) const MODEL_INIT: &str = "model_init";
/// `load_checkpoint`: restoring a checkpoint.
pub(crate) const LOAD_CHECKPOINT: &str = "load_checkpoint";
/// `step`: one training iteration.
pub(crate) const STEP: &str = "step";
/// `forward_backward`: forward and backward passes.
pub(crate) const FORWARD_BACKWARD: &str = "forward_backward";
/// `optimizer`: the optimizer step.
pub(crate) const OPTIMIZER: &str = "optimizer";

/// `collective`: communication between ranks (all-reduce, barriers, ...), put around it by
/// libraries; not in any preset but `profiling` and `all` (the Python presets are unchanged),
/// recorded by the [flight recorder](crate::flight_recorder) by default.
pub(crate) const COLLECTIVE: &str = "collective";

/// `ops`: a framework's tensor operations (matmul, kernels, ...), which a span-group rule puts
/// in a group by target; in no preset but `profiling` and `all`: there are many per step.
pub(crate) const OPS: &str = "ops";

/// The eight built-in groups of the Python library (the registry also holds `COLLECTIVE` and
/// `OPS`).
pub(crate) const BUILTIN_GROUPS: [&str; 8] = [
    JOB,
    CHECKPOINT,
    EVALUATE,
    MODEL_INIT,
    LOAD_CHECKPOINT,
    STEP,
    FORWARD_BACKWARD,
    OPTIMIZER,
];

/// The preset that expands to every registered group.
pub(crate) const ALL_PRESET: &str = "all";

/// Another name of [`ALL_PRESET`]: every library's `profiling` preset is all its groups.
pub(crate) const PROFILING_PRESET: &str = "profiling";

/// The preset whose groups are of category `goodput` (the others of their library are
/// `profiling`).
pub(crate) const GOODPUT_PRESET: &str = "goodput";

/// The presets that expand to every registered group.
fn is_all(preset: &str) -> bool {
    preset == ALL_PRESET || preset == PROFILING_PRESET
}

#[derive(Debug)]
struct Registry {
    groups: BTreeSet<String>,
    presets: BTreeMap<String, BTreeSet<String>>,
    /// The groups that have a category (see the module's documentation).
    categorized: BTreeSet<String>,
}

fn registry() -> &'static RwLock<Registry> {
    static REGISTRY: OnceLock<RwLock<Registry>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect();
        let groups: BTreeSet<String> = BUILTIN_GROUPS
            .iter()
            .chain(&[COLLECTIVE, OPS])
            .map(|s| s.to_string())
            .collect();
        RwLock::new(Registry {
            categorized: groups.clone(),
            groups,
            presets: BTreeMap::from([
                ("default".to_string(), set(&[JOB, CHECKPOINT, EVALUATE])),
                (
                    GOODPUT_PRESET.to_string(),
                    set(&[JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP]),
                ),
                ("per_step".to_string(), set(&BUILTIN_GROUPS)),
            ]),
        })
    })
}

fn normalize(name: &str) -> Result<String> {
    let n = name.trim().to_ascii_lowercase();
    if n.is_empty() || n.contains(',') {
        return Err(LensError::Registry(format!(
            "span group and preset names must be non-empty and contain no ',': got '{name}'"
        )));
    }
    Ok(n)
}

/// Registers groups and presets of a library. Names are trimmed and lower-cased; a preset that
/// already exists gains the new members (presets union across libraries); preset members must be
/// registered groups; `all` is reserved, and `profiling` is every group whatever its members
/// (as every library defines it). A call with a `goodput` preset gives its groups a category
/// (see the [module documentation](self)).
///
/// ```
/// use nemo_lens::groups::register_span_groups;
/// assert!(register_span_groups(&["all"], &[]).is_err());
/// assert!(register_span_groups(&[], &[("mine", &["no_such_group"])]).is_err());
/// register_span_groups(&["data_loading"], &[("default", &["data_loading"])]).unwrap();
/// ```
pub fn register_span_groups(groups: &[&str], presets: &[(&str, &[&str])]) -> Result<()> {
    let groups: Vec<String> = groups.iter().map(|g| normalize(g)).collect::<Result<_>>()?;
    let mut reg = registry().write();
    if groups.iter().any(|g| is_all(g)) {
        return Err(LensError::Registry(
            "'all' and 'profiling' are reserved preset names and cannot be groups".into(),
        ));
    }
    let mut new_presets = Vec::new();
    let mut categorized = false;
    for (preset, members) in presets {
        let preset = normalize(preset)?;
        if preset == ALL_PRESET {
            return Err(LensError::Registry(
                "'all' is a built-in preset and cannot be redefined".into(),
            ));
        }
        categorized |= preset == GOODPUT_PRESET;
        let mut set = BTreeSet::new();
        for m in *members {
            let m = normalize(m)?;
            if !reg.groups.contains(&m) && !groups.contains(&m) {
                return Err(LensError::Registry(format!(
                    "preset '{preset}' names group '{m}', which is not registered; register the group first"
                )));
            }
            set.insert(m);
        }
        if preset != PROFILING_PRESET {
            new_presets.push((preset, set));
        }
    }
    if categorized {
        reg.categorized.extend(groups.iter().cloned());
    }
    reg.groups.extend(groups);
    for (preset, set) in new_presets {
        reg.presets.entry(preset).or_default().extend(set);
    }
    Ok(())
}

/// Every registered group with its category, if it has one: `goodput` or `profiling`.
pub(crate) fn categories() -> Vec<(String, Option<&'static str>)> {
    let reg = registry().read();
    let goodput = reg.presets.get(GOODPUT_PRESET);
    reg.groups
        .iter()
        .map(|g| {
            let category = reg.categorized.contains(g).then(|| {
                if goodput.is_some_and(|p| p.contains(g)) {
                    GOODPUT_PRESET
                } else {
                    PROFILING_PRESET
                }
            });
            (g.clone(), category)
        })
        .collect()
}

/// Every registered group, sorted.
pub(crate) fn registered_groups() -> Vec<String> {
    registry().read().groups.iter().cloned().collect()
}

/// Every preset name (including `all`), sorted.
pub(crate) fn registered_presets() -> Vec<String> {
    let reg = registry().read();
    let mut names: Vec<String> = reg.presets.keys().cloned().collect();
    names.push(ALL_PRESET.to_string());
    names.push(PROFILING_PRESET.to_string());
    names.sort();
    names
}

/// Resolves a spec (`"default,step"`) to a set of groups. An unknown entry is an error naming
/// `var` and listing the valid options.
pub(crate) fn resolve(spec: &str, var: &str) -> Result<BTreeSet<String>> {
    let reg = registry().read();
    let mut out = BTreeSet::new();
    for part in spec.split(',') {
        let part = part.trim().to_ascii_lowercase();
        if part.is_empty() {
            continue;
        }
        if is_all(&part) {
            out.extend(reg.groups.iter().cloned());
        } else if let Some(members) = reg.presets.get(&part) {
            out.extend(members.iter().cloned());
        } else if reg.groups.contains(&part) {
            out.insert(part);
        } else {
            let mut valid: Vec<String> = reg.groups.iter().cloned().collect();
            valid.extend(reg.presets.keys().cloned());
            valid.push(ALL_PRESET.to_string());
            valid.push(PROFILING_PRESET.to_string());
            valid.sort();
            valid.dedup();
            return Err(LensError::UnknownSpanGroup {
                var: var.to_string(),
                name: crate::config::env::shown(&part),
                valid,
            });
        }
    }
    Ok(out)
}

/// Resolves a spec as `resolve` does, but keeps going past names no library registered in
/// this process: returns the groups of the known entries and the unknown entries (lower-cased,
/// in spec order, deduplicated).
///
/// A job sets one `NEMO_LENS_SPAN_GROUPS` for every process, and some of its groups are
/// registered only by some processes (Python's Megatron groups, another library's), so setup
/// resolves the variable this way: the unknown names are reported once and ignored.
pub(crate) fn resolve_known(spec: &str) -> (BTreeSet<String>, Vec<String>) {
    let mut unknown: Vec<String> = Vec::new();
    let mut known = Vec::new();
    for part in spec.split(',') {
        let name = part.trim().to_ascii_lowercase();
        if name.is_empty() {
            continue;
        }
        if resolve(&name, "").is_ok() {
            known.push(name);
        } else if !unknown.contains(&name) {
            unknown.push(name);
        }
    }
    let set = resolve(&known.join(","), "").unwrap_or_default();
    (set, unknown)
}

/// The warning for `unknown` entries of the spec in `var`: one line naming them and the known
/// groups and presets.
pub(crate) fn unknown_warning(var: &str, unknown: &[String]) -> String {
    let mut valid = registered_groups();
    valid.extend(registered_presets());
    valid.sort();
    valid.dedup();
    // A hostile spec (thousands of names) still gives one readable line.
    const SHOWN_NAMES: usize = 8;
    let quoted = |names: &[String]| {
        let mut text = names
            .iter()
            .take(SHOWN_NAMES)
            .map(|n| format!("'{}'", crate::config::env::shown(n)))
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > SHOWN_NAMES {
            text.push_str(&format!(" and {} more", names.len() - SHOWN_NAMES));
        }
        text
    };
    format!(
        "nemo-lens: warning: {var} names span groups or presets that no library registered in this process: {} (ignored). Known: {}",
        quoted(unknown),
        valid.join(", ")
    )
}

/// The enabled groups of one telemetry instance, with its span-group rules and span level; the
/// lens filter consults it once per callsite.
#[derive(Debug, Default)]
pub(crate) struct GroupGate {
    enabled: RwLock<Arc<HashSet<String>>>,
    rules: CallsiteRules,
}

impl GroupGate {
    pub(crate) fn new(groups: impl IntoIterator<Item = String>) -> Self {
        GroupGate {
            enabled: RwLock::new(Arc::new(groups.into_iter().collect())),
            rules: CallsiteRules::default(),
        }
    }

    /// The gate with these rules and span level (by default: no rules, every ungrouped span).
    pub(crate) fn with_rules(mut self, rules: CallsiteRules) -> Self {
        self.rules = rules;
        self
    }

    /// The group of a callsite: the one it declares, else the one a rule gives it.
    #[inline]
    pub(crate) fn group_of<'a>(&'a self, meta: &Metadata<'_>) -> Option<&'a str> {
        declared_group(meta).or_else(|| self.rules.group_of(meta))
    }

    /// Whether a callsite is recorded: by its group when it has one, else by the span level.
    pub(crate) fn allows(&self, meta: &Metadata<'_>) -> bool {
        match self.group_of(meta) {
            Some(group) => self.is_enabled(group),
            None => self.rules.ungrouped_allowed(meta),
        }
    }

    pub(crate) fn rules(&self) -> &CallsiteRules {
        &self.rules
    }

    pub(crate) fn is_enabled(&self, group: &str) -> bool {
        self.enabled.read().contains(group)
    }

    pub(crate) fn set(&self, groups: impl IntoIterator<Item = String>) {
        *self.enabled.write() = Arc::new(groups.into_iter().collect());
        // Callsites cached their interest under the old set: ask them again.
        tracing_core::callsite::rebuild_interest_cache();
    }

    pub(crate) fn snapshot(&self) -> BTreeSet<String> {
        self.enabled.read().iter().cloned().collect()
    }
}

fn current_gate() -> &'static RwLock<Option<Arc<GroupGate>>> {
    static CURRENT: RwLock<Option<Arc<GroupGate>>> = RwLock::new(None);
    &CURRENT
}

/// The groups of the NVTX ranges of the telemetry set up last, which follow its span groups.
fn current_nvtx_gate() -> &'static RwLock<Option<Arc<GroupGate>>> {
    static CURRENT: RwLock<Option<Arc<GroupGate>>> = RwLock::new(None);
    &CURRENT
}

pub(crate) fn install_process_gate(gate: Arc<GroupGate>, nvtx: Option<Arc<GroupGate>>) {
    *current_gate().write() = Some(gate);
    *current_nvtx_gate().write() = nvtx;
}

/// Whether `group` is enabled in this process (the telemetry set up last). `false` before setup,
/// when disabled, and on non-exporting ranks, as in the Python library. Use it to skip building
/// expensive attributes:
///
/// ```
/// if nemo_lens::groups::is_span_group_enabled("step") {
///     // compute the attribute values only when they will be exported
/// }
/// ```
pub fn is_span_group_enabled(group: &str) -> bool {
    current_gate()
        .read()
        .as_ref()
        .is_some_and(|g| g.is_enabled(group))
}

/// Replaces this process's enabled groups (the telemetry set up last), for export and for its
/// [NVTX ranges](crate::Telemetry::nvtx_layer), and re-evaluates every callsite. Returns an
/// error for an unknown name and changes nothing then; on a non-exporting rank nothing is
/// exported whatever the groups.
///
/// ```
/// // Before any setup there is no telemetry to change: a no-op that still validates.
/// assert!(nemo_lens::groups::set_enabled_span_groups("per_step").is_ok());
/// assert!(nemo_lens::groups::set_enabled_span_groups("bogus").is_err());
/// ```
pub fn set_enabled_span_groups(spec: &str) -> Result<()> {
    let set = resolve(spec, "set_enabled_span_groups")?;
    if let Some(nvtx) = current_nvtx_gate().read().as_ref() {
        nvtx.set(set.clone());
    }
    if let Some(g) = current_gate().read().as_ref() {
        g.set(set);
    }
    Ok(())
}

/// The group a callsite declares through a `nemo.group.<group>` field, if any.
pub(crate) fn declared_group(meta: &Metadata<'_>) -> Option<&'static str> {
    meta.fields()
        .iter()
        .find_map(|f| f.name().strip_prefix(GROUP_FIELD_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_as_in_python() {
        let d = resolve("default", "X").unwrap();
        assert_eq!(
            d.iter().map(String::as_str).collect::<Vec<_>>(),
            ["checkpoint", "evaluate", "job"]
        );
        let p = resolve("PER_STEP", "X").unwrap();
        for g in BUILTIN_GROUPS {
            assert!(p.contains(g), "{g}");
        }
        assert!(resolve("all", "X").unwrap().is_superset(&p));
        assert!(resolve(" , ", "X").unwrap().is_empty());
        let err = resolve("step,nonsense", "NEMO_LENS_SPAN_GROUPS").unwrap_err();
        assert!(matches!(err, LensError::UnknownSpanGroup { ref name, .. } if name == "nonsense"));
        let msg = err.to_string();
        assert!(
            msg.contains("NEMO_LENS_SPAN_GROUPS")
                && msg.contains("forward_backward")
                && msg.contains("per_step")
        );
    }

    #[test]
    fn resolve_known_keeps_going_past_unknown_names() {
        let (set, unknown) = resolve_known("default, Megatron_PP ,step,megatron_pp");
        assert!(set.contains("job") && set.contains("step"));
        assert_eq!(unknown, vec!["megatron_pp".to_string()]);
    }

    #[test]
    fn goodput_and_profiling_presets_as_in_lens() {
        let goodput = resolve("goodput", "X").unwrap();
        assert_eq!(
            goodput.iter().map(String::as_str).collect::<Vec<_>>(),
            [
                "checkpoint",
                "evaluate",
                "job",
                "load_checkpoint",
                "model_init",
                "step"
            ]
        );
        assert_eq!(
            resolve("Profiling", "X").unwrap(),
            resolve("all", "X").unwrap()
        );
        assert!(register_span_groups(&["profiling"], &[]).is_err());
        let category = |g: &str| categories().into_iter().find(|(n, _)| n == g).unwrap().1;
        assert_eq!(category("step"), Some("goodput"));
        assert_eq!(category("optimizer"), Some("profiling"));
        assert_eq!(category("collective"), Some("profiling"));
    }

    #[test]
    fn registered_presets_include_all() {
        let presets = registered_presets();
        assert!(presets.contains(&"per_step".to_string()));
        assert!(presets.contains(&ALL_PRESET.to_string()));
        assert!(registered_groups().contains(&COLLECTIVE.to_string()));
    }
}
