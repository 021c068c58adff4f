//! Memory that grows every iteration, in words: the finding `info`, `advise`, `diff` and the
//! app say the same way.

use crate::growth::{Growth, Iterations, Nature};
use crate::query::units::{bytes, count, rough_duration};

/// Where the iterations came from, as a parenthesis.
fn source(g: &Growth) -> String {
    let mut text = match &g.iterations {
        Iterations::Spans => "recorded iterations".to_owned(),
        Iterations::ModelCalls => "calls of the model, each an iteration since nothing goes backward".to_owned(),
        Iterations::Pattern { site } => format!("iterations found from an allocation repeating evenly at {site}"),
    };
    if g.unrecorded_iterations > 0 {
        text.push_str(&format!(
            "; {} with a stretch not recorded left out",
            if g.unrecorded_iterations == 1 {
                "1 iteration".to_owned()
            } else {
                format!("{} iterations", count(g.unrecorded_iterations))
            }
        ));
    }
    text
}

/// One line: growth per iteration, or steady.
pub fn growth_headline(g: &Growth) -> String {
    if !g.grows {
        return format!(
            "steady over {} {}: allocated memory at the start of each iteration does not grow after the first",
            count(g.count),
            source(g)
        );
    }
    let numbers = format!(
        "{} at the start of iteration 2, {} at the end of iteration {} ({})",
        bytes(g.steady_start_bytes),
        bytes(g.end_bytes),
        count(g.count),
        source(g)
    );
    match g.nature {
        Nature::Kept => format!("memory grows {} per iteration: {numbers}", bytes(g.bytes_per_iteration)),
        Nature::KvCache => format!(
            "a key/value cache grows {} per iteration, as generation does (no backward pass; the attention's keys and \
             values kept for the next step): {numbers}",
            bytes(g.bytes_per_iteration)
        ),
        Nature::WorkingSet => format!(
            "each iteration works on more, {} more each time, and keeps nothing past the next (a sequence or batch that \
             grows, not memory kept): {numbers}",
            bytes(g.bytes_per_iteration)
        ),
    }
}

/// What is said of a device whose growth cannot be told.
pub const GROWTH_UNTOLD: &str = "too few iterations (or no repeating pattern) to tell whether memory grows";

/// The finding in full: the headline, what accumulates, and when the device would be full.
/// `device` names the device ("cuda:0").
pub fn growth_lines(g: &Growth, device: &str) -> Vec<String> {
    let mut lines = vec![growth_headline(g)];
    if !g.grows {
        return lines;
    }
    if g.sites.is_empty() && g.nature == Nature::Kept {
        lines.push(
            "no block allocated in one iteration outlives the next: the growth is memory carried into the next \
             iteration and freed later, each time larger (a tensor regrown by torch.cat and kept, say), not blocks \
             kept"
                .to_owned(),
        );
    }
    if g.nature == Nature::KvCache {
        lines.push(
            "bounded by the sequence length (max_new_tokens, the model's context) or a preallocated static cache; \
             what it costs per token is what is kept per iteration below"
                .to_owned(),
        );
    }
    // Sites keeping under 1% of the growth are counted, not listed.
    let listed = g.sites.iter().take(5).take_while(|s| s.bytes_per_iteration * 100 >= g.bytes_per_iteration).count();
    for site in g.sites.iter().take(listed) {
        let blocks = site.blocks_per_iteration;
        // Fewer than one block an iteration: one every so many iterations.
        let blocks = if blocks >= 0.95 && (blocks - blocks.round()).abs() < 0.05 {
            let whole = blocks.round();
            format!(" in {whole:.0} block{}", if whole == 1.0 { "" } else { "s" })
        } else if blocks >= 0.95 {
            format!(" in {blocks:.1} blocks")
        } else if blocks > 0.0 {
            format!(" in a block every {} iterations", count((1.0 / blocks).round() as usize))
        } else {
            String::new()
        };
        let what = if site.kv_cache && g.nature == Nature::Kept { " (a key/value cache)" } else { "" };
        lines.push(format!("kept every iteration: {}{blocks} at {}{what}", bytes(site.bytes_per_iteration), site.site));
    }
    if g.sites.len() > listed {
        let rest: u64 = g.sites[listed..].iter().map(|s| s.bytes_per_iteration).sum();
        lines.push(format!("and {} more sites keeping {} per iteration", count(g.sites.len() - listed), bytes(rest)));
    }
    match g.reach {
        Some(r) => lines.push(format!(
            "at this rate {device}'s {} is full after about {} more iterations ({} at {} per iteration)",
            bytes(r.device_bytes),
            count(usize::try_from(r.iterations).unwrap_or(usize::MAX)),
            rough_duration(r.after_ns),
            crate::query::units::duration_ns(g.iteration_ns)
        )),
        None => lines
            .push(format!("when {device} would be full cannot be said: the trace does not say how much memory it has")),
    }
    if g.nature == Nature::Kept {
        lines.push(
            "usual causes: a loss or output kept with its graph (append loss.item() or .detach()), tensors kept in \
             a list or dict for logging, a cache that never evicts"
                .to_owned(),
        );
    }
    lines
}
