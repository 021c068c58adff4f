//! The `vramscope` command.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod commands;

use commands::{Cli, Command, ConnectArgs, OpenArgs, ThemeArg, TorchSource};

/// Exit status when a file cannot be read or a command fails.
const EXIT_ERROR: u8 = 2;
/// Exit status of `diff` when a gate fails.
const EXIT_GATE_FAILED: u8 = 1;

fn open(args: OpenArgs, compare: Option<PathBuf>, started: std::time::Instant) -> anyhow::Result<()> {
    let OpenArgs { files, follow, connect, range, window } = args;
    if connect.connect.is_some() && (follow.is_some() || !files.is_empty()) {
        anyhow::bail!("--connect follows a run served from elsewhere: give it without files or --follow");
    }
    // What to follow is found (or connected to) before the window opens, so a mistake is said here.
    let copying = connect.start()?;
    let follow = match &copying {
        Some((source, _)) => Some(source.clone()),
        None => follow.map(|arg| vramscope::gui::follow::Source::resolve(arg.as_deref())).transpose()?,
    };
    if follow.is_some() && range.range.is_some() {
        anyhow::bail!("--follow shows the whole run as it grows; --range reads part of a finished trace");
    }
    for path in files.iter().chain(compare.iter()).filter(|p| !vramscope::sample::is_sample(p)) {
        // Say so at once rather than in a window.
        std::fs::metadata(path).map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
    }
    let view = window.view;
    if compare.is_some() && files.len() > 1 {
        anyhow::bail!("compare takes two traces, not runs of several files");
    }
    vramscope::gui::run(vramscope::gui::GuiOptions {
        files,
        compare,
        screenshot: window.screenshot,
        view,
        size: window.size,
        dark_mode: window.theme.map(|t| matches!(t, ThemeArg::Dark)),
        started: Some(started),
        range: range.range,
        follow,
    })
}

/// `vramscope record`: a trace, or (`--flight`) a flight recorder's rings; the workload's exit code.
fn run_record(record: Command) -> anyhow::Result<i32> {
    let Command::Record { output, live, serve, tui, force, torch, sample_devices, flight, command } = record else {
        anyhow::bail!("not a record command");
    };
    if let Some(spec) = flight {
        return vramscope::cli::record::run_flight(output.as_deref(), force, &spec, &command);
    }
    let torch = match torch {
        TorchSource::Auto => "auto",
        TorchSource::Cuda => "cuda",
        TorchSource::Cpu => "cpu",
        TorchSource::Off => "off",
    };
    let watch = match (live, tui) {
        (true, _) => vramscope::cli::record::Watch::Window,
        (false, true) => vramscope::cli::record::Watch::Terminal,
        (false, false) => vramscope::cli::record::Watch::None,
    };
    let how = vramscope::cli::record::How { torch, watch, serve: serve.as_deref(), sampling: sample_devices };
    vramscope::cli::record::run(output.as_deref(), force, &how, &command)
}

fn main() -> ExitCode {
    let started = std::time::Instant::now();
    vramscope::memory::configure();
    let cli = Cli::parse();
    // A limit that is not a size would otherwise be passed over without a word.
    if let Some(Err(e)) = vramscope_trace_format::memory::Limit::from_environment() {
        return exit_with(anyhow::anyhow!("{e}"));
    }
    // Buffered: a large JSON is written in blocks, not a system call per line.
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let result = match cli.command {
        None => open(cli.open, None, started),
        Some(Command::Open(args)) => open(args, None, started),
        Some(Command::Compare { a, b, range, window }) => {
            let connect = ConnectArgs::default();
            open(OpenArgs { files: vec![a], follow: None, connect, range, window }, Some(b), started)
        }
        Some(Command::Info { files, json, oom: true, range, .. }) => {
            vramscope::cli::info::run_oom(&files, json, range.range, &mut stdout)
        }
        Some(Command::Info { files, json, at, blocks, all_phases, range, .. }) => {
            let at = at.as_ref().map(|(t, w)| (t.as_str(), w));
            let options = vramscope::cli::info::Options { json, at, blocks, all_phases, range: range.range };
            vramscope::cli::info::run_paths(&files, &options, &mut stdout)
        }
        Some(Command::Diff {
            a,
            b,
            json,
            fail_if_peak_grows,
            fail_if_category_grows,
            fail_if_phase_grows,
            device,
            all_phases,
            range,
        }) => {
            use vramscope::cli::diff::Gate;
            let gates: Vec<Gate> = fail_if_peak_grows
                .map(Gate::PeakGrows)
                .into_iter()
                .chain(fail_if_category_grows.into_iter().map(|(c, p)| Gate::CategoryGrows(c, p)))
                .chain(fail_if_phase_grows.into_iter().map(Gate::PhaseGrows))
                .collect();
            let options = vramscope::cli::diff::Options { json, gates: &gates, device, all_phases, range };
            match vramscope::cli::diff::run(&a, &b, &options, &mut stdout) {
                Ok(true) => Ok(()),
                Ok(false) => {
                    return match stdout.flush() {
                        Ok(()) => ExitCode::from(EXIT_GATE_FAILED),
                        Err(e) => exit_with(anyhow::Error::from(e)),
                    };
                }
                Err(e) => Err(e),
            }
        }
        Some(Command::Report { file, file2, output, force, json, blocks, range }) => {
            let files: Vec<PathBuf> = std::iter::once(file).chain(file2).collect();
            let options = vramscope::cli::report::Options { force, range: range.range, blocks };
            vramscope::cli::report::run(&files, &output, options, &mut vramscope::cli::To::new(json, &mut stdout))
        }
        Some(record @ Command::Record { .. }) => match run_record(record) {
            Ok(code) => return ExitCode::from(u8::try_from(code).unwrap_or(1)),
            Err(e) => Err(e),
        },
        Some(Command::Estimate { gpu, device_memory, gpus, context, output, force, json, sweep, command }) => {
            let options = vramscope::cli::estimate::Options {
                gpu: gpu.as_deref(),
                device_memory,
                gpus,
                output: output.as_deref(),
                force,
                context_bytes: context,
                json,
                sweep,
            };
            match vramscope::cli::estimate::run(&options, &command, &mut stdout) {
                Ok(code) => {
                    return match stdout.flush() {
                        Ok(()) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                        Err(e) => exit_with(anyhow::Error::from(e)),
                    };
                }
                Err(e) => Err(e),
            }
        }
        Some(Command::Run { oom_dir, command }) => match command.split_first() {
            None => {
                Err(anyhow::anyhow!("nothing to run: give the command after --, e.g. vramscope run -- python train.py"))
            }
            Some((program, args)) => match vramscope_collector::session::run_capturing_oom(program, args, &oom_dir) {
                Ok(status) => {
                    let code = vramscope_collector::session::exit_code(status);
                    return ExitCode::from(u8::try_from(code).unwrap_or(1));
                }
                Err(e) => Err(e.into()),
            },
        },
        Some(Command::Advise { file, json, gpus, target_bytes, device, with, batch, seq_len, range }) => {
            use vramscope::query::advisor::scaling::Dimension;
            let scaling = (!with.is_empty()).then(|| {
                let (dimension, sizes) =
                    if batch.is_empty() { (Dimension::Sequence, seq_len) } else { (Dimension::Batch, batch) };
                vramscope::cli::advise::Scaling { dimension, sizes, others: with }
            });
            let scaling = scaling.as_ref();
            let options = vramscope::cli::advise::Options {
                json,
                gpus,
                target: target_bytes,
                device,
                scaling,
                range: range.range,
            };
            vramscope::cli::advise::run(&file, &options, &mut stdout)
        }
        Some(Command::Export { files, output, format, force, range }) => {
            vramscope::cli::export::run(&files, &output, format, force, range.range, &mut stdout)
        }
        Some(Command::Convert { file, output, force, range }) => {
            vramscope::cli::convert::run(&file, &output, force, range.range, &mut stdout)
        }
        Some(Command::Top { source, connect }) => match connect.start() {
            Ok(Some((source, _copying))) => vramscope::tui::run(source, None),
            Ok(None) => vramscope::follow::Source::resolve(source.as_deref())
                .and_then(|source| vramscope::tui::run(source, None)),
            Err(e) => Err(e),
        },
        Some(Command::Serve { source, addr, token, no_token }) => {
            vramscope::cli::serve::run(source.as_deref(), &addr, token, no_token)
        }
        // Standard output is the protocol's: nothing else is written to it.
        Some(Command::Mcp) => vramscope::mcp::serve_stdio(),
        Some(Command::Schema { document, list }) => vramscope::cli::schema::run(document.as_deref(), list, &mut stdout),
    };
    match result.and_then(|()| stdout.flush().map_err(anyhow::Error::from)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => exit_with(error),
    }
}

/// The exit for an error: quiet when the reader of our output went away, else said.
fn exit_with(error: anyhow::Error) -> ExitCode {
    // The reader of our output went away (`vramscope info x | head`): nothing to say.
    if error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
    {
        return ExitCode::SUCCESS;
    }
    eprintln!("error: {error:#}");
    ExitCode::from(EXIT_ERROR)
}
