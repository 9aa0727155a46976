//! Attribute names (semantic conventions) used by NeMo Lens and its consumers.
//!
//! Every constant is a plain `&'static str`, so it works anywhere an OpenTelemetry key is
//! accepted (`KeyValue::new`, `Key::from_static_str`) and as a `tracing` field name in
//! documentation and tests. The names are byte-for-byte those of the Python package
//! (`nemo.lens.semconv`), so spans and resources from Rust and Python processes of one job can
//! be filtered with the same collector queries.
//!
//! # Naming
//!
//! A constant is the attribute name upper-cased with `.` replaced by `_`:
//! `dl.rank` → [`DL_RANK`], `nv.dl.rank` → [`NV_DL_RANK`], `slurm.job.id` → [`SLURM_JOB_ID`].
//! (The Python package spells the `gen_ai.*` constants `GENAI_*`; here they are
//! [`GEN_AI_OPERATION_NAME`] and so on, as in the upstream Rust semantic-conventions crate.)
//!
//! # Stability
//!
//! The constants follow OpenTelemetry semantic conventions [`SEMCONV_VERSION`] where an upstream
//! name exists:
//!
//! * `gen_ai.*` — upstream OpenTelemetry, **experimental** upstream (may still change there);
//! * `k8s.*` — upstream OpenTelemetry, stable;
//! * `service.*`, `host.*`, `process.*`, `deployment.*`, `telemetry.sdk.*` — upstream
//!   OpenTelemetry resource names, used as literals by the Python package;
//! * `dl.*`, `nv.dl.*`, `nv.gpu.*`, `rl.*`, `gym.*`, `slurm.*`, `nemo.*`, `wandb.*`,
//!   `inverted.*` — NeMo custom, stable within the NeMo ecosystem: they change only in a major
//!   release;
//! * `lens.*`, `purpose`, `megatron.*`, `nv.nvrx.*` — the names NeMo Lens, Megatron-LM and NVRx
//!   use today (span groups, collector routing, the span names `nemo-lens goodput` reads),
//!   nightly: they follow those projects.
//!
//! # Releases
//!
//! The resource [`crate::Telemetry::resource`] speaks both vocabularies of the rank: today's
//! NeMo Lens names `nv.dl.rank` / `nv.dl.world_size` and, unless
//! [`crate::TelemetryBuilder::legacy_rank_attributes`] turns them off, the 0.1.0 names
//! `dl.rank` / `dl.world_size`. Its Slurm attributes, `nv.dl.job.uuid` and `nv.dl.run.uuid`
//! are today's ([`crate::identity::job_attributes`]); its `nv.gpu.*` attributes come from NVML with
//! `NEMO_LENS_DETECT_GPU` (feature `nvml`). [`SLURM_CLUSTER`], [`SLURM_NODELIST`] and
//! [`SLURM_TORCHELASTIC_RESTART_COUNT`] are retired (kept, deprecated, never emitted), as are
//! the older source-code names [`CODE_NAMESPACE`], [`CODE_FILEPATH`] and [`CODE_LINENO`].
//!
//! Each `nv.dl.*`, `nv.gpu.*`, `slurm.*` and `inverted.*` constant says its type in the
//! attribute model of NeMo Lens (`integer`, `string`, `boolean`): a launcher or an application
//! that sets one should use that type.
//!
//! # Where an attribute belongs
//!
//! Stable for the life of the process (rank, parallel sizes, cluster, job) → resource attribute;
//! categorical and per span → span attribute; numeric and time-varying (loss, throughput) →
//! metric; free text → a span event or nowhere (it may hold personal data).
//!
//! # Example
//!
//! ```
//! use nemo_lens::semconv;
//! use opentelemetry::{KeyValue, Value};
//!
//! let kv = KeyValue::new(semconv::DL_RANK, 3_i64);
//! assert_eq!(kv.key.as_str(), "dl.rank");
//! assert_eq!(kv.value, Value::I64(3));
//! assert_eq!(semconv::NV_DL_RANK, "nv.dl.rank");
//! ```

/// Upstream OpenTelemetry semantic-conventions version of the `gen_ai.*` and `k8s.*` names.
pub const SEMCONV_VERSION: &str = "1.29.0";

// ------------------------------------------------------------------------------------------
// Standard OpenTelemetry resource attributes (literals in the Python package)
// ------------------------------------------------------------------------------------------

/// `service.name`: logical name of the service (from the configuration, default `nemo`).
pub const SERVICE_NAME: &str = "service.name";
/// `service.version`: version of the instrumentation (this crate's version).
pub const SERVICE_VERSION: &str = "service.version";
/// `service.instance.id`: unique id of one process, `"{run_id}-rank{rank}"` in Lens.
pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
/// `deployment.environment`: deployment tier, from `DEPLOYMENT_ENV` or `ENVIRONMENT`.
pub const DEPLOYMENT_ENVIRONMENT: &str = "deployment.environment";
/// `host.name`: host name of the machine (`gethostname`).
pub const HOST_NAME: &str = "host.name";
/// `process.pid`: operating-system process id (integer).
pub const PROCESS_PID: &str = "process.pid";
/// `host.gpu.count`: number of GPUs visible to the process (integer).
pub const HOST_GPU_COUNT: &str = "host.gpu.count";
/// `telemetry.sdk.name`: name of the OpenTelemetry SDK (`opentelemetry`).
pub const TELEMETRY_SDK_NAME: &str = "telemetry.sdk.name";
/// `telemetry.sdk.language`: language of the OpenTelemetry SDK (`rust`).
pub const TELEMETRY_SDK_LANGUAGE: &str = "telemetry.sdk.language";
/// `telemetry.sdk.version`: version of the OpenTelemetry SDK (the `opentelemetry_sdk` crate).
pub const TELEMETRY_SDK_VERSION: &str = "telemetry.sdk.version";

// ------------------------------------------------------------------------------------------
// Distributed learning (dl.*) — NeMo custom
// ------------------------------------------------------------------------------------------

/// `dl.rank`: global rank of the process (integer resource attribute): the 0.1.0 name of
/// [`NV_DL_RANK`], written beside it unless
/// [`crate::TelemetryBuilder::legacy_rank_attributes`] turns it off.
pub const DL_RANK: &str = "dl.rank";
/// `dl.world_size`: number of ranks in the job (integer resource attribute): the 0.1.0 name
/// of [`NV_DL_WORLD_SIZE`], written beside it like [`DL_RANK`].
pub const DL_WORLD_SIZE: &str = "dl.world_size";
/// `dl.local_rank`: rank of the process on its node (0.1.0; today [`NV_DL_LOCAL_RANK`]).
pub const DL_LOCAL_RANK: &str = "dl.local_rank";
/// `dl.data_parallel.rank`: rank within the data-parallel group.
pub const DL_DATA_PARALLEL_RANK: &str = "dl.data_parallel.rank";
/// `dl.data_parallel.size`: size of the data-parallel group.
pub const DL_DATA_PARALLEL_SIZE: &str = "dl.data_parallel.size";
/// `dl.tensor_parallel.rank`: rank within the tensor-parallel group.
pub const DL_TENSOR_PARALLEL_RANK: &str = "dl.tensor_parallel.rank";
/// `dl.tensor_parallel.size`: size of the tensor-parallel group.
pub const DL_TENSOR_PARALLEL_SIZE: &str = "dl.tensor_parallel.size";
/// `dl.pipeline_parallel.rank`: rank within the pipeline-parallel group.
pub const DL_PIPELINE_PARALLEL_RANK: &str = "dl.pipeline_parallel.rank";
/// `dl.pipeline_parallel.size`: size of the pipeline-parallel group.
pub const DL_PIPELINE_PARALLEL_SIZE: &str = "dl.pipeline_parallel.size";
/// `dl.step`: index of the training step a span belongs to (read by `nemo-lens summary`).
pub const DL_STEP: &str = "dl.step";
/// `dl.iteration`: training iteration (step) number.
pub const DL_ITERATION: &str = "dl.iteration";
/// `dl.loss`: training loss.
pub const DL_LOSS: &str = "dl.loss";
/// `dl.grad_norm`: gradient norm.
pub const DL_GRAD_NORM: &str = "dl.grad_norm";
/// `dl.learning_rate`: learning rate.
pub const DL_LEARNING_RATE: &str = "dl.learning_rate";
/// `dl.throughput_tflops`: achieved throughput in TFLOP/s.
pub const DL_THROUGHPUT_TFLOPS: &str = "dl.throughput_tflops";
/// `dl.throughput_tokens_per_sec`: achieved throughput in tokens per second.
pub const DL_THROUGHPUT_TOKENS_PER_SEC: &str = "dl.throughput_tokens_per_sec";
/// `dl.batch_size`: batch size.
pub const DL_BATCH_SIZE: &str = "dl.batch_size";
/// `dl.sequence_length`: sequence length.
pub const DL_SEQUENCE_LENGTH: &str = "dl.sequence_length";
/// `dl.microbatch_id`: index of the micro-batch within the step.
pub const DL_MICROBATCH_ID: &str = "dl.microbatch_id";

// ------------------------------------------------------------------------------------------
// Generative AI (gen_ai.*) — upstream OpenTelemetry, experimental
// ------------------------------------------------------------------------------------------

/// `gen_ai.operation.name`: name of the generative-AI operation (e.g. `chat`).
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: provider of the model (e.g. `openai`, `vllm`).
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`: name of the model requested.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.token.type`: kind of token counted (`input` or `output`).
pub const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";

// ------------------------------------------------------------------------------------------
// Reinforcement learning (rl.*) — NeMo custom
// ------------------------------------------------------------------------------------------

/// `rl.algorithm`: RL algorithm (e.g. `grpo`, `dpo`).
pub const RL_ALGORITHM: &str = "rl.algorithm";
/// `rl.reward`: reward of one rollout.
pub const RL_REWARD: &str = "rl.reward";
/// `rl.reward.mean`: mean reward over a batch.
pub const RL_REWARD_MEAN: &str = "rl.reward.mean";
/// `rl.kl_divergence`: KL divergence to the reference policy.
pub const RL_KL_DIVERGENCE: &str = "rl.kl_divergence";
/// `rl.policy_loss`: policy loss.
pub const RL_POLICY_LOSS: &str = "rl.policy_loss";
/// `rl.value_loss`: value-function loss.
pub const RL_VALUE_LOSS: &str = "rl.value_loss";
/// `rl.entropy`: policy entropy.
pub const RL_ENTROPY: &str = "rl.entropy";
/// `rl.generation.backend`: generation backend (e.g. `vllm`, `megatron`).
pub const RL_GENERATION_BACKEND: &str = "rl.generation.backend";
/// `rl.num_rollouts`: number of rollouts.
pub const RL_NUM_ROLLOUTS: &str = "rl.num_rollouts";
/// `rl.response_length.mean`: mean response length.
pub const RL_RESPONSE_LENGTH_MEAN: &str = "rl.response_length.mean";
/// `rl.grad_norm`: gradient norm of the policy update (main).
pub const RL_GRAD_NORM: &str = "rl.grad_norm";
/// `rl.learning_rate`: learning rate of the policy update (main).
pub const RL_LEARNING_RATE: &str = "rl.learning_rate";
/// `rl.throughput.tokens_per_sec`: generation throughput in tokens per second (main).
pub const RL_THROUGHPUT_TOKENS_PER_SEC: &str = "rl.throughput.tokens_per_sec";

// ------------------------------------------------------------------------------------------
// NeMo Gym (gym.*) — NeMo custom
// ------------------------------------------------------------------------------------------

/// `gym.server.name`: name of the Gym environment server.
pub const GYM_SERVER_NAME: &str = "gym.server.name";
/// `gym.server.type`: type of the Gym environment server.
pub const GYM_SERVER_TYPE: &str = "gym.server.type";
/// `gym.num_servers`: number of Gym servers.
pub const GYM_NUM_SERVERS: &str = "gym.num_servers";
/// `gym.rollout.batch_size`: rollout batch size.
pub const GYM_ROLLOUT_BATCH_SIZE: &str = "gym.rollout.batch_size";
/// `gym.verify.success_rate`: fraction of successful verifications.
pub const GYM_VERIFY_SUCCESS_RATE: &str = "gym.verify.success_rate";

// ------------------------------------------------------------------------------------------
// Slurm (slurm.*) — NeMo custom; the names 0.1.0 already had
// ------------------------------------------------------------------------------------------

/// `slurm.job.id` (string): the job: `{SLURM_ARRAY_JOB_ID}_{SLURM_ARRAY_TASK_ID}` for an array
/// task, else `SLURM_JOB_ID`.
pub const SLURM_JOB_ID: &str = "slurm.job.id";
/// `slurm.job.name` (string): job name (`SLURM_JOB_NAME`).
pub const SLURM_JOB_NAME: &str = "slurm.job.name";
/// `slurm.nodelist` (string): nodes allocated to the job; retired (0.1.0 wrote `SLURM_NODELIST`;
/// never emitted now).
#[deprecated(note = "retired: never emitted (0.1.0 wrote it)")]
pub const SLURM_NODELIST: &str = "slurm.nodelist";
/// `slurm.nnodes` (integer): number of nodes (`SLURM_JOB_NUM_NODES`, else `SLURM_NNODES`; 0.1.0
/// wrote a string).
pub const SLURM_NNODES: &str = "slurm.nnodes";
/// `slurm.ntasks` (integer): number of tasks (`SLURM_NTASKS`; 0.1.0 wrote a string).
pub const SLURM_NTASKS: &str = "slurm.ntasks";
/// `slurm.partition` (string): partition (`SLURM_JOB_PARTITION`, else `SLURM_PARTITION`).
pub const SLURM_PARTITION: &str = "slurm.partition";
/// `slurm.cluster.name` (string): cluster name (`SLURM_CLUSTER_NAME`).
pub const SLURM_CLUSTER_NAME: &str = "slurm.cluster.name";

// ------------------------------------------------------------------------------------------
// Slurm (slurm.*) — NeMo custom; added since 0.1.0
// ------------------------------------------------------------------------------------------

/// `slurm.job.id.raw` (string): the raw `SLURM_JOB_ID`, also for an array task.
pub const SLURM_JOB_ID_RAW: &str = "slurm.job.id.raw";
/// `slurm.array.job_id` (string): id of the job array (`SLURM_ARRAY_JOB_ID`), else the job id.
pub const SLURM_ARRAY_JOB_ID: &str = "slurm.array.job_id";
/// `slurm.array.task_id` (string): index of the array task (`SLURM_ARRAY_TASK_ID`), `"0"` outside
/// an array.
pub const SLURM_ARRAY_TASK_ID: &str = "slurm.array.task_id";
/// `slurm.array.count` (integer): number of tasks in the job array (`SLURM_ARRAY_TASK_COUNT`,
/// default 1).
pub const SLURM_ARRAY_COUNT: &str = "slurm.array.count";
/// `slurm.sluid` (string): launcher-assigned unique id of the job (`LENS_SLURM_SLUID`, else
/// `NV_LAUNCH_SLUID`).
pub const SLURM_SLUID: &str = "slurm.sluid";
/// `slurm.array.sluid` (string): launcher-assigned unique id of the job array
/// (`LENS_SLURM_ARRAY_SLUID`, else `NV_LAUNCH_ARRAY_SLUID`).
pub const SLURM_ARRAY_SLUID: &str = "slurm.array.sluid";
/// `slurm.head_node.name` (string): node running the batch script (`SLURMD_NODENAME`, outside a
/// step only).
pub const SLURM_HEAD_NODE_NAME: &str = "slurm.head_node.name";
/// `slurm.restart_count` (integer): number of times Slurm requeued the job (`SLURM_RESTART_COUNT`,
/// default 0).
pub const SLURM_RESTART_COUNT: &str = "slurm.restart_count";
/// `slurm.job.user` (string): user that owns the job (`SLURM_JOB_USER`).
pub const SLURM_JOB_USER: &str = "slurm.job.user";
/// `slurm.job.account` (string): account charged for the job (`SLURM_JOB_ACCOUNT`).
pub const SLURM_JOB_ACCOUNT: &str = "slurm.job.account";
/// `slurm.job.qos` (string): quality of service of the job (`SLURM_JOB_QOS`).
pub const SLURM_JOB_QOS: &str = "slurm.job.qos";
/// `slurm.job.reservation` (string): reservation the job runs in (`SLURM_JOB_RESERVATION`).
pub const SLURM_JOB_RESERVATION: &str = "slurm.job.reservation";
/// `slurm.segment` (string): segment size of the allocation (`SLURM_SEGMENT`).
pub const SLURM_SEGMENT: &str = "slurm.segment";
/// `slurm.topology.addr` (string): topology address of the node (`SLURM_TOPOLOGY_ADDR`;
/// task-local).
pub const SLURM_TOPOLOGY_ADDR: &str = "slurm.topology.addr";
/// `slurm.topology.addr_pattern` (string): pattern of the topology address
/// (`SLURM_TOPOLOGY_ADDR_PATTERN`; task-local).
pub const SLURM_TOPOLOGY_ADDR_PATTERN: &str = "slurm.topology.addr_pattern";
/// `slurm.cluster` (string): retired (never emitted); use [`SLURM_CLUSTER_NAME`].
#[deprecated(note = "retired: never emitted; use SLURM_CLUSTER_NAME")]
pub const SLURM_CLUSTER: &str = "slurm.cluster";
/// `slurm.torchelastic.restart_count` (integer): retired (never emitted); the restart count is part
/// of [`NV_DL_RUN_UUID`].
#[deprecated(note = "retired: never emitted; the restart count is part of NV_DL_RUN_UUID")]
pub const SLURM_TORCHELASTIC_RESTART_COUNT: &str = "slurm.torchelastic.restart_count";

// ------------------------------------------------------------------------------------------
// Run identification and span bookkeeping (nemo.*) — NeMo custom
// ------------------------------------------------------------------------------------------

/// `nemo.run.id`: id of the run, shared by all ranks of a job.
pub const NEMO_RUN_ID: &str = "nemo.run.id";
/// `nemo.user.id`: user that launched the run.
pub const NEMO_USER_ID: &str = "nemo.user.id";
/// `nemo.span.truncated`: `true` on a span Lens ended at shutdown (also the event's name).
pub const NEMO_SPAN_TRUNCATED: &str = "nemo.span.truncated";
/// `nemo.span.truncated.reason`: why a span was truncated (on the `nemo.span.truncated` event).
pub const NEMO_SPAN_TRUNCATED_REASON: &str = "nemo.span.truncated.reason";
/// `nemo.span.open` (Rust only): `true` on a flight-recorder dump's span that was still open at
/// the dump.
pub const NEMO_SPAN_OPEN: &str = "nemo.span.open";
/// `nemo.span.open_age_s` (Rust only): how long a dumped open span had been open, in seconds.
pub const NEMO_SPAN_OPEN_AGE_S: &str = "nemo.span.open_age_s";
/// `nemo.group` (Rust only): the span group of a flight-recorder dump's span.
pub const NEMO_GROUP: &str = "nemo.group";
/// `nemo.detail.kept` (Rust only): on a `step` span under per-step detail capture
/// (`NEMO_LENS_DETAIL_GROUPS`), whether the detail spans held during the step were exported.
pub const NEMO_DETAIL_KEPT: &str = "nemo.detail.kept";
/// `nemo.detail.held` (Rust only): on a `step` span under detail capture, how many detail spans
/// were held during the step (exported when kept, dropped otherwise).
pub const NEMO_DETAIL_HELD: &str = "nemo.detail.held";
/// `nemo.detail.reason` (Rust only): on a `step` span whose detail was kept, why: `slow`,
/// `error`, `requested`, `first` or `truncated`; on a held span in a flight-recorder dump, the
/// dump's reason.
pub const NEMO_DETAIL_REASON: &str = "nemo.detail.reason";
/// `nemo.detail.overflow` (Rust only): on a `step` span, detail spans dropped because the
/// held detail reached `NEMO_LENS_DETAIL_MAX_BYTES` (absent when none was).
pub const NEMO_DETAIL_OVERFLOW: &str = "nemo.detail.overflow";
/// `nemo.lens.dropped` (Rust only): lens's own observable counter of dropped telemetry.
pub const NEMO_LENS_DROPPED: &str = "nemo.lens.dropped";
/// `signal`: which pipeline a `nemo.lens.dropped` series counts (`spans`, `logs`,
/// `metric_exports`).
pub const NEMO_LENS_DROPPED_SIGNAL: &str = "signal";

/// `thread.id` (integer): the thread a span was created on (upstream OpenTelemetry), on every
/// span with `NEMO_LENS_THREAD_ATTRIBUTES` (the OS thread id on Linux); `nemo-lens perfetto`
/// puts spans with the same value on one track.
pub const THREAD_ID: &str = "thread.id";
/// `thread.name` (string): the name of the thread a span was created on (upstream
/// OpenTelemetry), with `NEMO_LENS_THREAD_ATTRIBUTES` when the thread has one; names the track
/// in `nemo-lens perfetto`.
pub const THREAD_NAME: &str = "thread.name";

// ------------------------------------------------------------------------------------------
// Source code (OpenTelemetry semantic conventions), written on bridged log records

/// `code.file.path`: the source file of the code that emitted a log record (the path the
/// compiler gave the callsite, as `file!()`).
pub const CODE_FILE_PATH: &str = "code.file.path";
/// `code.function.name`: the function that emitted a log record. Python writes the function's
/// name; a `tracing` callsite knows no function, so Rust writes its module path
/// (`trainer::data`).
pub const CODE_FUNCTION_NAME: &str = "code.function.name";
/// `code.line.number`: the source line of the code that emitted a log record (integer).
pub const CODE_LINE_NUMBER: &str = "code.line.number";
/// `code.namespace`: older name of the module attribute, which `opentelemetry-appender-tracing`
/// writes; nemo-lens writes [`CODE_FUNCTION_NAME`] instead, as Python does.
#[deprecated(note = "older name, not written by nemo-lens; use CODE_FUNCTION_NAME")]
pub const CODE_NAMESPACE: &str = "code.namespace";
/// `code.filepath`: older name of [`CODE_FILE_PATH`] (not written by nemo-lens).
#[deprecated(note = "older name, not written by nemo-lens; use CODE_FILE_PATH")]
pub const CODE_FILEPATH: &str = "code.filepath";
/// `code.lineno`: older name of [`CODE_LINE_NUMBER`] (not written by nemo-lens).
#[deprecated(note = "older name, not written by nemo-lens; use CODE_LINE_NUMBER")]
pub const CODE_LINENO: &str = "code.lineno";

// ------------------------------------------------------------------------------------------
// Exceptions (OpenTelemetry semantic conventions, stable)
// ------------------------------------------------------------------------------------------

/// `exception`: the name of the span event that records an error or a panic.
pub const EXCEPTION_EVENT: &str = "exception";
/// `exception.message`: the error or panic message, cut to the value length limit.
pub const EXCEPTION_MESSAGE: &str = "exception.message";
/// `exception.type`: the kind of exception. Rust errors carry no runtime type name, so on an
/// `ERROR` event it is, in this order: an explicit `exception.type` field
/// (`error!(exception.type = "DataError", "...")`, then not also a plain attribute); for an
/// error recorded with `Debug` (`#[instrument(err(Debug))]`, `error = ?e`, or a `dyn Error`
/// field) the type name its `Debug` text starts with (`NotFound`, `Os`, `ConfigError`); else
/// `"Error"`. A panic is `"panic"`.
pub const EXCEPTION_TYPE: &str = "exception.type";
/// `exception.stacktrace`: the backtrace from the user's frame down, cut to the value length
/// limit; written for a panic when `RUST_BACKTRACE` / `RUST_LIB_BACKTRACE` enable backtraces
/// (as `std::backtrace::Backtrace::capture`), and for every `ERROR` event and panic with
/// [`TelemetryBuilder::error_backtraces`](crate::TelemetryBuilder::error_backtraces). Resolved
/// into text on the export worker, never on the thread that records the exception.
pub const EXCEPTION_STACKTRACE: &str = "exception.stacktrace";
/// `exception.escaped`: the string `"False"` for an `ERROR` event (the error is recorded and
/// the span goes on, as Python's `managed_span`), `"True"` for a panic (it unwinds out of the
/// span). A string, as in Python's output.
pub const EXCEPTION_ESCAPED: &str = "exception.escaped";

// ------------------------------------------------------------------------------------------
// Weights & Biases Weave (wandb.*) — NeMo custom
// ------------------------------------------------------------------------------------------

/// `wandb.entity`: W&B entity (team or user), required when exporting to Weave.
pub const WANDB_ENTITY: &str = "wandb.entity";
/// `wandb.project`: W&B project, required when exporting to Weave.
pub const WANDB_PROJECT: &str = "wandb.project";

// ------------------------------------------------------------------------------------------
// Kubernetes (k8s.*) — upstream OpenTelemetry, stable
// ------------------------------------------------------------------------------------------

/// `k8s.namespace.name`: namespace of the pod (`K8S_NAMESPACE`).
pub const K8S_NAMESPACE_NAME: &str = "k8s.namespace.name";
/// `k8s.pod.name`: name of the pod (`K8S_POD_NAME`, else `HOSTNAME`).
pub const K8S_POD_NAME: &str = "k8s.pod.name";
/// `k8s.pod.uid`: UID of the pod (`K8S_POD_UID`).
pub const K8S_POD_UID: &str = "k8s.pod.uid";
/// `k8s.node.name`: node the pod runs on (`K8S_NODE_NAME`).
pub const K8S_NODE_NAME: &str = "k8s.node.name";
/// `k8s.container.name`: name of the container (`K8S_CONTAINER_NAME`).
pub const K8S_CONTAINER_NAME: &str = "k8s.container.name";
/// `k8s.job.name`: name of the Kubernetes job (`K8S_JOB_NAME`).
pub const K8S_JOB_NAME: &str = "k8s.job.name";

// ------------------------------------------------------------------------------------------
// Participant identity (nv.dl.*) — NeMo custom, nightly
// ------------------------------------------------------------------------------------------

/// `nv.dl.rank` (integer): global rank of the participant.
pub const NV_DL_RANK: &str = "nv.dl.rank";
/// `nv.dl.world_size` (integer): number of participants.
pub const NV_DL_WORLD_SIZE: &str = "nv.dl.world_size";
/// `nv.dl.local_rank` (integer): rank of the participant on its node.
pub const NV_DL_LOCAL_RANK: &str = "nv.dl.local_rank";
/// `nv.dl.role` (string): kind of process: `trainer`, `ckpt_worker`, `launcher`, `generator`.
pub const NV_DL_ROLE: &str = "nv.dl.role";
/// `nv.dl.job.uuid` (string): the job as submitted, stable across restarts and requeues (see
/// [`crate::identity::job_attributes`]).
pub const NV_DL_JOB_UUID: &str = "nv.dl.job.uuid";
/// `nv.dl.run.uuid` (string): one run of the job, new with every restart (see
/// [`crate::identity::job_attributes`]).
pub const NV_DL_RUN_UUID: &str = "nv.dl.run.uuid";
/// `nv.dl.provider.name` (string): execution engine running the workload: `mcore`, `vllm`,
/// `sglang`.
pub const NV_DL_PROVIDER_NAME: &str = "nv.dl.provider.name";
/// `nv.dl.launch.container.image` (string): container image name, tag and digest.
pub const NV_DL_LAUNCH_CONTAINER_IMAGE: &str = "nv.dl.launch.container.image";
/// `nv.dl.software.cuda` (string): CUDA version PyTorch was built against.
pub const NV_DL_SOFTWARE_CUDA: &str = "nv.dl.software.cuda";
/// `nv.dl.software.nccl` (string): NCCL version.
pub const NV_DL_SOFTWARE_NCCL: &str = "nv.dl.software.nccl";
/// `nv.dl.software.torch` (string): PyTorch version.
pub const NV_DL_SOFTWARE_TORCH: &str = "nv.dl.software.torch";
/// `nv.dl.software.transformer_engine` (string): Transformer Engine version.
pub const NV_DL_SOFTWARE_TRANSFORMER_ENGINE: &str = "nv.dl.software.transformer_engine";
/// `nv.dl.topology.size.tp` (integer): tensor-parallel size.
pub const NV_DL_TOPOLOGY_SIZE_TP: &str = "nv.dl.topology.size.tp";
/// `nv.dl.topology.size.pp` (integer): pipeline-parallel size.
pub const NV_DL_TOPOLOGY_SIZE_PP: &str = "nv.dl.topology.size.pp";
/// `nv.dl.topology.size.dp` (integer): data-parallel size.
pub const NV_DL_TOPOLOGY_SIZE_DP: &str = "nv.dl.topology.size.dp";
/// `nv.dl.training.config.global_batch_size` (integer): global batch size.
pub const NV_DL_TRAINING_CONFIG_GLOBAL_BATCH_SIZE: &str = "nv.dl.training.config.global_batch_size";
/// `nv.dl.training.config.micro_batch_size` (integer): micro-batch size.
pub const NV_DL_TRAINING_CONFIG_MICRO_BATCH_SIZE: &str = "nv.dl.training.config.micro_batch_size";
/// `nv.dl.training.config.optimizer` (string): optimizer name.
pub const NV_DL_TRAINING_CONFIG_OPTIMIZER: &str = "nv.dl.training.config.optimizer";
/// `nv.dl.training.config.recompute_granularity` (string): activation-recompute granularity.
pub const NV_DL_TRAINING_CONFIG_RECOMPUTE_GRANULARITY: &str =
    "nv.dl.training.config.recompute_granularity";
/// `nv.dl.training.config.sequence_length` (integer): sequence length.
pub const NV_DL_TRAINING_CONFIG_SEQUENCE_LENGTH: &str = "nv.dl.training.config.sequence_length";
/// `nv.dl.training.target.train_iters` (integer): planned number of iterations.
pub const NV_DL_TRAINING_TARGET_TRAIN_ITERS: &str = "nv.dl.training.target.train_iters";
/// `nv.dl.training.target.train_samples` (integer): planned number of samples.
pub const NV_DL_TRAINING_TARGET_TRAIN_SAMPLES: &str = "nv.dl.training.target.train_samples";
/// `nv.dl.training.target.train_tokens` (integer): planned number of tokens.
pub const NV_DL_TRAINING_TARGET_TRAIN_TOKENS: &str = "nv.dl.training.target.train_tokens";

// ------------------------------------------------------------------------------------------
// GPU identity (nv.gpu.*) — NeMo custom, nightly
// ------------------------------------------------------------------------------------------

/// `nv.gpu.index` (integer): physical index of the GPU the process uses.
pub const NV_GPU_INDEX: &str = "nv.gpu.index";
/// `nv.gpu.model` (string): GPU model name.
pub const NV_GPU_MODEL: &str = "nv.gpu.model";
/// `nv.gpu.uuid` (string): GPU UUID.
pub const NV_GPU_UUID: &str = "nv.gpu.uuid";
/// `nv.gpu.serial` (string): GPU board serial number.
pub const NV_GPU_SERIAL: &str = "nv.gpu.serial";
/// `nv.gpu.pci_bus_id` (string): PCI bus id of the GPU.
pub const NV_GPU_PCI_BUS_ID: &str = "nv.gpu.pci_bus_id";
/// `nv.gpu.compute_capability` (string): compute capability as `"major.minor"` (`"9.0"`).
pub const NV_GPU_COMPUTE_CAPABILITY: &str = "nv.gpu.compute_capability";
/// `nv.gpu.memory_total` (integer): total GPU memory in bytes.
pub const NV_GPU_MEMORY_TOTAL: &str = "nv.gpu.memory_total";
/// `nv.gpu.driver_version` (string): NVIDIA driver version.
pub const NV_GPU_DRIVER_VERSION: &str = "nv.gpu.driver_version";

// ------------------------------------------------------------------------------------------
// Inverted spans (inverted.*) — NeMo custom, nightly
// ------------------------------------------------------------------------------------------

/// `inverted.skew` (boolean): `true` on a backdated span whose supplied end preceded its start and
/// was clamped.
pub const INVERTED_SKEW: &str = "inverted.skew";
/// `inverted.start_epoch_seconds` (string): the supplied start, epoch seconds, as given.
pub const INVERTED_START_EPOCH_SECONDS: &str = "inverted.start_epoch_seconds";
/// `inverted.end_epoch_seconds` (string): the supplied end, epoch seconds, as given (before
/// clamping).
pub const INVERTED_END_EPOCH_SECONDS: &str = "inverted.end_epoch_seconds";
/// `inverted.delta_seconds` (string): start minus end in seconds, a positive decimal (`"0.004"`,
/// `"1E-9"`).
pub const INVERTED_DELTA_SECONDS: &str = "inverted.delta_seconds";

// ------------------------------------------------------------------------------------------
// Span groups and collector routing (lens.*, purpose) — NeMo custom, nightly
// ------------------------------------------------------------------------------------------

/// `lens.group` (string): the span group of a span (see [`crate::groups`]), on every exported
/// span of a group, as NeMo Lens's `managed_span` sets it.
pub const LENS_GROUP: &str = "lens.group";
/// `lens.span_category` (string): `goodput` or `profiling`, the category of the span's group,
/// when its group has one (see [`crate::groups`]).
pub const LENS_SPAN_CATEGORY: &str = "lens.span_category";
/// `purpose` (string list): what a span is kept for (`["goodput"]`, `["profiling"]`); NeMo
/// Lens's collector configurations route on it (`ContainsValue(attributes["purpose"],
/// "goodput")`). Written from the span's category unless the span sets it itself.
pub const PURPOSE: &str = "purpose";

// ------------------------------------------------------------------------------------------
// Megatron-LM (megatron.*) — Megatron's instrumentation, read by `nemo-lens goodput`
// ------------------------------------------------------------------------------------------

/// `megatron.iteration` (integer): the training iteration of a `megatron.train.iteration` span
/// and of checkpoint spans (the iteration a save commits, a load resumes from).
pub const MEGATRON_ITERATION: &str = "megatron.iteration";
/// `megatron.layer_number` (integer): the transformer layer of a `megatron.layer.*` span.
pub const MEGATRON_LAYER_NUMBER: &str = "megatron.layer_number";
/// `megatron.train.iteration`: span name of one training iteration (group `step`), with
/// [`MEGATRON_ITERATION`]; `nemo-lens goodput` counts these.
pub const MEGATRON_TRAIN_ITERATION: &str = "megatron.train.iteration";
/// `megatron.checkpoint.save`: span name of a checkpoint save (group `checkpoint`), with
/// [`MEGATRON_ITERATION`]: it commits the iterations up to it.
pub const MEGATRON_CHECKPOINT_SAVE: &str = "megatron.checkpoint.save";
/// `megatron.checkpoint.exposed_save`: span name of the part of a save training waits for.
pub const MEGATRON_CHECKPOINT_EXPOSED_SAVE: &str = "megatron.checkpoint.exposed_save";
/// `megatron.checkpoint.load`: span name of a checkpoint load at start-up (group
/// `load_checkpoint`).
pub const MEGATRON_CHECKPOINT_LOAD: &str = "megatron.checkpoint.load";
/// `megatron.startup.model_init`: span name of building the model (group `model_init`).
pub const MEGATRON_STARTUP_MODEL_INIT: &str = "megatron.startup.model_init";
/// `megatron.startup.dataloader`: span name of building the data loaders (group
/// `data_loading`).
pub const MEGATRON_STARTUP_DATALOADER: &str = "megatron.startup.dataloader";
/// `megatron.evaluate`: span name of an evaluation pass (group `evaluate`).
pub const MEGATRON_EVALUATE: &str = "megatron.evaluate";
/// `megatron.pretrain`: span name of Megatron's whole `pretrain` call; `nemo-lens goodput`
/// takes it as the rank's window when there is no `slurm.job` or `workload` span.
pub const MEGATRON_PRETRAIN: &str = "megatron.pretrain";

// ------------------------------------------------------------------------------------------
// NVRx (nv.nvrx.*) — nvidia-resiliency-ext's instrumentation
// ------------------------------------------------------------------------------------------

/// `nv.nvrx.cycle.index` (integer): the restart cycle of an ft_launcher span.
pub const NV_NVRX_CYCLE_INDEX: &str = "nv.nvrx.cycle.index";
/// `nv.nvrx.cycle.outcome` (string): how a cycle ended (`completed`, `failed`, `peer_restart`,
/// `excluded`, `standby`, `terminated`).
pub const NV_NVRX_CYCLE_OUTCOME: &str = "nv.nvrx.cycle.outcome";
/// `nv.nvrx.ftl.node` (string): the node of an ft_launcher agent.
pub const NV_NVRX_FTL_NODE: &str = "nv.nvrx.ftl.node";
/// `nv.nvrx.ftl.rdzv.round` (integer): the rendezvous round of an ft_launcher span.
pub const NV_NVRX_FTL_RDZV_ROUND: &str = "nv.nvrx.ftl.rdzv.round";
/// `nv.nvrx.ckpt.call_idx` (integer): the checkpoint call a `nv.nvrx.ckpt.save.*` span belongs
/// to.
pub const NV_NVRX_CKPT_CALL_IDX: &str = "nv.nvrx.ckpt.call_idx";

// ------------------------------------------------------------------------------------------
// Metric (instrument) names — see `crate::metrics::families`
// ------------------------------------------------------------------------------------------
//
// Gauges reuse the attribute names above where Python does (`rl.reward.mean`, `dl.loss`, …).

/// `gen_ai.server.request.duration`: histogram of inference request durations, seconds
/// (upstream GenAI metric).
pub const GEN_AI_SERVER_REQUEST_DURATION: &str = "gen_ai.server.request.duration";
/// `gen_ai.client.token.usage`: histogram of input and output token counts (upstream GenAI
/// metric).
pub const GEN_AI_CLIENT_TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// `rl.generation.duration_ms`: histogram of generation durations, milliseconds.
pub const RL_GENERATION_DURATION_MS: &str = "rl.generation.duration_ms";
/// `rl.rollout.duration_ms`: histogram of rollout-collection durations, milliseconds.
pub const RL_ROLLOUT_DURATION_MS: &str = "rl.rollout.duration_ms";
/// `gym.server.request_duration_ms`: histogram of Gym server request durations, milliseconds.
pub const GYM_SERVER_REQUEST_DURATION_MS: &str = "gym.server.request_duration_ms";
/// `gym.rollout.duration_ms`: histogram of Gym rollout durations, milliseconds.
pub const GYM_ROLLOUT_DURATION_MS: &str = "gym.rollout.duration_ms";
/// `gym.verify.duration_ms`: histogram of Gym verification durations, milliseconds.
pub const GYM_VERIFY_DURATION_MS: &str = "gym.verify.duration_ms";
/// `gym.servers.active`: gauge of active Gym servers.
pub const GYM_SERVERS_ACTIVE: &str = "gym.servers.active";
/// `dl.step.duration`: histogram of training-step durations, seconds (Rust trainers; NeMo
/// custom, no Python counterpart).
pub const DL_STEP_DURATION: &str = "dl.step.duration";
