//! The trace data model: plain data, interned behind typed ids.

pub mod annotation;
pub mod category;
pub mod counter;
pub mod event;
pub mod ids;
pub mod interner;
pub mod metadata;
pub mod oom;
pub mod range;
pub mod segment;
pub mod stream;
pub mod tag;
pub mod trace;
