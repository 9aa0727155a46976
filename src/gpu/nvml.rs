//! The identity of one GPU, read through NVML (`libnvidia-ml.so.1`, loaded with `dlopen` by
//! nvml-wrapper), with the calls and the failure rules of the Python `detect_gpu`.
//!
//! The strings (name, UUID, serial, PCI bus id, driver version) are read here from buffers of
//! ours, up to the first NUL or the end of the buffer (as Python's ctypes buffers read): the
//! binding's own getters look for the NUL past the buffer when a library wrote none.

use std::ffi::c_char;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::InitFlags;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper_sys::bindings::{
    NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_SERIAL_BUFFER_SIZE,
    NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE, nvmlDevice_t,
    nvmlPciInfo_t, nvmlReturn_t,
};
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
    let lib = nvml.lib();
    // SAFETY (each `device_string`): the handle comes from `nvml`, initialised and outliving
    // the calls, and each entry point writes at most the length it is given.
    let handle = unsafe { device.handle() };
    let name = device_string(
        nvml_sym(lib.nvmlDeviceGetName.as_ref())?,
        handle,
        NVML_DEVICE_NAME_V2_BUFFER_SIZE,
    )?;
    let uuid = device_string(
        nvml_sym(lib.nvmlDeviceGetUUID.as_ref())?,
        handle,
        NVML_DEVICE_UUID_V2_BUFFER_SIZE,
    )?;
    let mut attributes = vec![
        KeyValue::new(semconv::NV_GPU_INDEX, i64::from(index)),
        KeyValue::new(semconv::NV_GPU_MODEL, name),
        KeyValue::new(semconv::NV_GPU_UUID, uuid),
    ];
    if let Ok(serial) = nvml_sym(lib.nvmlDeviceGetSerial.as_ref())
        .and_then(|getter| device_string(getter, handle, NVML_DEVICE_SERIAL_BUFFER_SIZE))
    {
        attributes.push(KeyValue::new(semconv::NV_GPU_SERIAL, serial));
    }
    if let Ok(bus_id) = pci_bus_id(nvml, handle) {
        attributes.push(KeyValue::new(semconv::NV_GPU_PCI_BUS_ID, bus_id));
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
    if let Ok(version) = driver_version(nvml) {
        attributes.push(KeyValue::new(semconv::NV_GPU_DRIVER_VERSION, version));
    }
    Ok(attributes)
}

/// A device string getter of NVML (`fn(device, buffer, length)`).
type DeviceStringFn = unsafe extern "C" fn(nvmlDevice_t, *mut c_char, u32) -> nvmlReturn_t;

/// The string `getter` writes for `device` into a buffer of `len` bytes, read bounded.
fn device_string(
    getter: &DeviceStringFn,
    device: nvmlDevice_t,
    len: u32,
) -> Result<String, NvmlError> {
    let mut buf: Vec<c_char> = vec![0; len as usize];
    // SAFETY: `buf` holds `len` bytes, the length the library is told.
    nvml_try(unsafe { getter(device, buf.as_mut_ptr(), len) })?;
    bounded(&buf)
}

/// `nvmlSystemGetDriverVersion`, read bounded.
fn driver_version(nvml: &Nvml) -> Result<String, NvmlError> {
    let getter = nvml_sym(nvml.lib().nvmlSystemGetDriverVersion.as_ref())?;
    let len = NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE;
    let mut buf: Vec<c_char> = vec![0; len as usize];
    // SAFETY: `buf` holds `len` bytes, the length the library is told.
    nvml_try(unsafe { getter(buf.as_mut_ptr(), len) })?;
    bounded(&buf)
}

/// The `busId` of `nvmlDeviceGetPciInfo_v3` (the call Python's `nvmlDeviceGetPciInfo`
/// makes), read within its array.
fn pci_bus_id(nvml: &Nvml, device: nvmlDevice_t) -> Result<String, NvmlError> {
    let getter = nvml_sym(nvml.lib().nvmlDeviceGetPciInfo_v3.as_ref())?;
    // SAFETY: `nvmlPciInfo_t` is plain data (integers and byte arrays): all zeroes is a value.
    let mut info: nvmlPciInfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: the handle is live (see `read_device`); `info` is the struct the call writes.
    nvml_try(unsafe { getter(device, &mut info) })?;
    bounded(&info.busId)
}

/// The text of a C string buffer: up to its first NUL, or all of it when the library wrote
/// none; never past it.
fn bounded(buf: &[c_char]) -> Result<String, NvmlError> {
    let bytes: Vec<u8> = buf
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    Ok(std::str::from_utf8(&bytes)?.to_owned())
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
