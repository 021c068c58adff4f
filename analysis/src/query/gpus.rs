//! The GPUs `vramscope estimate --gpu NAME` knows: what a program running on one would see in
//! `torch.cuda.get_device_properties()` (its name, total memory, compute capability and
//! multiprocessors), and where each total comes from.
//!
//! A device's total is what `cudaGetDeviceProperties` gives programs (`totalGlobalMem`, which
//! PyTorch reports as `total_memory`) where a run of it says (deviceQuery, or a recording of
//! ours); otherwise the total `nvidia-smi` reports, which counts memory the driver keeps for
//! itself (a few hundred MiB more than programs can have: on an H200 `nvidia-smi` says 143,771
//! MiB and programs get 143,155 MiB). `--device-memory` gives a total instead.

use schemars::JsonSchema;
use serde::Serialize;

const MIB: u64 = 1 << 20;

/// A GPU an estimate can run on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Gpu {
    /// Its name, as `torch.cuda.get_device_name()` gives it.
    pub name: String,
    /// Its memory, in bytes.
    pub total_memory_bytes: u64,
    /// Its compute capability (major, minor).
    pub compute_capability: (u32, u32),
    /// Its streaming multiprocessors.
    pub multiprocessors: u32,
    /// Where the total comes from.
    pub memory_from: String,
}

/// A row of the table.
struct Row {
    /// The names `--gpu` takes, the first shown in messages.
    short: &'static [&'static str],
    /// The name the GPU gives.
    name: &'static str,
    /// Its memory.
    total: u64,
    /// Where the total comes from.
    from: &'static str,
    /// Its compute capability.
    capability: (u32, u32),
    /// Its multiprocessors.
    sms: u32,
}

const fn row(
    short: &'static [&'static str],
    name: &'static str,
    total: u64,
    from: &'static str,
    capability: (u32, u32),
    sms: u32,
) -> Row {
    Row { short, name, total, from, capability, sms }
}

const TABLE: [Row; 10] = [
    row(&["h200"], "NVIDIA H200", 150_109_880_320, "cuDeviceTotalMem, of a recording on an H200", (9, 0), 132),
    row(&["h100", "h100-80gb", "h100-sxm"], "NVIDIA H100 80GB HBM3", 81_559 * MIB, "nvidia-smi", (9, 0), 132),
    row(&["a100", "a100-80gb", "a100-sxm4-80gb"], "NVIDIA A100-SXM4-80GB", 81_920 * MIB, "nvidia-smi", (8, 0), 108),
    row(&["a100-40gb", "a100-sxm4-40gb"], "NVIDIA A100-SXM4-40GB", 42_298_834_944, "deviceQuery", (8, 0), 108),
    row(&["l40s"], "NVIDIA L40S", 46_068 * MIB, "nvidia-smi", (8, 9), 142),
    row(&["l4"], "NVIDIA L4", 23_034 * MIB, "nvidia-smi", (8, 9), 58),
    row(&["a10", "a10g"], "NVIDIA A10", 23_028 * MIB, "nvidia-smi", (8, 6), 72),
    row(&["t4"], "Tesla T4", 15_843_721_216, "deviceQuery", (7, 5), 40),
    row(&["rtx5090", "5090", "rtx-5090"], "NVIDIA GeForce RTX 5090", 33_677_180_928, "deviceQuery", (12, 0), 170),
    row(&["rtx4090", "4090", "rtx-4090"], "NVIDIA GeForce RTX 4090", 24_564 * MIB, "nvidia-smi", (8, 9), 128),
];

/// The GPU a short name (`H100`, `a100-40gb`, `4090`) or a full name (`NVIDIA H100 80GB HBM3`)
/// names, case and spaces aside.
pub fn gpu(name: &str) -> Option<Gpu> {
    let wanted = normal(name);
    TABLE.iter().find(|r| r.short.iter().any(|s| normal(s) == wanted) || normal(r.name) == wanted).map(|r| Gpu {
        name: r.name.to_owned(),
        total_memory_bytes: r.total,
        compute_capability: r.capability,
        multiprocessors: r.sms,
        memory_from: r.from.to_owned(),
    })
}

/// Every GPU's short name, for messages and `--help`.
pub fn gpu_names() -> Vec<&'static str> {
    TABLE.iter().map(|r| r.short[0]).collect()
}

fn normal(name: &str) -> String {
    name.chars().filter(|c| !c.is_whitespace() && *c != '_' && *c != '-').flat_map(char::to_lowercase).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_full_names_find_the_same_gpu() {
        let h100 = gpu("H100").unwrap();
        assert_eq!(gpu("nvidia h100 80gb hbm3"), Some(h100.clone()));
        assert_eq!(h100.compute_capability, (9, 0));
        assert_eq!(gpu("a100_40GB").unwrap().total_memory_bytes, 42_298_834_944);
        assert!(gpu("H300").is_none());
        assert!(gpu_names().contains(&"h200"));
    }
}
