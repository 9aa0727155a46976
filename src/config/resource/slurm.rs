//! Slurm attributes as Python NeMo Lens derives them (`resources/slurm.py`): typed integers,
//! the array-normalised job id, the head node only outside a step, the job UUID; and the
//! launcher's values, inherited through `OTEL_RESOURCE_ATTRIBUTES`, winning over the derived
//! ones.

use std::collections::HashSet;

use opentelemetry::{KeyValue, Value};

use super::strict_integer;
use super::uuids::job_uuid;
use crate::semconv::*;

/// The integer-typed Slurm keys.
const INTEGER_KEYS: [&str; 4] = [
    SLURM_ARRAY_COUNT,
    SLURM_NNODES,
    SLURM_NTASKS,
    SLURM_RESTART_COUNT,
];

/// The keys taken from `OTEL_RESOURCE_ATTRIBUTES` over the derived ones (Python's
/// `SLURM_RESOURCE_TYPES`): every Slurm key Python derives, and the two UUIDs. The retired keys
/// (`slurm.cluster`, `slurm.nodelist`, `slurm.torchelastic.restart_count`) are not among them.
pub(crate) const INHERITED_KEYS: [&str; 23] = [
    SLURM_JOB_ID,
    SLURM_JOB_ID_RAW,
    SLURM_ARRAY_JOB_ID,
    SLURM_ARRAY_TASK_ID,
    SLURM_ARRAY_COUNT,
    SLURM_SLUID,
    SLURM_ARRAY_SLUID,
    SLURM_JOB_NAME,
    SLURM_CLUSTER_NAME,
    SLURM_PARTITION,
    SLURM_NNODES,
    SLURM_NTASKS,
    SLURM_RESTART_COUNT,
    SLURM_JOB_USER,
    SLURM_JOB_ACCOUNT,
    SLURM_JOB_QOS,
    SLURM_JOB_RESERVATION,
    SLURM_SEGMENT,
    SLURM_TOPOLOGY_ADDR,
    SLURM_TOPOLOGY_ADDR_PATTERN,
    SLURM_HEAD_NODE_NAME,
    NV_DL_JOB_UUID,
    NV_DL_RUN_UUID,
];

/// The Slurm attributes of this process as Python NeMo Lens derives them from the environment
/// (`derive_slurm_resource_attributes`), in Python's order. Empty unless `SLURM_JOB_ID` is
/// non-empty.
///
/// The attribute table is on [`crate::identity::job_attributes`].
pub(crate) fn slurm_attributes(lookup: impl Fn(&str) -> Option<String>) -> Vec<KeyValue> {
    let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
    let Some(job_id) = non_empty(lookup("SLURM_JOB_ID")) else {
        return Vec::new();
    };
    let first = |names: &[&str]| names.iter().find_map(|n| non_empty(lookup(n)));
    let array_job_id = non_empty(lookup("SLURM_ARRAY_JOB_ID"));
    let task_id = lookup("SLURM_ARRAY_TASK_ID");

    let mut attrs = Vec::with_capacity(22);
    let mut text = |key: &'static str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            attrs.push(KeyValue::new(key, v));
        }
    };
    let job = match (&task_id, &array_job_id) {
        (Some(task), Some(array)) => format!("{array}_{task}"),
        _ => job_id.clone(),
    };
    text(SLURM_JOB_ID, Some(job));
    text(SLURM_JOB_ID_RAW, Some(job_id.clone()));
    text(
        SLURM_ARRAY_JOB_ID,
        Some(array_job_id.unwrap_or_else(|| job_id.clone())),
    );
    text(
        SLURM_ARRAY_TASK_ID,
        Some(task_id.unwrap_or_else(|| "0".into())),
    );
    integer(
        &mut attrs,
        SLURM_ARRAY_COUNT,
        lookup("SLURM_ARRAY_TASK_COUNT"),
        Some(1),
    );
    let mut text = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            attrs.push(KeyValue::new(key, v));
        }
    };
    text(SLURM_SLUID, first(&["LENS_SLURM_SLUID", "NV_LAUNCH_SLUID"]));
    text(
        SLURM_ARRAY_SLUID,
        first(&["LENS_SLURM_ARRAY_SLUID", "NV_LAUNCH_ARRAY_SLUID"]),
    );
    text(SLURM_JOB_NAME, first(&["SLURM_JOB_NAME"]));
    text(SLURM_CLUSTER_NAME, first(&["SLURM_CLUSTER_NAME"]));
    text(
        SLURM_PARTITION,
        first(&["SLURM_JOB_PARTITION", "SLURM_PARTITION"]),
    );
    integer(
        &mut attrs,
        SLURM_NNODES,
        first(&["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]),
        None,
    );
    integer(&mut attrs, SLURM_NTASKS, lookup("SLURM_NTASKS"), None);
    integer(
        &mut attrs,
        SLURM_RESTART_COUNT,
        lookup("SLURM_RESTART_COUNT"),
        Some(0),
    );
    let mut text = |key: &'static str, var: &str| {
        if let Some(v) = non_empty(lookup(var)) {
            attrs.push(KeyValue::new(key, v));
        }
    };
    text(SLURM_JOB_USER, "SLURM_JOB_USER");
    text(SLURM_JOB_ACCOUNT, "SLURM_JOB_ACCOUNT");
    text(SLURM_JOB_QOS, "SLURM_JOB_QOS");
    text(SLURM_JOB_RESERVATION, "SLURM_JOB_RESERVATION");
    text(SLURM_SEGMENT, "SLURM_SEGMENT");
    text(SLURM_TOPOLOGY_ADDR, "SLURM_TOPOLOGY_ADDR");
    text(SLURM_TOPOLOGY_ADDR_PATTERN, "SLURM_TOPOLOGY_ADDR_PATTERN");
    let in_step = ["SLURM_STEP_ID", "SLURM_STEPID"]
        .iter()
        .any(|v| non_empty(lookup(v)).is_some());
    if !in_step {
        text(SLURM_HEAD_NODE_NAME, "SLURMD_NODENAME");
    }
    attrs.push(KeyValue::new(NV_DL_JOB_UUID, job_uuid(lookup)));
    attrs
}

/// Python's `_set_int`: unset or empty → `default` (if any); an integer → it; anything else →
/// nothing (not even the default).
fn integer(
    attrs: &mut Vec<KeyValue>,
    key: &'static str,
    value: Option<String>,
    default: Option<i64>,
) {
    let value = match value.filter(|v| !v.is_empty()) {
        None => default,
        Some(v) => strict_integer(&v),
    };
    if let Some(n) = value {
        attrs.push(KeyValue::new(key, n));
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

/// The allowlisted Slurm and UUID keys of the launcher's `OTEL_RESOURCE_ATTRIBUTES` (already
/// parsed), in its order: integers restored (an invalid one is left out), empty values left out.
pub(crate) fn inherited(carrier: &[KeyValue]) -> Vec<KeyValue> {
    carrier
        .iter()
        .filter(|kv| INHERITED_KEYS.contains(&kv.key.as_str()))
        .filter_map(|kv| {
            let Value::String(text) = &kv.value else {
                return Some(kv.clone());
            };
            let text = text.as_str();
            if text.is_empty() {
                return None;
            }
            if INTEGER_KEYS.contains(&kv.key.as_str()) {
                strict_integer(text).map(|n| KeyValue::new(kv.key.clone(), n))
            } else {
                Some(kv.clone())
            }
        })
        .collect()
}

/// Python's `detect_slurm`: the launcher's values first (they win), then the derived ones it
/// does not carry. Inherited keys alone (no `SLURM_JOB_ID`) are enough.
pub(crate) fn detect(
    lookup: &dyn Fn(&str) -> Option<String>,
    carrier: &[KeyValue],
) -> Vec<KeyValue> {
    let mut attrs = inherited(carrier);
    let present: HashSet<String> = attrs.iter().map(|kv| kv.key.to_string()).collect();
    attrs.extend(
        slurm_attributes(lookup)
            .into_iter()
            .filter(|kv| !present.contains(kv.key.as_str())),
    );
    attrs
}
