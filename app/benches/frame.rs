//! Time to lay out one frame of the app on a 10M-event trace, zoomed out and deep in.
//!
//! ```text
//! cargo bench -p vramscope --bench frame [-- EVENTS]
//! ```
//!
//! The app runs headless in egui_kittest's harness: each step is a full egui pass (input,
//! layout of every panel, the timeline's level-of-detail query, shape generation). Rasterising
//! is left out: it is the GPU's (or llvmpipe's) work and does not depend on the trace.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use vramscope::gui::document::Document;
use vramscope::gui::{FilePicker, Settings, View, VramscopeApp};
use vramscope::load::LoadedTrace;
use vramscope_trace_format::{
    Annotation, AnnotationKind, DeviceId, Event, EventKind, Frame, ProcessId, SourceFormat, StackId, Trace,
};

struct NoDialog;

impl FilePicker for NoDialog {
    fn pick(&mut self) -> Option<PathBuf> {
        None
    }
}

/// Allocations and frees over 4,000 stacks (some in `forward`, some in `torch/optim`), a
/// segment now and then, and an iteration / forward / backward band.
fn synthetic_trace(events: usize) -> Trace {
    let mut trace = Trace::default();
    let mut stacks = Vec::new();
    for i in 0..4000u32 {
        let (file, function) = match i % 3 {
            0 => ("model.py", "forward".to_owned()),
            1 => ("/venv/torch/optim/adam.py", "_init_group".to_owned()),
            _ => ("train.py", format!("step_{i}")),
        };
        let file = trace.interner.string(file);
        let function = trace.interner.string(&function);
        let frame = trace.interner.frame(Frame { function, file, line: i });
        stacks.push(trace.interner.stack(&[frame]));
    }
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let start_ns = 1_700_000_000_000_000_000i64;
    let mut time_ns = start_ns;
    let mut next_address = 0x7f00_0000_0000u64;
    while trace.events.len() < events {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        time_ns += (state % 5_000) as i64;
        if state.is_multiple_of(997) {
            trace.events.push(Event::new(EventKind::SegmentAlloc, time_ns, 0, next_address, 20 << 20));
            next_address += 20 << 20;
        } else if live.len() > 2_000 || (!live.is_empty() && state.is_multiple_of(3)) {
            let (address, size) = live.swap_remove((state >> 20) as usize % live.len());
            trace.events.push(Event::new(EventKind::FreeCompleted, time_ns, 0, address, size));
        } else {
            let size = 512 * (1 + (state >> 40) % 8192);
            let mut e = Event::new(EventKind::Alloc, time_ns, 0, next_address, size);
            e.stack = stacks.get((state >> 8) as usize % stacks.len()).copied().unwrap_or(StackId(0));
            next_address += size;
            live.push((e.address, size));
            trace.events.push(e);
        }
    }
    let iteration_ns = (time_ns - start_ns) / 200;
    for i in 0..200 {
        let at = start_ns + i * iteration_ns;
        for (kind, from, to, name) in [
            (AnnotationKind::Iteration, 0, 10, "iteration"),
            (AnnotationKind::Forward, 0, 4, "forward"),
            (AnnotationKind::Backward, 4, 8, "backward"),
            (AnnotationKind::OptimizerStep, 8, 10, "optimizer.step"),
        ] {
            let name = trace.interner.string(name);
            trace.annotations.push(Annotation {
                kind,
                device: Some(DeviceId(0)),
                process: ProcessId(0),
                start_ns: at + iteration_ns * from / 10,
                end_ns: at + iteration_ns * to / 10,
                name,
                stack: StackId(0),
            });
        }
    }
    trace
}

fn settle(harness: &mut Harness<'_, VramscopeApp>) {
    let started = Instant::now();
    while harness.state().session.is_analysing() && started.elapsed() < Duration::from_secs(120) {
        harness.step();
        std::thread::sleep(Duration::from_millis(5));
    }
    harness.run_steps(5);
}

/// Median and worst of `frames` steps, each with the pointer moved so nothing is cached.
fn time_frames(harness: &mut Harness<'_, VramscopeApp>, frames: usize) -> (Duration, Duration) {
    let mut times = Vec::with_capacity(frames);
    for i in 0..frames {
        harness.hover_at(egui::pos2(200.0 + (i % 900) as f32, 300.0));
        let started = Instant::now();
        harness.step();
        times.push(started.elapsed());
    }
    times.sort_unstable();
    (times[times.len() / 2], times[times.len() - 1])
}

fn main() {
    let events: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(10_000_000);
    let started = Instant::now();
    let trace = synthetic_trace(events);
    let built = started.elapsed();
    let loaded = LoadedTrace {
        trace,
        warnings: Vec::new(),
        path: PathBuf::from("synthetic.vtrace"),
        file_bytes: 0,
        format: SourceFormat::Vtrace,
        wrappers: Vec::new(),
    };
    let started = Instant::now();
    let doc = Document::build(loaded, Duration::ZERO);
    let analysed = started.elapsed();
    println!(
        "{} events: generated in {:.1} s, timeline and its index built in {:.0} ms",
        events,
        built.as_secs_f64(),
        analysed.as_secs_f64() * 1e3
    );
    let (first_ns, last_ns) = doc.devices[0].timeline.time_span_ns();
    let settings = Settings { view: View::Timeline, ..Settings::default() };
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1600.0, 1000.0))
        .build_ui_state(|ui, app: &mut VramscopeApp| app.ui(ui), VramscopeApp::new(settings, Box::new(NoDialog)));
    let ctx = harness.ctx.clone();
    harness.state_mut().set_document(&ctx, doc);
    settle(&mut harness);

    println!("| view | frames | median layout per frame | worst |");
    println!("|---|---|---|---|");
    let span = (last_ns - first_ns) as f64;
    let middle = first_ns as f64 + span / 2.0;
    for (name, range) in [
        ("zoomed out: all 10M events in 1,500 columns", None),
        ("1% of the trace (~100K events)", Some((middle, middle + span / 100.0))),
        ("deep in: ~20 events across the view", Some((middle, middle + span * 20.0 / events as f64))),
    ] {
        harness.state_mut().set_visible_time(range);
        harness.run_steps(3);
        let (median, worst) = time_frames(&mut harness, 200);
        println!("| {name} | 200 | {:.2} ms | {:.2} ms |", median.as_secs_f64() * 1e3, worst.as_secs_f64() * 1e3);
    }
}
