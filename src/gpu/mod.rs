//! On the GPU: which GPU a rank ran on (`nv.gpu.*` resource attributes read through NVML,
//! feature `nvml`), and its spans as NVTX ranges next to its CUDA kernels in Nsight Systems
//! (feature `nvtx`). `docs/gpu.md` shows both in use.

#[cfg(feature = "nvml")]
mod index;
#[cfg(feature = "nvml")]
mod nvml;
pub(crate) mod nvtx;
#[cfg(feature = "nvml")]
mod probe;

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

/// How long NVML may take to answer (its initialisation attaches every GPU of the node, which
/// takes seconds without persistence mode; a driver stuck in the kernel never answers): then
/// setup goes on without `nv.gpu.*`, and the probe process is killed.
#[cfg(feature = "nvml")]
const NVML_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `resource` with the `nv.gpu.*` attributes of this rank's GPU added when `detect` asks for
/// them. A key `resource` already has keeps its value: an `nv.gpu.*` value the launcher put in
/// `OTEL_RESOURCE_ATTRIBUTES`, or the program passed, wins over the detected one.
///
/// `local_rank` is the one the program gave; without it, `LOCAL_RANK` or `SLURM_LOCALID`
/// (through `lookup`). Detection never fails setup: without a GPU identity it prints at most
/// one line on stderr and adds nothing.
pub(crate) fn with_gpu_identity(
    resource: Resource,
    detect: bool,
    local_rank: Option<u32>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Resource {
    if !detect {
        return resource;
    }
    let missing: Vec<KeyValue> = identity(local_rank, lookup)
        .into_iter()
        .filter(|kv| resource.get(&kv.key).is_none())
        .collect();
    if missing.is_empty() {
        return resource;
    }
    // (Lens's resource has no schema URL to carry over.)
    Resource::builder_empty()
        .with_attributes(
            resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .chain(missing),
        )
        .build()
}

/// The `nv.gpu.*` attributes of this rank's GPU, or none (with one line on stderr saying why).
/// NVML is read by a probe process (`probe.rs`): this process loads nothing, so a library that
/// never loads or a driver that never answers holds setup for [`NVML_TIMEOUT`] and nothing
/// else.
#[cfg(feature = "nvml")]
fn identity(local_rank: Option<u32>, lookup: &dyn Fn(&str) -> Option<String>) -> Vec<KeyValue> {
    let index = match index::physical_gpu_index(local_rank, lookup) {
        Ok(index) => index,
        Err(why) => return no_identity(&why.to_string()),
    };
    match probe::read(index, NVML_TIMEOUT) {
        Ok(attributes) => attributes,
        Err(why) => no_identity(&why),
    }
}

#[cfg(not(feature = "nvml"))]
fn identity(_local_rank: Option<u32>, _lookup: &dyn Fn(&str) -> Option<String>) -> Vec<KeyValue> {
    no_identity("nemo-lens was built without its `nvml` feature")
}

/// A detection that found nothing: its one line on stderr ([`warning`]), and no attribute.
fn no_identity(reason: &str) -> Vec<KeyValue> {
    eprintln!("{}", warning(reason));
    Vec::new()
}

/// The line saying why there is no GPU identity. The reason may quote a library path or a
/// variable's value: it is cut, and control characters are escaped.
fn warning(reason: &str) -> String {
    const SHOWN_CHARS: usize = 240;
    let mut shown: String = reason
        .chars()
        .take(SHOWN_CHARS)
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if reason.chars().nth(SHOWN_CHARS).is_some() {
        shown.push('…');
    }
    format!("nemo-lens: warning: no nv.gpu.* attributes (NEMO_LENS_DETECT_GPU): {shown}")
}

#[cfg(test)]
mod tests {
    use opentelemetry::{Key, Value};

    use super::*;

    // That the launcher's `nv.gpu.*` values win over detected ones is tested against the
    // stand-in NVML library (tests/gpu/nvml.rs).
    #[test]
    fn the_resource_is_unchanged_when_detection_is_off_or_finds_no_gpu() {
        let resource = Resource::builder_empty()
            .with_attributes([
                KeyValue::new("nv.gpu.uuid", "GPU-from-launcher"),
                KeyValue::new("service.name", "trainer"),
            ])
            .build();
        // Detection off: untouched.
        let same = with_gpu_identity(resource.clone(), false, None, &|_| None);
        assert_eq!(same, resource);
        // On, with an index that is no GPU: a warning, and the resource as it was.
        let lookup = |k: &str| (k == "CUDA_VISIBLE_DEVICES").then(|| "GPU-1a2b".to_string());
        let same = with_gpu_identity(resource.clone(), true, Some(0), &lookup);
        assert_eq!(
            same.get(&Key::from_static_str("nv.gpu.uuid")),
            Some(Value::from("GPU-from-launcher"))
        );
        assert_eq!(same.len(), 2);
    }

    #[test]
    fn the_reason_line_is_bounded_and_escaped() {
        let line = warning(&format!("a\nb\u{1b}[31m{}", "x".repeat(10_000)));
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("a\\nb\\u{1b}[31mxxx"), "{line:?}");
        assert!(line.ends_with("x…"), "{line:?}");
        assert!(line.chars().count() < 400, "{}", line.len());
        assert!(!warning("short").ends_with('…'));
    }
}
