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
