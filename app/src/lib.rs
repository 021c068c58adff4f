//! vramscope: a GPU memory profiler and trace analyzer for deep-learning workloads.
//!
//! The binary is thin; this library holds the command-line commands ([`cli`]), the loading of
//! files with progress ([`load`]), the analysis' query layer ([`query`]), plain functions over
//! the trace model of `vramscope-trace-format`, the desktop app ([`gui`]) and the server that
//! answers coding agents ([`mcp`]).

/// The analysis as the faces see it: its query layer (the questions, the documents that answer
/// them and their words). The analysis crate's other modules are its own: a face cannot reach
/// them.
pub use vramscope_analysis::query;
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
