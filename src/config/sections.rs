//! The sections of a [`LensConfig`](super::LensConfig): which ranks export and where to
//! ([`ExportConfig`]), which spans record ([`GroupsConfig`]) and who the telemetry says produced
//! it ([`IdentityConfig`]).

use super::ExporterKind;

/// Which ranks export, and where to (`<P>_EXPORT_*`, `<P>_SAMPLER_ENABLED`, `<P>_EXPORTER`,
/// `<P>_CONSOLE_PATH`): [`LensConfig::export`](super::LensConfig::export).
///
/// ```
/// use nemo_lens::{ExporterKind, LensConfig};
/// let cfg = LensConfig::default().with(|c| {
///     c.export.strategy = "single_rank".into();
///     c.export.rank = Some(0); // rank 0 exports instead of the last rank
///     c.export.exporter = ExporterKind::Console;
/// });
/// assert_eq!(cfg.export.rank, Some(0));
/// assert_eq!(cfg.export.sample_rate, 1.0);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ExportConfig {
    /// Name of the export strategy (`<P>_EXPORT_STRATEGY`, default `single_rank`); looked up in
    /// the [strategy registry](crate::strategy) at setup.
    pub strategy: String,
    /// Rank that exports under `single_rank` (`<P>_EXPORT_RANK`); `None` (the default, and any
    /// negative value of the variable, as Python's `-1`) means the last rank.
    pub rank: Option<u32>,
    /// Fraction of ranks that export under `sampled` and under the rank sampler
    /// (`<P>_EXPORT_SAMPLE_RATE`, default `1.0`, must lie in `[0, 1]`).
    pub sample_rate: f64,
    /// Apply rank-aware sampling (`<P>_SAMPLER_ENABLED`, default `false`).
    pub sampler: bool,
    /// Exporter (`<P>_EXPORTER`, default `otlp`).
    pub exporter: ExporterKind,
    /// Rust only: with `exporter = console`, write JSONL to this file instead of stdout
    /// (`<P>_CONSOLE_PATH`); `{rank}` is replaced by the rank, so ranks never interleave.
    pub console_path: Option<String>,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            strategy: "single_rank".into(),
            rank: None,
            sample_rate: 1.0,
            sampler: false,
            exporter: ExporterKind::Otlp,
            console_path: None,
        }
    }
}

/// Which spans record, which start traces of their own, which are held per step and whether
/// they name their thread (`<P>_SPAN_GROUPS`, `<P>_SPAN_GROUP_RULES`, `<P>_SPAN_LEVEL`,
/// `<P>_TRACE_PER`, `<P>_DETAIL_*`, `<P>_THREAD_ATTRIBUTES`):
/// [`LensConfig::groups`](super::LensConfig::groups).
///
/// Span-group rules put the spans of other crates, which declare no `nemo.group.*` field, in a
/// group by their *target* (module path), so the group switches them on or off like the spans
/// that declare it. [`rules`](GroupsConfig::rules) is a comma-separated list of entries:
///
/// | entry | matches |
/// |---|---|
/// | `prefix=group` | callsites whose target is `prefix` or starts with `prefix::` |
/// | `prefix:name=group` | the same, and only spans and events named `name` |
/// | `default` | the default rules: `burn_collective=collective` |
/// | `none` | nothing (a spec of only `none` turns the default rules off) |
///
/// Prefixes match whole path segments (`burn_collective` matches
/// `burn_collective::local::client`, not `burn_collectives`); when several rules match, the
/// longest prefix wins, then a rule with a name. Groups are case-insensitive and must be
/// registered: setup fails with [`LensError::UnknownSpanGroup`](crate::LensError::UnknownSpanGroup)
/// naming the variable otherwise. Besides the Python library's groups, `collective` (communication
/// between ranks) and `ops` (a framework's tensor operations) are registered; both are in no
/// preset but `all`.
///
/// ```
/// use tracing_core::LevelFilter;
/// let cfg = nemo_lens::LensConfig::default().with(|c| {
///     c.groups.trace_per = "step".into();
///     c.groups.rules = "default, candle_transformers=ops".into();
///     c.groups.span_level = LevelFilter::DEBUG;
///     c.groups.detail_groups = "forward_backward,optimizer".into();
///     c.groups.thread_attributes = true;
/// });
/// assert_eq!(cfg.groups.detail_window, 32);
/// assert_eq!(cfg.groups.span_groups, "default");
/// assert_eq!(cfg.groups.trace_per, "step");
/// assert_eq!(cfg.groups.rules, "default, candle_transformers=ops");
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct GroupsConfig {
    /// Comma-separated, case-insensitive span groups and presets (`<P>_SPAN_GROUPS`, default
    /// `default`); resolved at setup.
    pub span_groups: String,
    /// Rust only: rules that put spans of other crates in span groups by target
    /// (`<P>_SPAN_GROUP_RULES`, default `default`: `burn_collective=collective`; the entries are
    /// described [above](GroupsConfig)); checked at setup.
    pub rules: String,
    /// Rust only: the least severe level of the recorded spans that are in no span group
    /// (`<P>_SPAN_LEVEL`, default `info`; the values of
    /// [`logs_level`](super::LensConfig::logs_level)). Spans of a group are decided by their
    /// group, whatever their level.
    pub span_level: tracing_core::LevelFilter,
    /// Rust only: span groups whose spans each start a trace of their own, linked to the span
    /// that would have been their parent (`<P>_TRACE_PER`, comma-separated, case-insensitive;
    /// default empty: off, as in Python). `step` gives one small trace per step per rank
    /// instead of one job-long trace that trace stores refuse past their size limits (see
    /// `docs/at-scale.md`).
    pub trace_per: String,
    /// Rust only: span groups whose spans inside a step are held on the rank and exported only
    /// for the steps that need them (`<P>_DETAIL_GROUPS`, comma-separated, case-insensitive,
    /// groups and presets; default empty: off). Setting it records these groups and `step`
    /// too. See `docs/detail-capture.md`.
    pub detail_groups: String,
    /// Rust only: a step keeps its detail when it lasts more than this many times the median
    /// of the previous [`detail_window`](GroupsConfig::detail_window) steps
    /// (`<P>_DETAIL_SLOW_FACTOR`, default `2.0`, a number from 1 to 1000).
    pub detail_slow_factor: f64,
    /// Rust only: how many previous steps of the rank the slow rule compares with
    /// (`<P>_DETAIL_WINDOW`, default `32`, from 1 to 100000).
    pub detail_window: usize,
    /// Rust only: the most bytes of detail held on the rank, every open step together
    /// (`<P>_DETAIL_MAX_BYTES`, default 4 MiB, from 1 to 1 GiB); past it a step keeps what
    /// fits and counts the rest in `nemo.detail.overflow` and the dropped spans.
    pub detail_max_bytes: usize,
    /// Rust only: every recorded span carries OpenTelemetry's `thread.id` (integer) and
    /// `thread.name` (string, when the thread has a name) of the thread it was created on
    /// (`<P>_THREAD_ATTRIBUTES`, default `false`, so that console JSONL stays the Python
    /// library's). `thread.id` is the OS thread id on Linux (`gettid`), elsewhere a number counted
    /// per process; `thread.name` is the Rust thread's name. `nemo-lens perfetto` draws each
    /// thread's spans on a track of their own. A span's own field of the same name wins.
    pub thread_attributes: bool,
}

impl GroupsConfig {
    /// The default of [`detail_max_bytes`](GroupsConfig::detail_max_bytes): 4 MiB.
    pub const DEFAULT_DETAIL_MAX_BYTES: usize = 4 << 20;
}

impl GroupsConfig {
    /// Megatron-LM's span groups beyond the built-in ones (its `MegatronSpanGroup`), for
    /// [`register_span_groups`](crate::groups::register_span_groups) with
    /// [`MEGATRON_SPAN_PRESETS`](Self::MEGATRON_SPAN_PRESETS), so that a Rust rank takes the same
    /// `NEMO_LENS_SPAN_GROUPS` as the Python ranks of a Megatron job.
    ///
    /// ```
    /// use nemo_lens::{groups, GroupsConfig};
    /// groups::register_span_groups(&GroupsConfig::MEGATRON_SPAN_GROUPS, &GroupsConfig::MEGATRON_SPAN_PRESETS).unwrap();
    /// ```
    pub const MEGATRON_SPAN_GROUPS: [&'static str; 8] = [
        "microbatch",
        "layer",
        "communication",
        "activation_offload",
        "data_loading",
        "first_iteration",
        "trace_region",
        "inference",
    ];

    /// Megatron-LM's presets over its groups (they union with the built-in presets of the same
    /// names): `default` adds `first_iteration` and `inference`; `goodput` (the groups of
    /// category `goodput`) adds `data_loading` and `first_iteration`; `per_step` adds
    /// `communication`, `data_loading`, `first_iteration` and `inference`; `profiling` is every
    /// group. Megatron's own `goodput` leaves out `evaluate`, which the built-in one holds:
    /// registered presets only add.
    pub const MEGATRON_SPAN_PRESETS: [(&'static str, &'static [&'static str]); 4] = [
        ("default", &["first_iteration", "inference"]),
        ("goodput", &["data_loading", "first_iteration"]),
        (
            "per_step",
            &[
                "communication",
                "data_loading",
                "first_iteration",
                "inference",
            ],
        ),
        ("profiling", &Self::MEGATRON_SPAN_GROUPS),
    ];

    /// NVRx's span groups (nvidia-resiliency-ext registers them when its telemetry shim is
    /// imported), for [`register_span_groups`](crate::groups::register_span_groups) with
    /// [`NVRX_SPAN_PRESETS`](Self::NVRX_SPAN_PRESETS). A span declares one with a field such as
    /// `nemo.group.nvrx.ft`.
    ///
    /// ```
    /// use nemo_lens::{groups, GroupsConfig};
    /// groups::register_span_groups(&GroupsConfig::NVRX_SPAN_GROUPS, &GroupsConfig::NVRX_SPAN_PRESETS).unwrap();
    /// let _span = tracing::info_span!("nv.nvrx.ftl.rendezvous", nemo.group.nvrx.ft = tracing::field::Empty);
    /// ```
    pub const NVRX_SPAN_GROUPS: [&'static str; 4] =
        ["nvrx.job", "nvrx.ft", "nvrx.ckpt", "nvrx.ckpt.phases"];

    /// NVRx's presets: `default` is `nvrx.job`, `nvrx.ft`, `nvrx.ckpt`; `per_step` adds
    /// `nvrx.ckpt.phases`; `profiling` is every group. NVRx names no `goodput` preset, so its
    /// spans carry `lens.group` but no category.
    pub const NVRX_SPAN_PRESETS: [(&'static str, &'static [&'static str]); 3] = [
        ("default", &["nvrx.job", "nvrx.ft", "nvrx.ckpt"]),
        ("per_step", &Self::NVRX_SPAN_GROUPS),
        ("profiling", &Self::NVRX_SPAN_GROUPS),
    ];
}

impl Default for GroupsConfig {
    fn default() -> Self {
        GroupsConfig {
            span_groups: "default".into(),
            rules: "default".into(),
            span_level: tracing_core::LevelFilter::INFO,
            trace_per: String::new(),
            detail_groups: String::new(),
            detail_slow_factor: 2.0,
            detail_window: 32,
            detail_max_bytes: Self::DEFAULT_DETAIL_MAX_BYTES,
            thread_attributes: false,
        }
    }
}

/// Who the telemetry says produced it: the service, run, user and W&B project of the resource
/// ([`LensConfig::identity`](super::LensConfig::identity)).
///
/// ```
/// let cfg = nemo_lens::LensConfig::default().with(|c| c.identity.run_id = "exp-1".into());
/// assert_eq!(cfg.identity.service_name, "nemo");
/// assert_eq!(cfg.identity.run_id, "exp-1");
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct IdentityConfig {
    /// `service.name` (bare `OTEL_SERVICE_NAME`, default `nemo`).
    pub service_name: String,
    /// Run id (`<P>_RUN_ID`); empty means `SLURM_JOB_ID`, else 12 random hex characters, chosen
    /// at setup (see [`TelemetryBuilder::random_run_id`](crate::TelemetryBuilder::random_run_id)).
    pub run_id: String,
    /// `nemo.user.id` (`<P>_USER_ID`).
    pub user: String,
    /// `wandb.entity` (bare `WANDB_ENTITY`).
    pub wandb_entity: String,
    /// `wandb.project` (bare `WANDB_PROJECT`).
    pub wandb_project: String,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        IdentityConfig {
            service_name: "nemo".into(),
            run_id: String::new(),
            user: String::new(),
            wandb_entity: String::new(),
            wandb_project: String::new(),
        }
    }
}
