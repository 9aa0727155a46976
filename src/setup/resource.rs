//! The resource as setup finishes it, and what of it child processes inherit: the
//! application's defaults (`resource_attribute_defaults`), a job-scoped process without
//! `nv.dl.run.uuid` (`derive_run_uuid(false)`), the inheritable map
//! ([`Telemetry::resource_attributes`](crate::Telemetry::resource_attributes)) and its
//! publication in `OTEL_RESOURCE_ATTRIBUTES` for the handle's lifetime.

use std::collections::HashSet;
use std::ffi::OsString;
use std::sync::Mutex;

use opentelemetry::{Key, KeyValue, Value};
use opentelemetry_sdk::Resource;

use crate::carrier::{self, OTEL_RESOURCE_ATTRIBUTES, Published};
use crate::config::LensConfig;
use crate::config::resource::{self, Participant};
use crate::gpu;
use crate::semconv::*;

/// What the application asked of the resource through the builder.
pub(super) struct ResourceRequest {
    /// [`TelemetryBuilder::resource_attributes`](crate::TelemetryBuilder::resource_attributes)
    /// and [`TelemetryBuilder::role`](crate::TelemetryBuilder::role).
    pub(super) caller: Vec<KeyValue>,
    /// [`TelemetryBuilder::resource_attribute_defaults`](crate::TelemetryBuilder::resource_attribute_defaults).
    pub(super) defaults: Vec<KeyValue>,
    /// [`TelemetryBuilder::derive_run_uuid`](crate::TelemetryBuilder::derive_run_uuid).
    pub(super) derive_run_uuid: bool,
    /// [`TelemetryBuilder::publish_resource_attributes`](crate::TelemetryBuilder::publish_resource_attributes).
    pub(super) publish: bool,
    /// The rank keys the application gave through its [`Place`](crate::Place).
    pub(super) placed: Vec<&'static str>,
}

impl Default for ResourceRequest {
    fn default() -> Self {
        ResourceRequest {
            caller: Vec::new(),
            defaults: Vec::new(),
            derive_run_uuid: true,
            publish: false,
            placed: Vec::new(),
        }
    }
}

impl ResourceRequest {
    /// The rank and world size among the defaults, when they are non-negative integers (they
    /// then stand in for the launcher's, see [`Place`](crate::Place)).
    pub(super) fn rank_defaults(&self) -> (Option<u32>, Option<u32>) {
        let integer = |key: &str| {
            self.defaults
                .iter()
                .rev()
                .find(|kv| kv.key.as_str() == key)
                .and_then(|kv| match &kv.value {
                    Value::I64(n) => u32::try_from(*n).ok(),
                    Value::String(s) => {
                        resource::strict_integer(s.as_str()).and_then(|n| u32::try_from(n).ok())
                    }
                    _ => None,
                })
        };
        (integer(NV_DL_RANK), integer(NV_DL_WORLD_SIZE))
    }
}

/// Keys that describe this one process: never handed to a child (Python's
/// `LOCAL_RESOURCE_ATTRIBUTE_KEYS`).
const LOCAL_KEYS: [&str; 3] = [HOST_NAME, PROCESS_PID, HOST_GPU_COUNT];

/// Keys setup derives from its configuration or the SDK: inheritable only when the launcher,
/// the application or a default gave them (a child derives its own).
const DERIVED_KEYS: [&str; 15] = [
    SERVICE_NAME,
    SERVICE_VERSION,
    SERVICE_INSTANCE_ID,
    NEMO_RUN_ID,
    NEMO_USER_ID,
    WANDB_ENTITY,
    WANDB_PROJECT,
    DEPLOYMENT_ENVIRONMENT,
    DL_RANK,
    DL_WORLD_SIZE,
    NV_DL_RANK,
    NV_DL_WORLD_SIZE,
    TELEMETRY_SDK_NAME,
    TELEMETRY_SDK_LANGUAGE,
    TELEMETRY_SDK_VERSION,
];

/// The exporting rank's resource: the composition, the GPU identity (a process without a
/// rank, a launcher or a job-level tool, has no GPU of its own), then [`finish`].
pub(super) fn rank_resource(
    config: &LensConfig,
    who: &Participant,
    request: &ResourceRequest,
    local_rank: Option<u32>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Resource {
    let composed = resource::build_resource(config, who, &request.caller, lookup);
    let detect = config.detect_gpu && who.rank.is_some();
    finish(
        gpu::with_gpu_identity(composed, detect, local_rank, lookup),
        request,
    )
}

/// The resource of a rank that does not export (its flight recorder's dumps, what it
/// publishes): no GPU probe.
pub(super) fn recorder_resource(
    config: &LensConfig,
    who: &Participant,
    request: &ResourceRequest,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Resource {
    finish(
        resource::build_resource(config, who, &request.caller, lookup),
        request,
    )
}

/// Fills each default whose key nothing else set, and removes `nv.dl.run.uuid` from a
/// job-scoped process (whoever gave it: derived, inherited, default or explicit).
fn finish(resource: Resource, request: &ResourceRequest) -> Resource {
    let scoped_out = |key: &str| !request.derive_run_uuid && key == NV_DL_RUN_UUID;
    let fills: Vec<KeyValue> = request
        .defaults
        .iter()
        .filter(|kv| resource.get(&kv.key).is_none() && !scoped_out(kv.key.as_str()))
        .cloned()
        .collect();
    let remove = resource
        .get(&Key::from_static_str(NV_DL_RUN_UUID))
        .is_some()
        && scoped_out(NV_DL_RUN_UUID);
    if fills.is_empty() && !remove {
        return resource;
    }
    // (Lens's resource has no schema URL to carry over.)
    Resource::builder_empty()
        .with_attributes(
            resource
                .iter()
                .filter(|(k, _)| !scoped_out(k.as_str()))
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .chain(fills),
        )
        .build()
}

/// An enabled rank that does not export still publishes when asked (as every enabled Python
/// process does): its resource is composed for that alone.
pub(super) fn publish_unexported(
    config: &LensConfig,
    who: &Participant,
    request: &ResourceRequest,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> HandedDown {
    if !(config.enabled && request.publish) {
        return HandedDown::default();
    }
    let resource = recorder_resource(config, who, request, lookup);
    hand_down(&resource, request, lookup)
}

/// What of the resource child processes inherit, and its publication.
#[derive(Debug, Default)]
pub(crate) struct HandedDown {
    /// [`Telemetry::resource_attributes`](crate::Telemetry::resource_attributes).
    pub(crate) inheritable: Vec<KeyValue>,
    /// Set while the inheritable map is published.
    pub(crate) publication: Publication,
}

/// Keeps what of `resource` child processes inherit, and publishes it when asked.
pub(super) fn hand_down(
    resource: &Resource,
    request: &ResourceRequest,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> HandedDown {
    let inheritable = inheritable(resource, request, lookup);
    let publication = if request.publish {
        // SAFETY: the promise of `TelemetryBuilder::publish_resource_attributes`'s caller;
        // setup hands down before it starts a thread of its own.
        unsafe { Publication::publish(&inheritable) }
    } else {
        Publication::default()
    };
    HandedDown {
        inheritable,
        publication,
    }
}

/// The part of `resource` a child process inherits: every key but this process's own
/// (`host.name`, `process.pid`, `host.gpu.count`) and those setup derives itself, unless the
/// launcher, the application or a default gave them; the launcher's keys first, in their
/// order, then the others by name. Values are the resource's.
fn inheritable(
    resource: &Resource,
    request: &ResourceRequest,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<KeyValue> {
    let carried: Vec<KeyValue> = lookup(OTEL_RESOURCE_ATTRIBUTES)
        .map(|raw| carrier::parse(&raw))
        .unwrap_or_default();
    let has = |list: &[KeyValue], key: &str| list.iter().any(|kv| kv.key.as_str() == key);
    let given = |key: &str| {
        has(&carried, key)
            || has(&request.caller, key)
            || has(&request.defaults, key)
            || request.placed.contains(&key)
    };
    let keep = |key: &str| {
        !LOCAL_KEYS.contains(&key)
            && !key.contains('\0')
            && (!DERIVED_KEYS.contains(&key) || given(key))
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for kv in &carried {
        if let Some(value) = resource.get(&kv.key)
            && keep(kv.key.as_str())
            && seen.insert(kv.key.clone())
        {
            out.push(KeyValue::new(kv.key.clone(), value));
        }
    }
    let mut rest: Vec<KeyValue> = resource
        .iter()
        .filter(|(k, _)| keep(k.as_str()) && !seen.contains(*k))
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    rest.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
    out.extend(rest);
    out
}

/// The inheritable map while it is published in `OTEL_RESOURCE_ATTRIBUTES`: restored to what
/// the variable was (the same bytes, or unset) by [`Publication::restore`], at shutdown or
/// when the handle drops.
#[derive(Debug, Default)]
pub(crate) struct Publication(Mutex<Option<Published>>);

impl Publication {
    /// Publishes `attributes` (an exact map: what the variable held is replaced, as Python's
    /// `publish_otel_resource_attributes` does).
    ///
    /// # Safety
    ///
    /// No other thread may read or write the environment meanwhile (the promise of
    /// [`TelemetryBuilder::publish_resource_attributes`](crate::TelemetryBuilder::publish_resource_attributes)'s
    /// caller; setup publishes before it starts a thread of its own).
    unsafe fn publish(attributes: &[KeyValue]) -> Publication {
        let value = OsString::from(carrier::format(attributes));
        // SAFETY: the caller's promise, above.
        let published = unsafe { carrier::install(value) };
        Publication(Mutex::new(Some(published)))
    }

    /// Puts `OTEL_RESOURCE_ATTRIBUTES` back as it was before setup; later calls do nothing.
    /// The same promise as [`Publication::publish`] holds here: shutdown restores once
    /// lens's exporters have stopped.
    pub(crate) fn restore(&self) {
        let published = match self.0.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        // Dropping the guard restores the variable.
        drop(published);
    }
}
