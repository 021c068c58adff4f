//! Colours used everywhere a category appears, so a category looks the same in every view.

use egui::Color32;
use vramscope_trace_format::Category;

/// The colour of a category.
pub fn category_color(category: Category) -> Color32 {
    let (r, g, b) = crate::colors::category_rgb(category);
    Color32::from_rgb(r, g, b)
}

/// The colour of a category by its discriminant.
pub fn category_color_index(index: usize) -> Color32 {
    Category::ALL.get(index).map_or(Color32::GRAY, |&c| category_color(c))
}

pub use crate::words::category_label;

/// Processes on a device (the Whole GPU view), recorded ones in turn: colours of their own, not
/// the categories'.
pub const PROCESSES: [Color32; 5] = [
    Color32::from_rgb(0x4c, 0x72, 0xb0),
    Color32::from_rgb(0x2a, 0x9d, 0x8f),
    Color32::from_rgb(0x8e, 0x6c, 0xc9),
    Color32::from_rgb(0xd4, 0xa0, 0x17),
    Color32::from_rgb(0xc9, 0x4f, 0x7c),
];
/// A process the recording did not see.
pub const NOT_RECORDED: Color32 = Color32::from_gray(140);

/// The reserved-bytes line.
pub const RESERVED: Color32 =
    Color32::from_rgb(crate::colors::RESERVED_RGB.0, crate::colors::RESERVED_RGB.1, crate::colors::RESERVED_RGB.2);
/// The requested-bytes line.
pub const REQUESTED: Color32 =
    Color32::from_rgb(crate::colors::REQUESTED_RGB.0, crate::colors::REQUESTED_RGB.1, crate::colors::REQUESTED_RGB.2);
/// Out-of-memory markers.
pub const OOM: Color32 = Color32::from_rgb(0xd6, 0x27, 0x28);
/// The selected instant.
pub const SELECTION: Color32 = Color32::from_rgb(0x1f, 0x9e, 0xff);
/// Allocated memory drawn before its categories are worked out (not a category: none of their
/// colours).
pub const ALLOCATED_PENDING: Color32 = Color32::from_rgb(0x5f, 0x74, 0x8f);
/// The peak marker.
pub const PEAK: Color32 = Color32::from_rgb(0xff, 0x5a, 0x36);
