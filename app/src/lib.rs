//! vramscope: a GPU memory profiler and trace analyzer for deep-learning workloads.
//!
//! The binary is thin; this library holds the command-line commands ([`cli`]), the loading of
//! files with progress ([`load`]), the analysis ([`analysis`]), which is plain functions over
//! the trace model of `vramscope-trace-format`, the desktop app ([`gui`]) and the server that
//! answers coding agents ([`mcp`]).

/// The analysis (the `vramscope-analysis` crate), under the name the app has always used.
pub use vramscope_analysis as analysis;
/// Units and words: the query layer's, under the names the app has always used.
pub use vramscope_analysis::query::{units, words};
pub mod atomic;
pub mod cli;
pub mod colors;
pub mod follow;
pub mod gui;
pub mod load;
pub mod mapped;
pub mod mcp;
pub mod memory;
pub mod report;
pub mod runs;
pub mod sample;
pub mod serve;
pub mod tui;
pub mod vtrace_out;
