//! The `vramscope` command.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// GPU memory profiler and trace analyzer for deep-learning workloads.
///
/// Reads PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`), PyTorch profiler output
/// (Chrome traces recorded with `profile_memory=True`, and memory timelines in `.json` or
/// `raw.json.gz` form) and vramscope's own `.vtrace` files. The format is recognised from the
/// file's content, whatever its name.
#[derive(Parser, Debug)]
#[command(name = "vramscope", version, about, long_about, arg_required_else_help = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print what a trace holds: peaks, the final segment state, fragmentation.
    ///
    /// For each device: the peak of allocated bytes (blocks handed to tensors, from alloc until
    /// their free completes) and of reserved bytes (segments held from the driver), what was
    /// alive at the peak by category, and the allocator's final segment state with its free space
    /// split into internal waste (rounding inside allocated blocks) and external free blocks.
    /// Memory allocated before a snapshot's trace window began is counted.
    Info {
        /// The trace to read.
        file: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Convert any supported file to a compact `.vtrace`.
    ///
    /// The output is written to a temporary file beside it and renamed into place when complete,
    /// so an interrupted conversion never leaves a half-written trace.
    Convert {
        /// The file to convert.
        file: PathBuf,
        /// Where to write the `.vtrace`.
        #[arg(short, long, value_name = "OUT.vtrace")]
        output: PathBuf,
        /// Replace OUT if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// Exit status when a file cannot be read or a command fails.
const EXIT_ERROR: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Info { file, json } => vramscope::cli::info::run(&file, json, &mut stdout),
        Command::Convert { file, output, force } => vramscope::cli::convert::run(&file, &output, force, &mut stdout),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}
