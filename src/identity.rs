//! The job's identity as Python NeMo Lens derives it, for a launcher written in Rust: the Slurm
//! attributes, `nv.dl.job.uuid` and `nv.dl.run.uuid`.
//!
//! A rank set up with [`crate::Telemetry::builder`] carries all of them on its resource without
//! calling anything here. A launcher that starts ranks (or a tool that prepares their
//! environment) derives them here and hands them down in `OTEL_RESOURCE_ATTRIBUTES` with
//! [`crate::carrier`]; the ranks then keep the launcher's values.
//!
//! | function | Python |
//! |---|---|
//! | [`job_attributes`] | `derive_slurm_resource_attributes()` plus `derive_nv_dl_run_uuid()` |

use opentelemetry::KeyValue;

use crate::config::resource::{slurm, uuids};

/// The job's identity as Python NeMo Lens derives it from the environment `lookup` reads, for
/// a launcher to hand down with [`carrier::extend`](crate::carrier::extend) or
/// [`carrier::publish`](crate::carrier::publish):
///
/// * under Slurm (`SLURM_JOB_ID` non-empty), the typed Slurm attributes and `nv.dl.job.uuid`,
///   as Python's `derive_slurm_resource_attributes`, in Python's order (the table below);
/// * `nv.dl.run.uuid`, as Python's `derive_nv_dl_run_uuid`: under Slurm from the job and its
///   restart counts (`SLURM_RESTART_COUNT`, `TORCHELASTIC_RESTART_COUNT`), outside Slurm from
///   `run_id`, else `TORCHELASTIC_RUN_ID` (absent when neither is set). It changes with every
///   restart; every rank of a run must pass the same `run_id`.
///
/// A rank set up with [`Telemetry::builder`](crate::Telemetry::builder) carries all of these
/// without calling this.
///
/// | attribute | value |
/// |---|---|
/// | `slurm.job.id` | `{SLURM_ARRAY_JOB_ID}_{SLURM_ARRAY_TASK_ID}` for an array task (task id set, array job id non-empty), else `SLURM_JOB_ID` |
/// | `slurm.job.id.raw` | `SLURM_JOB_ID` |
/// | `slurm.array.job_id` | `SLURM_ARRAY_JOB_ID`, else `SLURM_JOB_ID` |
/// | `slurm.array.task_id` | `SLURM_ARRAY_TASK_ID`, else `"0"` |
/// | `slurm.array.count` | integer `SLURM_ARRAY_TASK_COUNT`; 1 when unset or empty |
/// | `slurm.sluid`, `slurm.array.sluid` | `LENS_SLURM_SLUID` else `NV_LAUNCH_SLUID`; `LENS_SLURM_ARRAY_SLUID` else `NV_LAUNCH_ARRAY_SLUID` |
/// | `slurm.job.name`, `slurm.cluster.name` | `SLURM_JOB_NAME`, `SLURM_CLUSTER_NAME` |
/// | `slurm.partition` | `SLURM_JOB_PARTITION`, else `SLURM_PARTITION` |
/// | `slurm.nnodes` | integer `SLURM_JOB_NUM_NODES`, else `SLURM_NNODES` |
/// | `slurm.ntasks` | integer `SLURM_NTASKS` |
/// | `slurm.restart_count` | integer `SLURM_RESTART_COUNT`; 0 when unset or empty |
/// | `slurm.job.user`, `.job.account`, `.job.qos`, `.job.reservation`, `slurm.segment` | `SLURM_JOB_USER`, `SLURM_JOB_ACCOUNT`, `SLURM_JOB_QOS`, `SLURM_JOB_RESERVATION`, `SLURM_SEGMENT` |
/// | `slurm.topology.addr`, `slurm.topology.addr_pattern` | `SLURM_TOPOLOGY_ADDR`, `SLURM_TOPOLOGY_ADDR_PATTERN` |
/// | `slurm.head_node.name` | `SLURMD_NODENAME`, only outside a step (`SLURM_STEP_ID` and `SLURM_STEPID` empty or unset) |
/// | `nv.dl.job.uuid` | UUID (version 5, URL namespace) of `nemo.lens.job/{cluster}/{job}`: `SLURM_CLUSTER_NAME` (else `nocluster`), and `SLURM_ARRAY_JOB_ID` for an array task, else `SLURM_JOB_ID`; shared by every task of an array and every restart |
///
/// An empty variable counts as unset ("else" takes the next one). An integer is
/// `[+-]?[0-9]+` once surrounding blanks are stripped, and must fit an `i64`: any other value
/// leaves the attribute out (its default is not used either).
///
///
/// ```
/// use nemo_lens::identity;
/// use opentelemetry::Value;
///
/// let env = [("SLURM_JOB_ID", "12350"), ("SLURM_ARRAY_JOB_ID", "12345"),
///            ("SLURM_ARRAY_TASK_ID", "7"), ("SLURM_NNODES", "4"), ("SLURM_CLUSTER_NAME", "cluster-a")];
/// let attrs = identity::job_attributes(
///     |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()),
///     None,
/// );
/// let get = |k: &str| attrs.iter().find(|kv| kv.key.as_str() == k).map(|kv| kv.value.clone());
/// assert_eq!(get("slurm.job.id"), Some(Value::from("12345_7")));
/// assert_eq!(get("slurm.nnodes"), Some(Value::I64(4)));
/// // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.job/cluster-a/12345") in Python.
/// assert_eq!(get("nv.dl.job.uuid"), Some(Value::from("be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7")));
/// assert!(get("nv.dl.run.uuid").is_some());
///
/// // Outside Slurm: only the run, from the run id every rank shares.
/// let local = identity::job_attributes(|_| None, Some("local-1"));
/// // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.run/local/local-1/te0") in Python.
/// assert_eq!(local.len(), 1);
/// assert_eq!(local[0].value, Value::from("b7bfb81b-f66c-50d8-a79e-8a703cdad745"));
/// assert!(identity::job_attributes(|_| None, None).is_empty());
/// ```
pub fn job_attributes(
    lookup: impl Fn(&str) -> Option<String>,
    run_id: Option<&str>,
) -> Vec<KeyValue> {
    let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
    let mut attributes = slurm::slurm_attributes(lookup);
    if let Some(run) = uuids::run_uuid(lookup, run_id) {
        attributes.push(KeyValue::new(crate::semconv::NV_DL_RUN_UUID, run));
    }
    attributes
}
