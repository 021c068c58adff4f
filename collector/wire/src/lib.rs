//! What `vramscope record`, the driver-level hook library and the PyTorch shim agree on, in one
//! place and with no dependencies (the hook links this and `libc`, nothing else):
//!
//! - [`record`]: the fixed-size records the hook appends for every driver call;
//! - [`ring`]: the flight recorder's file of fixed size those records go round in;
//! - [`env`](mod@env): the environment variables that connect the three;
//! - [`serve`]: the protocol that sends a recording to a viewer on another machine.

pub mod env;
pub mod record;
pub mod ring;
pub mod serve;

pub use record::{Api, MAGIC, RECORD_BYTES, Record};
