//! The command-line commands. `main.rs` parses arguments and calls these.

pub mod advise;
pub mod convert;
pub mod diff;
pub mod estimate;
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

/// Where a command's answer goes: its text or its JSON to a writer, or its document to a
/// keeper (the MCP server, which answers with the document itself).
pub enum To<'o> {
    /// The answer in words, for people.
    Text(&'o mut dyn std::io::Write),
    /// The document as indented JSON.
    Json(&'o mut dyn std::io::Write),
    /// The document, given to this function.
    Keep(&'o mut dyn FnMut(crate::query::documents::Document<'_>) -> anyhow::Result<()>),
}

impl<'o> To<'o> {
    /// Text, or with `json` the JSON, to `out`.
    pub fn new(json: bool, out: &'o mut dyn std::io::Write) -> Self {
        if json { To::Json(out) } else { To::Text(out) }
    }

    /// Gives `document` to be printed as JSON or kept; for text, the writer to say it in
    /// (`None`: nothing more to do).
    pub fn document(
        &mut self,
        document: crate::query::documents::Document<'_>,
    ) -> anyhow::Result<Option<&mut dyn std::io::Write>> {
        match self {
            To::Text(out) => Ok(Some(&mut **out)),
            To::Json(out) => {
                serde_json::to_writer_pretty(&mut **out, &document)?;
                writeln!(out)?;
                Ok(None)
            }
            To::Keep(keep) => {
                keep(document)?;
                Ok(None)
            }
        }
    }
}
