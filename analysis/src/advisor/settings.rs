//! The allocator's settings as remedies: what `max_split_size_mb` and expandable segments would
//! reserve, replayed through the allocator's model, and what is reserved but not allocated at the
//! peak (fragmentation).

use vramscope_trace_format::{DeviceId, Trace};

use super::remedy::{Context, PAGE_BYTES};
use super::{FreeAtOom, SplitProjection, Unused};
use crate::allocator::AllocatorSettings;
use crate::{allocsim, instant};

/// Fragmentation: from the allocator's segments at the peak (and at the first OOM), what
/// expandable segments would give back.
pub(super) fn fragmentation(
    trace: &Trace,
    device: DeviceId,
    ctx: &Context,
    at_peak: &instant::Instant,
) -> Option<Unused> {
    let waste = ctx.waste_bytes();
    let peak_reserved = ctx.peak_reserved_bytes;
    if waste <= peak_reserved / 20 || waste <= PAGE_BYTES {
        return None;
    }
    let at_oom = trace.ooms.iter().filter(|o| o.device == device).min_by_key(|o| o.time_ns).map(|o| {
        let upto = trace.events.partition_point(|e| e.time_ns <= o.time_ns).checked_sub(1);
        let state = instant::instant(trace, device, upto, o.time_ns);
        FreeAtOom {
            requested_bytes: o.requested_bytes,
            free_bytes: state.total.free_external_bytes,
            largest_free_bytes: state.total.largest_free_bytes,
        }
    });
    Some(Unused {
        unused_bytes: waste,
        share_of_reserved: waste as f64 / peak_reserved as f64,
        rounding_bytes: ctx.internal_bytes,
        largest_free_bytes: at_peak.total.largest_free_bytes,
        // The allocator's model replayed with them where it is trusted, else the rule.
        expandable_gives_back_bytes: ctx.expandable_model.map_or_else(
            || waste.saturating_sub(ctx.internal_bytes + PAGE_BYTES),
            |m| peak_reserved.saturating_sub(m.projected_bytes()),
        ),
        at_oom,
    })
}

/// Traces with more allocations than this on the device are not replayed for `max_split_size`.
const MAX_SIMULATED_ALLOCATIONS: usize = 2_000_000;

/// The `max_split_size` settings tried.
const MAX_SPLIT_CANDIDATES_MB: [u64; 4] = [64, 128, 256, 512];

/// Replays the trace through the allocator's model under its own settings and with each
/// `max_split_size` of [`MAX_SPLIT_CANDIDATES_MB`]: the one that reserves least, if the run did not
/// set one, uses the caching allocator, and recorded its allocations.
pub(super) fn best_max_split(
    trace: &Trace,
    device: DeviceId,
    allocator: &AllocatorSettings,
    recorded: u64,
) -> Option<SplitProjection> {
    if allocator.expandable()
        || allocator.is_async()
        || allocator.max_split_size_bytes.is_some_and(|k| k.value.is_some())
    {
        return None;
    }
    // Five replays: bounded to keep `advise` on a huge trace in seconds.
    if !replayable(trace, device) {
        return None;
    }
    let baseline = allocsim::simulate(trace, device, allocsim::Settings::default()).peak_reserved_bytes;
    MAX_SPLIT_CANDIDATES_MB
        .iter()
        .map(|&mb| {
            let settings = allocsim::Settings { max_split_size_bytes: Some(mb << 20), ..allocsim::Settings::default() };
            SplitProjection {
                setting_bytes: mb << 20,
                recorded_bytes: recorded,
                simulated_baseline_bytes: baseline,
                simulated_bytes: allocsim::simulate(trace, device, settings).peak_reserved_bytes,
            }
        })
        .min_by_key(|p| (p.simulated_bytes, std::cmp::Reverse(p.setting_bytes)))
}

/// Replays the trace through the allocator's model under its own settings and with expandable
/// segments, if the run did not have them, uses the caching allocator, recorded its allocations,
/// and the model reserves what it reserved (within [`remedy::MODEL_TRUSTED_WITHIN`]).
pub(super) fn expandable_model(
    trace: &Trace,
    device: DeviceId,
    allocator: &AllocatorSettings,
    recorded: u64,
) -> Option<SplitProjection> {
    if allocator.expandable() || allocator.is_async() || !replayable(trace, device) {
        return None;
    }
    let own = allocator.max_split_size_bytes.and_then(|k| k.value);
    let settings = allocsim::Settings { max_split_size_bytes: own, ..allocsim::Settings::default() };
    let baseline = allocsim::simulate(trace, device, settings.clone()).peak_reserved_bytes;
    let expandable = allocsim::Settings { expandable_segments: true, ..settings };
    let projection = SplitProjection {
        setting_bytes: 0,
        recorded_bytes: recorded,
        simulated_baseline_bytes: baseline,
        simulated_bytes: allocsim::simulate(trace, device, expandable).peak_reserved_bytes,
    };
    projection.trusted().then_some(projection)
}

/// Whether the trace's allocations can be replayed through the allocator's model: some, and not
/// too many ([`MAX_SIMULATED_ALLOCATIONS`]).
pub(super) fn replayable(trace: &Trace, device: DeviceId) -> bool {
    let allocations = trace
        .events
        .iter()
        .filter(|e| e.device == device && e.kind == vramscope_trace_format::EventKind::Alloc)
        .count();
    allocations > 0 && allocations <= MAX_SIMULATED_ALLOCATIONS
}
