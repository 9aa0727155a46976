//! Who this process is in the job: its rank and world size (given by the application, else by
//! the launcher as `nv.dl.rank` / `nv.dl.world_size` in `OTEL_RESOURCE_ATTRIBUTES`), the
//! attributes that say so (`nv.dl.*`, and the 0.1.0 `dl.*`), the rank-derived
//! `service.instance.id`, and the launcher's integer attributes restored to integers.

use opentelemetry::{KeyValue, Value};

use super::strict_integer;
use crate::carrier::{self, OTEL_RESOURCE_ATTRIBUTES};
use crate::semconv::*;

/// The rank, world size and run id a resource is built for, once setup resolved them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Participant {
    /// The rank, when known (`None`: no rank attribute and no rank-derived instance id).
    pub(crate) rank: Option<u32>,
    /// The world size, when known.
    pub(crate) world_size: Option<u32>,
    /// Also write the 0.1.0 names `dl.rank` / `dl.world_size`.
    pub(crate) legacy_rank_keys: bool,
    /// The run id was configured (`NEMO_LENS_RUN_ID`, `LensConfig::run_id`) rather than taken
    /// from `SLURM_JOB_ID` or drawn at random; outside Slurm it names the run in
    /// `nv.dl.run.uuid` before `TORCHELASTIC_RUN_ID` does.
    pub(crate) run_id_configured: bool,
}

/// A rank or world size as the launcher's `OTEL_RESOURCE_ATTRIBUTES` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Carried {
    /// The key is not there.
    Absent,
    /// A base-10 integer that fits a `u32`.
    Valid(u32),
    /// Anything else (the value as written).
    Invalid(String),
}

/// What the launcher says `key` (`nv.dl.rank`, `nv.dl.world_size`) is.
pub(crate) fn carried(lookup: &dyn Fn(&str) -> Option<String>, key: &str) -> Carried {
    let Some(text) = lookup(OTEL_RESOURCE_ATTRIBUTES) else {
        return Carried::Absent;
    };
    let attrs = carrier::parse(&text);
    let Some(kv) = attrs.iter().rev().find(|kv| kv.key.as_str() == key) else {
        return Carried::Absent;
    };
    let value = kv.value.as_str();
    match strict_integer(&value).and_then(|n| u32::try_from(n).ok()) {
        Some(n) => Carried::Valid(n),
        None => Carried::Invalid(value.into_owned()),
    }
}

/// A rank or world size once resolved, and where it came from.
pub(crate) struct Resolved {
    /// The value, when known.
    pub(crate) value: Option<u32>,
    /// It came from the launcher's `OTEL_RESOURCE_ATTRIBUTES`.
    pub(crate) from_launcher: bool,
    /// It came from the application's default (`resource_attribute_defaults`).
    pub(crate) from_default: bool,
    /// Its key there (`nv.dl.rank`, `nv.dl.world_size`).
    pub(crate) key: &'static str,
}

/// What the application says about a rank or world size: its value, whether it said it does
/// not know, and its default (used only when the launcher gives none).
pub(crate) type Asked = (Option<u32>, bool, Option<u32>);

/// The rank and the world size: the application's value; else the launcher's `nv.dl.rank` /
/// `nv.dl.world_size` in `OTEL_RESOURCE_ATTRIBUTES` (a value that is not a non-negative
/// integer makes it unknown); else the application's default; else unknown when the
/// application said so or, for the world size, when the rank came from the launcher or a
/// default; else rank 0 of 1.
pub(crate) fn resolve(
    rank: Asked,
    world_size: Asked,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> (Resolved, Resolved) {
    let one = |(explicit, unknown, fallback): Asked, key: &'static str, default| {
        if let Some(value) = explicit.filter(|_| !unknown) {
            return Resolved {
                value: Some(value),
                from_launcher: false,
                from_default: false,
                key,
            };
        }
        let (value, from_launcher, from_default) = match carried(lookup, key) {
            Carried::Valid(n) => (Some(n), true, false),
            Carried::Invalid(_) => (None, false, false),
            Carried::Absent if fallback.is_some() => (fallback, false, true),
            Carried::Absent => (if unknown { None } else { default }, false, false),
        };
        Resolved {
            value,
            from_launcher,
            from_default,
            key,
        }
    };
    let rank = one(rank, NV_DL_RANK, Some(0));
    // A rank the launcher or a default gave, without a world size: the world size is not the
    // default 1.
    let world_default = (!rank.from_launcher && !rank.from_default).then_some(1);
    let world_size = one(world_size, NV_DL_WORLD_SIZE, world_default);
    (rank, world_size)
}

/// The integer-typed identity keys (Python's `normalize_resource_attributes`): a launcher's
/// value that is a base-10 integer becomes an integer; any other stays the string it was,
/// with a warning.
const INTEGER_KEYS: [&str; 14] = [
    NV_DL_RANK,
    NV_DL_WORLD_SIZE,
    NV_DL_LOCAL_RANK,
    NV_DL_TOPOLOGY_SIZE_TP,
    NV_DL_TOPOLOGY_SIZE_PP,
    NV_DL_TOPOLOGY_SIZE_DP,
    NV_DL_TRAINING_CONFIG_GLOBAL_BATCH_SIZE,
    NV_DL_TRAINING_CONFIG_MICRO_BATCH_SIZE,
    NV_DL_TRAINING_CONFIG_SEQUENCE_LENGTH,
    NV_DL_TRAINING_TARGET_TRAIN_ITERS,
    NV_DL_TRAINING_TARGET_TRAIN_SAMPLES,
    NV_DL_TRAINING_TARGET_TRAIN_TOKENS,
    NV_GPU_INDEX,
    NV_GPU_MEMORY_TOTAL,
];

/// Restores the integer identity keys of the launcher's attributes (see [`INTEGER_KEYS`]);
/// warns about each one that is not an integer (the string is kept, as Python keeps it).
pub(crate) fn restore_integers(carrier: &mut [KeyValue]) {
    for kv in carrier.iter_mut() {
        if !INTEGER_KEYS.contains(&kv.key.as_str()) {
            continue;
        }
        let Value::String(text) = &kv.value else {
            continue;
        };
        match strict_integer(text.as_str()) {
            Some(n) => kv.value = Value::I64(n),
            None => carrier::warn(&format!(
                "Resource attribute {} requires a base-10 integer; preserving invalid value {:?} \
                 (from {OTEL_RESOURCE_ATTRIBUTES}).",
                kv.key,
                crate::config::env::shown(text.as_str())
            )),
        }
    }
}

/// The rank attributes: `nv.dl.rank` / `nv.dl.world_size` when known, and with
/// `legacy_rank_keys` the 0.1.0 `dl.rank` / `dl.world_size` beside them (integers).
pub(crate) fn rank_attributes(who: &Participant) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(4);
    for (value, key, legacy) in [
        (who.rank, NV_DL_RANK, DL_RANK),
        (who.world_size, NV_DL_WORLD_SIZE, DL_WORLD_SIZE),
    ] {
        if let Some(v) = value {
            if who.legacy_rank_keys {
                attrs.push(KeyValue::new(legacy, i64::from(v)));
            }
            attrs.push(KeyValue::new(key, i64::from(v)));
        }
    }
    attrs
}

/// `service.instance.id = "{run_id}-rank{rank}"`, only when the rank and the run id are known
/// and neither the application (`explicit_in_caller`) nor the launcher gave one.
pub(crate) fn instance_id(
    who: &Participant,
    run_id: &str,
    carrier: &[KeyValue],
    explicit_in_caller: bool,
) -> Option<KeyValue> {
    let rank = who.rank?;
    let explicit = explicit_in_caller
        || carrier
            .iter()
            .any(|kv| kv.key.as_str() == SERVICE_INSTANCE_ID);
    (!run_id.is_empty() && !explicit)
        .then(|| KeyValue::new(SERVICE_INSTANCE_ID, format!("{run_id}-rank{rank}")))
}
