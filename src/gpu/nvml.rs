//! The identity of one GPU, read through NVML (`libnvidia-ml.so.1`, loaded with `dlopen` by
//! nvml-wrapper), with the calls and the failure rules of the Python `detect_gpu`.

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::InitFlags;
use nvml_wrapper::error::NvmlError;
use opentelemetry::KeyValue;

use crate::semconv;

/// Reads the `nv.gpu.*` attributes of the GPU at physical `index`, in Python's order: index,
/// model, UUID (these three or nothing), then serial, PCI bus id, compute capability, total
/// memory and driver version, each left out when its call fails.
///
/// Any other failure (no library, `nvmlInitWithFlags`, the device handle, the name or UUID,
/// `nvmlShutdown`) is an error and gives no attributes, as in Python.
pub(crate) fn read(index: u32) -> Result<Vec<KeyValue>, NvmlError> {
    // `nvmlInitWithFlags(0)`: the entry point `pynvml.nvmlInit()` calls.
    let nvml = Nvml::init_with_flags(InitFlags::empty())?;
    // nvml-wrapper's `Drop` calls `nvmlShutdown` through an `expect`: a library without that
    // symbol (no real driver is one) would panic there. Such a library is never shut down.
    if nvml.lib().nvmlShutdown.is_err() {
        std::mem::forget(nvml);
        return Err(NvmlError::FailedToLoadSymbol("nvmlShutdown".into()));
    }
    let attributes = read_device(&nvml, index);
    // As in Python, whose `finally: nvmlShutdown()` raises over the result.
    nvml.shutdown()?;
    attributes
}

fn read_device(nvml: &Nvml, index: u32) -> Result<Vec<KeyValue>, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let mut attributes = vec![
        KeyValue::new(semconv::NV_GPU_INDEX, i64::from(index)),
        KeyValue::new(semconv::NV_GPU_MODEL, device.name()?),
        KeyValue::new(semconv::NV_GPU_UUID, device.uuid()?),
    ];
    if let Ok(serial) = device.serial() {
        attributes.push(KeyValue::new(semconv::NV_GPU_SERIAL, serial));
    }
    if let Ok(pci) = device.pci_info() {
        attributes.push(KeyValue::new(semconv::NV_GPU_PCI_BUS_ID, pci.bus_id));
    }
    if let Ok(cc) = device.cuda_compute_capability() {
        attributes.push(KeyValue::new(
            semconv::NV_GPU_COMPUTE_CAPABILITY,
            format!("{}.{}", cc.major, cc.minor),
        ));
    }
    if let Some(total) = memory_total(nvml, &device) {
        attributes.push(KeyValue::new(
            semconv::NV_GPU_MEMORY_TOTAL,
            i64::try_from(total).unwrap_or(i64::MAX),
        ));
    }
    if let Ok(version) = nvml.sys_driver_version() {
        attributes.push(KeyValue::new(semconv::NV_GPU_DRIVER_VERSION, version));
    }
    Ok(attributes)
}

/// The device's total memory in bytes. nvml-wrapper asks `nvmlDeviceGetMemoryInfo_v2`, which
/// drivers older than R510 lack; those answer the v1 call Python makes (same `total`).
fn memory_total(nvml: &Nvml, device: &nvml_wrapper::Device<'_>) -> Option<u64> {
    match device.memory_info() {
        Ok(memory) => Some(memory.total),
        Err(NvmlError::FailedToLoadSymbol(_)) => {
            // The symbol's `Result` field: the generated method of the same name would panic
            // on a missing symbol.
            let v1 = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().ok()?;
            let mut memory = nvml_wrapper_sys::bindings::nvmlMemory_t {
                total: 0,
                free: 0,
                used: 0,
            };
            // SAFETY: the handle comes from `nvml`, which is initialised and outlives the
            // call; `memory` is the `nvmlMemory_t` the v1 entry point writes.
            let rc = unsafe { v1(device.handle(), &mut memory) };
            (rc == nvml_wrapper_sys::bindings::nvmlReturn_enum_NVML_SUCCESS).then_some(memory.total)
        }
        Err(_) => None,
    }
}
