//! The category table: which span name charges which path of the flame, and the display order
//! of the paths' parts. The names and paths are those of NeMo Lens's tools/goodput_report.py
//! (`CLASSIFY`, the checkpoint-save paths and `ORDER`), so a folded-stack file of either tool
//! reads the same.

/// Overhead spans and their paths (Lens's `CLASSIFY`). A span of one of these names, clipped to
/// the rank's window, takes part in the sweep line.
const CLASSIFY: &[(&str, &str)] = &[
    ("pre_startup", "BAD;scheduling;pre_startup"),
    ("slurm.job.prolog", "BAD;scheduling;pre_startup"),
    (
        "workload.startup.launch_script",
        "BAD;scheduling;launch_script",
    ),
    (
        "slurm.startup.launch_script",
        "BAD;scheduling;launch_script",
    ),
    (
        "workload.startup.container_load",
        "BAD;runtime;restart;container_load",
    ),
    (
        "slurm.startup.container_load",
        "BAD;runtime;restart;container_load",
    ),
    ("slurm.job_setup", "BAD;scheduling;job_setup"),
    ("slurm.job_teardown", "BAD;scheduling;job_teardown"),
    ("slurm.inter_step_gap", "BAD;scheduling;inter_step_gap"),
    ("slurm.inter_attempt_gap", "BAD;scheduling;requeue_gap"),
    (
        "megatron.startup.imports",
        "BAD;runtime;restart;python_init",
    ),
    (
        "megatron.startup.arg_parse",
        "BAD;runtime;restart;python_init",
    ),
    (
        "megatron.startup.inprocess_setup",
        "BAD;runtime;restart;python_init",
    ),
    (
        "megatron.startup.in_job_setup",
        "BAD;runtime;restart;python_init",
    ),
    (
        "megatron.startup.initialize_megatron",
        "BAD;runtime;restart;megatron_init",
    ),
    (
        "megatron.startup.jit_fusion_options",
        "BAD;runtime;restart;megatron_init",
    ),
    (
        "megatron.startup.model_init",
        "BAD;runtime;restart;model_init;build",
    ),
    (
        "megatron.checkpoint.load",
        "BAD;runtime;restart;model_init;checkpoint_load",
    ),
    (
        "megatron.startup.dataloader",
        "BAD;runtime;restart;dataloader",
    ),
    (
        "megatron.startup.cuda_graph_capture",
        "BAD;runtime;restart;rest_of_startup;warmup",
    ),
    (
        "megatron.startup.weight_hash_check",
        "BAD;runtime;restart;rest_of_startup;weight_hash",
    ),
    (
        "megatron.startup.sniff_test",
        "BAD;runtime;restart;rest_of_startup;sniff",
    ),
    ("megatron.train.sniff_test", "BAD;runtime;defense;sniff"),
    (
        "megatron.checkpoint.ft_heartbeat",
        "BAD;runtime;defense;ft_heartbeat",
    ),
    (
        "megatron.checkpoint.exit_finalize",
        "BAD;runtime;defense;terminate",
    ),
    ("megatron.train.iteration_report", "BAD;app;reporting"),
    ("megatron.evaluate", "BAD;app;eval"),
    ("nvrx.cold_start", "BAD;scheduling;cold_start"),
    (
        "nvrx.restart.rendezvous",
        "BAD;runtime;orchestration;rendezvous",
    ),
    (
        "nvrx.restart.health_check",
        "BAD;runtime;orchestration;health_check",
    ),
    (
        "nvrx.restart.worker_launch",
        "BAD;runtime;orchestration;worker_launch",
    ),
    (
        "nvrx.restart.teardown",
        "BAD;runtime;orchestration;teardown",
    ),
    ("nvrx.restart.await_round", "BAD;runtime;resilience;standby"),
];

/// The checkpoint-save path: nested spans telescope (the save and its timers log carve their
/// time out of the exposed save, whose remainder is bookkeeping).
const CHECKPOINT_SAVE: &[(&str, &str)] = &[
    (
        "megatron.checkpoint.exposed_save",
        "BAD;runtime;defense;checkpoint_save;bookkeeping",
    ),
    (
        "megatron.checkpoint.save",
        "BAD;runtime;defense;checkpoint_save;dispatch_staging",
    ),
    (
        "megatron.checkpoint.timers_log",
        "BAD;runtime;defense;checkpoint_save;skew_wait",
    ),
    (
        "megatron.checkpoint.save.finalize",
        "BAD;runtime;defense;checkpoint_save;finalize",
    ),
];

/// Spans that are read for their window, not charged.
pub const SLURM_JOB: &str = "slurm.job";
/// The in-process job envelope.
pub const WORKLOAD: &str = "workload";
/// Megatron's whole `pretrain` call.
pub const PRETRAIN: &str = "megatron.pretrain";
/// An srun step of the reckoner: dark time inside it is shutdown.
pub const SLURM_STEP: &str = "slurm.step";
/// The checkpoint worker's write (reported, never charged).
pub const WORKER_WRITE: &str = "nvrx.checkpoint.save.write";

/// The window of a rank: the first span of these names, in this order of preference.
pub const DENOMINATORS: [&str; 3] = [SLURM_JOB, WORKLOAD, PRETRAIN];

/// The training's own view of the Slurm side, dropped from every rank when the reckoner's file
/// has spans (its spans own that time).
pub const REPLACED_BY_RECKONER: [&str; 6] = [
    WORKLOAD,
    "pre_startup",
    "workload.startup.launch_script",
    SLURM_JOB,
    "slurm.job.prolog",
    "slurm.startup.launch_script",
];

/// The flame path an overhead span charges, if it is one.
pub fn overhead_path(name: &str) -> Option<&'static str> {
    CLASSIFY
        .iter()
        .chain(CHECKPOINT_SAVE)
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
}

/// Whether an ft_launcher span is fanned onto the ranks of its node (Lens fans only the
/// `CLASSIFY` names, not checkpoint-path ones).
pub fn is_fanned(name: &str) -> bool {
    CLASSIFY.iter().any(|(n, _)| *n == name)
}

/// The names a rank's accounting keeps (everything else only widens the fallback window).
pub fn interned(name: &str) -> Option<&'static str> {
    if let Some((n, _)) = CLASSIFY
        .iter()
        .chain(CHECKPOINT_SAVE)
        .find(|(n, _)| *n == name)
    {
        return Some(n);
    }
    [
        super::lost::ITERATION,
        SLURM_JOB,
        WORKLOAD,
        PRETRAIN,
        SLURM_STEP,
    ]
    .into_iter()
    .find(|n| *n == name)
}

/// Display rank of a path part among its siblings (Lens's `ORDER`, keyed by the part's name
/// only; unknown parts come after, by size).
pub fn order(part: &str) -> i32 {
    match part {
        "GOOD"
        | "scheduling"
        | "pre_startup"
        | "restart"
        | "rendezvous"
        | "shutdown"
        | "container_load"
        | "weight_hash"
        | "redone"
        | "compute"
        | "first_iteration_warmup" => 0,
        "BAD"
        | "runtime"
        | "job_setup"
        | "orchestration"
        | "health_check"
        | "untracked"
        | "python_init"
        | "sniff"
        | "uncommitted"
        | "slowdown"
        | "first_iter_after_ckpt" => 1,
        "app" | "launch_script" | "resilience" | "worker_launch" | "megatron_init" | "warmup"
        | "iteration_slowdown" => 2,
        // `standby` is in Lens's ORDER literal twice; Python keeps the later value, 3.
        "unobserved" | "inter_step_gap" | "lost_work" | "teardown" | "standby" | "model_init"
        | "reporting" => 3,
        "job_teardown" | "defense" | "dataloader" | "eval" => 4,
        "requeue_gap" | "rest_of_startup" => 5,
        "nvrx_rendezvous" => 6,
        "nvrx_health_check" => 7,
        "nvrx_worker_launch" => 8,
        "nvrx_teardown" => 9,
        "cold_start" => -1,
        _ => 999,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_saves_charge_their_path_and_are_not_fanned() {
        assert_eq!(
            overhead_path("megatron.checkpoint.save"),
            Some("BAD;runtime;defense;checkpoint_save;dispatch_staging")
        );
        assert!(!is_fanned("megatron.checkpoint.save"));
        assert!(is_fanned("nvrx.restart.rendezvous"));
        assert_eq!(overhead_path("nvrx.cycle"), None);
    }

    #[test]
    fn order_follows_lens_including_its_duplicate_standby() {
        assert_eq!(order("standby"), 3);
        assert_eq!(order("cold_start"), -1);
        assert_eq!(order("eval"), 4);
        assert_eq!(order("nothing"), 999);
    }
}
