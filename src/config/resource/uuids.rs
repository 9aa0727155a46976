//! `nv.dl.job.uuid` and `nv.dl.run.uuid`: name-based UUIDs (version 5, URL namespace) of the job
//! and of one run of it, as Python NeMo Lens's `derive_nv_dl_job_uuid` / `derive_nv_dl_run_uuid`
//! compute them, so that every rank of a job, Rust or Python, carries the same two values.

use uuid::Uuid;

/// `SLURM_CLUSTER_NAME`, or `nocluster` when it is unset or empty.
fn cluster(lookup: &dyn Fn(&str) -> Option<String>) -> String {
    non_empty(lookup("SLURM_CLUSTER_NAME")).unwrap_or_else(|| "nocluster".into())
}

/// The job as submitted: the array's job id for an array task (`SLURM_ARRAY_TASK_ID` set, even
/// empty), else `SLURM_JOB_ID`; `nojob` when that is unset or empty.
fn job_key(lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let var = if lookup("SLURM_ARRAY_TASK_ID").is_some() {
        "SLURM_ARRAY_JOB_ID"
    } else {
        "SLURM_JOB_ID"
    };
    non_empty(lookup(var)).unwrap_or_else(|| "nojob".into())
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

fn uuid5(name: &str) -> String {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, name.as_bytes()).to_string()
}

/// The `nv.dl.job.uuid` of the Slurm job described by `lookup` (environment variables): the
/// UUID (version 5, URL namespace) of `nemo.lens.job/{cluster}/{job}`, where `cluster` is
/// `SLURM_CLUSTER_NAME` (else `nocluster`) and `job` is `SLURM_ARRAY_JOB_ID` for an array task
/// (`SLURM_ARRAY_TASK_ID` set), else `SLURM_JOB_ID` (else `nojob`). Every task of an array and
/// every restart of a job share it. Values are used as written (never parsed), as Python's
/// `derive_nv_dl_job_uuid` does.
///
/// A rank under Slurm carries it without calling this; a launcher written in Rust calls it to
/// hand the value down (see [`crate::identity::job_attributes`]).
pub(crate) fn job_uuid(lookup: impl Fn(&str) -> Option<String>) -> String {
    let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
    uuid5(&format!(
        "nemo.lens.job/{}/{}",
        cluster(lookup),
        job_key(lookup)
    ))
}

/// The `nv.dl.run.uuid` of this run of the job: it changes with every restart.
///
/// Under Slurm (`SLURM_JOB_ID` or `SLURM_ARRAY_JOB_ID` non-empty) it is the UUID (version 5, URL
/// namespace) of `nemo.lens.run/{cluster}/{job}` (as in [`job_uuid`]) followed by
/// `/sr{SLURM_RESTART_COUNT, else 0}` unless this is an array task, then by
/// `/te{TORCHELASTIC_RESTART_COUNT}` when that variable is set (even empty). Outside Slurm it is
/// that of `nemo.lens.run/local/{run id}/te{TORCHELASTIC_RESTART_COUNT, else 0}`, where the run
/// id is `run_id`, else `TORCHELASTIC_RUN_ID`; `None` when neither is non-empty. Values are used
/// as written (`SLURM_RESTART_COUNT=01` gives `sr01`), as Python's `derive_nv_dl_run_uuid`.
///
/// Outside Slurm every rank of a run must pass the same run id (or share
/// `TORCHELASTIC_RUN_ID`) to get one run UUID.
pub(crate) fn run_uuid(
    lookup: impl Fn(&str) -> Option<String>,
    run_id: Option<&str>,
) -> Option<String> {
    let lookup: &dyn Fn(&str) -> Option<String> = &lookup;
    let in_slurm = non_empty(lookup("SLURM_JOB_ID")).is_some()
        || non_empty(lookup("SLURM_ARRAY_JOB_ID")).is_some();
    if !in_slurm {
        let local = run_id
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .or_else(|| non_empty(lookup("TORCHELASTIC_RUN_ID")))?;
        let restarts =
            non_empty(lookup("TORCHELASTIC_RESTART_COUNT")).unwrap_or_else(|| "0".into());
        return Some(uuid5(&format!("nemo.lens.run/local/{local}/te{restarts}")));
    }
    let mut name = format!("nemo.lens.run/{}/{}", cluster(lookup), job_key(lookup));
    if lookup("SLURM_ARRAY_TASK_ID").is_none() {
        let restarts = non_empty(lookup("SLURM_RESTART_COUNT")).unwrap_or_else(|| "0".into());
        name.push_str("/sr");
        name.push_str(&restarts);
    }
    if let Some(restarts) = lookup("TORCHELASTIC_RESTART_COUNT") {
        name.push_str("/te");
        name.push_str(&restarts);
    }
    Some(uuid5(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(env: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn uuids_are_python_s() {
        // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.job/nocluster/nojob") in Python: the name
        // outside a Slurm job, where no job UUID is emitted.
        assert_eq!(job_uuid(|_| None), "d2badfc7-0e4c-537b-b4ea-8785f79f8679");
        // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.run/cluster-a/12345/sr1") in Python.
        let env = lookup(&[
            ("SLURM_CLUSTER_NAME", "cluster-a"),
            ("SLURM_JOB_ID", "12345"),
            ("SLURM_RESTART_COUNT", "1"),
        ]);
        assert_eq!(
            run_uuid(env, None).as_deref(),
            Some("be42db52-ed95-5653-b035-190f2392e702")
        );
        assert_eq!(run_uuid(|_| None, None), None);
    }
}
