//! What the CUDA driver says about the machine's devices (name, total memory, driver version),
//! through cudarc, for a recording's metadata. On a machine without a driver library this is
//! simply empty: the library's presence is checked first, since cudarc panics without it.
#![allow(unsafe_code)]

use cudarc::driver::{result, sys};
use vramscope_trace_format::{DeviceId, DeviceInfo};

/// The driver's devices, or nothing when there is no driver (or it fails).
pub fn device_facts() -> (Vec<DeviceInfo>, Option<i32>) {
    let found = std::panic::catch_unwind(|| {
        // SAFETY: loading libcuda runs its initialisers, as any CUDA program's start does.
        if !unsafe { sys::is_culib_present() } {
            return (Vec::new(), None);
        }
        if result::init().is_err() {
            return (Vec::new(), None);
        }
        let mut version = 0;
        // SAFETY: `version` is valid to write; the library is loaded and initialised.
        let driver_version =
            (unsafe { sys::cuDriverGetVersion(&mut version) } == sys::CUresult::CUDA_SUCCESS).then_some(version);
        let count = result::device::get_count().unwrap_or(0);
        let devices = (0..count)
            .filter_map(|ordinal| {
                let device = result::device::get(ordinal).ok()?;
                let name = result::device::get_name(device).ok();
                // SAFETY: `device` came from the driver just now.
                let total = unsafe { result::device::total_mem(device) }.ok();
                let uuid = result::device::get_uuid(device).ok().map(|u| uuid_text(&u.bytes));
                Some(DeviceInfo {
                    device: DeviceId(i16::try_from(ordinal).ok()?),
                    name,
                    total_memory_bytes: total.map(|t| t as u64),
                    uuid,
                    ..DeviceInfo::default()
                })
            })
            .collect();
        (devices, driver_version)
    });
    found.unwrap_or_default()
}

/// Gives the devices `trace` knows the driver's name and total memory, and notes the driver's
/// version ([`device_facts`]'s answer).
pub fn add_facts(trace: &mut vramscope_trace_format::Trace, facts: &(Vec<DeviceInfo>, Option<i32>)) {
    let (devices, driver_version) = facts;
    for fact in devices {
        if let Some(known) = trace.metadata.devices.iter_mut().find(|d| d.device == fact.device) {
            known.name.clone_from(&fact.name);
            known.total_memory_bytes = fact.total_memory_bytes;
            known.uuid.clone_from(&fact.uuid);
        }
    }
    if let Some(version) = driver_version {
        trace.metadata.extra.insert("cuda_driver_version".to_owned(), (*version).into());
    }
}

/// A device's UUID as NVML and `nvidia-smi -L` write it: `GPU-` and the 16 bytes in hex, grouped
/// 4-2-2-2-6.
pub fn uuid_text(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: Vec<String> = bytes.iter().map(|&b| format!("{:02x}", b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}
