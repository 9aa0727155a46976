//! What the resource holds beyond what setup derives, and what child processes inherit: the
//! role, defaults, a job-scoped process, and the publication of the resource to children.

use opentelemetry::KeyValue;

use super::TelemetryBuilder;
use crate::semconv;

impl TelemetryBuilder {
    /// This process's role in the job, as `nv.dl.role` (`trainer`, `ckpt_worker`, `agent`, …):
    /// an attribute of the application's, so it replaces the launcher's value (Python passes it
    /// in `resource_attributes`).
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::Key;
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let env = [("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.role=worker")];
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.metrics_enabled = false);
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    ///     .role("trainer")
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let role = telemetry.resource().unwrap().get(&Key::from_static_str("nv.dl.role"));
    /// assert_eq!(role, Some("trainer".into()));
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.resource
            .caller
            .push(KeyValue::new(semconv::NV_DL_ROLE, role.into()));
        self
    }

    /// Resource attributes that apply only where nothing else set the key: not the launcher
    /// (`OTEL_RESOURCE_ATTRIBUTES`), not detection, not
    /// [`TelemetryBuilder::resource_attributes`] (Python's `resource_attribute_defaults`).
    ///
    /// An integer `nv.dl.rank` or `nv.dl.world_size` among them is the rank or world size when
    /// neither the application's [`Place`](crate::Place) nor the launcher gives it (it then
    /// also names `service.instance.id`); a default rank leaves the world size unknown unless
    /// one is given too.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::{Key, KeyValue, Value};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// // The launcher gave the rank; the defaults fill only what it did not give.
    /// let env = [("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.rank=7")];
    /// let config = LensConfig::default().with_enabled(true).with(|c| {
    ///     c.export.strategy = "all_ranks".into();
    ///     c.metrics_enabled = false;
    /// });
    /// let telemetry = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    ///     .resource_attribute_defaults([
    ///         KeyValue::new("nv.dl.rank", 3_i64),
    ///         KeyValue::new("nv.dl.world_size", 8_i64),
    ///         KeyValue::new("app.team", "infra"),
    ///     ])
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let get = |k: &'static str| telemetry.resource().unwrap().get(&Key::from_static_str(k));
    /// assert_eq!(get("nv.dl.rank"), Some(Value::I64(7)));
    /// assert_eq!(get("nv.dl.world_size"), Some(Value::I64(8)));
    /// assert_eq!(get("app.team"), Some("infra".into()));
    /// # telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resource_attribute_defaults(
        mut self,
        attributes: impl IntoIterator<Item = KeyValue>,
    ) -> Self {
        self.resource.defaults.extend(attributes);
        self
    }

    /// Whether this process carries `nv.dl.run.uuid` (default `true`). A *job-scoped* process,
    /// one that outlives the job's attempts (a launcher agent that restarts the ranks), passes
    /// `false`: its resource then has no run UUID at all, neither derived nor inherited from
    /// `OTEL_RESOURCE_ATTRIBUTES` nor given as an attribute or a default, and
    /// [`TelemetryBuilder::publish_resource_attributes`] hands none to its children.
    /// `nv.dl.job.uuid` stays. (Python's `derive_run_uuid=False`.)
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry::Key;
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let env = [
    ///     ("SLURM_JOB_ID", "123"),
    ///     ("SLURM_CLUSTER_NAME", "test"),
    ///     ("OTEL_RESOURCE_ATTRIBUTES", "nv.dl.run.uuid=old-attempt"),
    /// ];
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.metrics_enabled = false);
    /// let agent = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()))
    ///     .derive_run_uuid(false)
    ///     # .allow_reinit_for_testing(true)
    ///     .build()?;
    /// let resource = agent.resource().unwrap();
    /// assert!(resource.get(&Key::from_static_str("nv.dl.run.uuid")).is_none());
    /// assert!(resource.get(&Key::from_static_str("nv.dl.job.uuid")).is_some());
    /// # agent.shutdown(std::time::Duration::from_secs(5))?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn derive_run_uuid(mut self, derive: bool) -> Self {
        self.resource.derive_run_uuid = derive;
        self
    }

    /// Publishes the resolved resource in this process's `OTEL_RESOURCE_ATTRIBUTES` for as
    /// long as the handle lives (default `false`; Python's `publish_resource_attributes=True`),
    /// so every process started meanwhile inherits the job's identity: a checkpoint worker, a
    /// data-loader started with `exec`, a relaunched rank.
    ///
    /// What is published is [`Telemetry::resource_attributes`](crate::Telemetry::resource_attributes),
    /// exactly (the variable's previous text is replaced, not extended): the launcher's keys
    /// with the values the resource resolved, the application's attributes and defaults, and
    /// what setup detected about the job (Slurm, `nv.dl.job.uuid`, `nv.dl.run.uuid`,
    /// Kubernetes, `nv.gpu.*`); never this process's own `host.name`, `process.pid` and
    /// `host.gpu.count`, nor what a child derives itself (`service.name`,
    /// `service.instance.id`, the run id, the SDK's keys) unless the launcher or the
    /// application gave it. [`Telemetry::shutdown`](crate::Telemetry::shutdown) (or dropping
    /// the last handle) puts the variable back as it was: the same bytes, or unset.
    ///
    /// A disabled setup leaves the variable alone. An enabled rank its export strategy leaves
    /// silent still publishes (every enabled Python process does): its resource is composed
    /// for that alone ([`Telemetry::resource`](crate::Telemetry::resource) stays `None`).
    ///
    /// # Safety
    ///
    /// The environment is shared by every thread of the process, and changing it while another
    /// thread reads it is undefined behaviour on most platforms (`getenv` inside C libraries,
    /// DNS resolution, time-zone lookups). Build, and shut down or drop the handle, while no
    /// other thread of the application reads or writes the environment (at startup, before
    /// other threads exist, as Python's setup is called). nemo-lens keeps its own threads out
    /// of it: it publishes before it starts any, and restores once its exporters have stopped.
    /// An export abandoned at its deadline is the one exception: with an OTLP endpoint given
    /// by host name, its thread may still be resolving the name when the variable is restored.
    ///
    /// ```
    /// use nemo_lens::{LensConfig, Telemetry};
    /// use opentelemetry_sdk::trace::InMemorySpanExporter;
    ///
    /// let env = [("SLURM_JOB_ID", "123"), ("SLURM_CLUSTER_NAME", "test")];
    /// let config = LensConfig::default().with_enabled(true).with(|c| c.metrics_enabled = false);
    /// let builder = Telemetry::builder(config)
    ///     .span_exporter(InMemorySpanExporter::default())
    ///     .env_lookup(move |k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string()));
    /// # let builder = builder.allow_reinit_for_testing(true);
    /// let before = std::env::var_os("OTEL_RESOURCE_ATTRIBUTES");
    /// // SAFETY: a doctest's only thread touches the environment.
    /// let telemetry = unsafe { builder.publish_resource_attributes(true) }.build()?;
    /// let published = std::env::var("OTEL_RESOURCE_ATTRIBUTES")?;
    /// assert!(published.contains("nv.dl.job.uuid="));
    /// assert!(!published.contains("process.pid"));
    /// // ... start the child processes here ...
    /// telemetry.shutdown(std::time::Duration::from_secs(5))?;
    /// assert_eq!(std::env::var_os("OTEL_RESOURCE_ATTRIBUTES"), before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn publish_resource_attributes(mut self, publish: bool) -> Self {
        self.resource.publish = publish;
        self
    }
}
