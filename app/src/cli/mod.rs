//! The command-line commands. `main.rs` parses arguments and calls these.

pub mod advise;
pub mod convert;
pub mod diff;
pub mod export;
pub mod info;
pub mod parquet_out;
pub mod record;
pub mod report;
pub mod schema;
pub mod serve;

/// Refuses a device the user asked for that `trace` does not hold, naming the ones it does.
pub fn check_device(
    path: &std::path::Path,
    trace: &vramscope_trace_format::Trace,
    want: Option<vramscope_trace_format::DeviceId>,
) -> anyhow::Result<()> {
    let Some(want) = want else { return Ok(()) };
    let devices = trace.devices();
    if devices.contains(&want) {
        return Ok(());
    }
    let want = trace.metadata.device_label(want);
    let held: Vec<String> = devices.iter().map(|&d| trace.metadata.device_label(d)).collect();
    if held.is_empty() {
        anyhow::bail!("{} has no device {want}: it holds no devices", path.display());
    }
    anyhow::bail!("{} has no device {want}; its devices: {}", path.display(), held.join(", "))
}
