//! [`Place`]: the process's place in the job, as the application knows it.

/// This process's place in the job: its rank, the world size and its rank on its node, as the
/// application knows them ([`TelemetryBuilder::place`](crate::TelemetryBuilder::place)).
///
/// What it leaves open comes from the launcher: the rank and world size from `nv.dl.rank` and
/// `nv.dl.world_size` in `OTEL_RESOURCE_ATTRIBUTES`, the local rank from `LOCAL_RANK`, else
/// `SLURM_LOCALID`. Without any of them ([`Place::default`]) the rank is 0 and the world size 1
/// (unknown when the rank came from the launcher).
///
/// The resource carries the rank and world size as `nv.dl.rank` and `nv.dl.world_size` (and
/// `dl.*`, see [`TelemetryBuilder::legacy_rank_attributes`](crate::TelemetryBuilder::legacy_rank_attributes));
/// export strategies, the rank sampler and `{rank}` in `NEMO_LENS_CONSOLE_PATH` use them. The
/// local rank picks the GPU of the `nv.gpu.*` attributes ([`LensConfig::detect_gpu`](crate::LensConfig::detect_gpu)).
///
/// ```
/// use nemo_lens::Place;
/// let trainer = Place::rank(3).of(8);
/// // A launcher that names the local rank in a variable of its own (Open MPI):
/// let local = std::env::var("OMPI_COMM_WORLD_LOCAL_RANK").ok().and_then(|v| v.parse().ok());
/// let trainer = match local {
///     Some(local_rank) => trainer.local_rank(local_rank),
///     None => trainer,
/// };
/// // A job-level tool: no rank, no world size (unless the launcher gives them).
/// let tool = Place::unknown();
/// # let _ = (trainer, tool);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Place {
    pub(crate) rank: Option<u32>,
    pub(crate) unknown_rank: bool,
    pub(crate) world_size: Option<u32>,
    pub(crate) unknown_world_size: bool,
    pub(crate) local_rank: Option<u32>,
}

impl Place {
    /// Rank `rank`; the world size from the launcher, else 1, unless [`Place::of`] gives it.
    pub fn rank(rank: u32) -> Place {
        Place {
            rank: Some(rank),
            ..Place::default()
        }
    }

    /// A process that does not know its rank or the world size (a launcher, a job-level tool
    /// such as `nemo-lens emit-spans`): unless the launcher gives them, the resource gets no
    /// rank and world size attributes and no rank-derived `service.instance.id`. Export
    /// strategies and `{rank}` in `NEMO_LENS_CONSOLE_PATH` then see rank 0.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Place, Telemetry};
    /// use opentelemetry::Key;
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.metrics_enabled = false);
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(|_| None) // no SLURM_JOB_ID, no OTEL_RESOURCE_ATTRIBUTES
    ///     .place(Place::unknown())
    ///     .random_run_id(false)
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let resource = telemetry.resource().unwrap();
    /// for key in ["dl.rank", "nv.dl.rank", "dl.world_size", "service.instance.id", "nemo.run.id"] {
    ///     assert_eq!(resource.get(&Key::from_static_str(key)), None, "{key}");
    /// }
    /// assert_eq!(telemetry.run_id(), "");
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unknown() -> Place {
        Place {
            unknown_rank: true,
            unknown_world_size: true,
            ..Place::default()
        }
    }

    /// The world size: `Some(n)` ranks, or `None` when this process does not know it (the
    /// launcher's, if it gives one; else the resource gets no world size attribute).
    ///
    /// ```
    /// use nemo_lens::Place;
    /// assert_eq!(Place::rank(3).of(8), Place::rank(3).of(Some(8)));
    /// let rank_of_unknown_world = Place::rank(3).of(None);
    /// # let _ = rank_of_unknown_world;
    /// ```
    pub fn of(mut self, world_size: impl Into<Option<u32>>) -> Place {
        self.world_size = world_size.into();
        self.unknown_world_size = self.world_size.is_none();
        self
    }

    /// This process's rank among the ranks of its node, which picks its GPU for the `nv.gpu.*`
    /// resource attributes. Default: `LOCAL_RANK`, else `SLURM_LOCALID`, else 0.
    pub fn local_rank(mut self, local_rank: u32) -> Place {
        self.local_rank = Some(local_rank);
        self
    }
}
