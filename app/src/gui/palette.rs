//! Colours used everywhere a category appears, so a category looks the same in every view.

use egui::Color32;
use vramscope_trace_format::Category;

/// The colour of a category.
pub fn category_color(category: Category) -> Color32 {
    match category {
        Category::Parameter => Color32::from_rgb(0x4e, 0x79, 0xa7),
        Category::Gradient => Color32::from_rgb(0xf2, 0x8e, 0x2b),
        Category::OptimizerState => Color32::from_rgb(0xb0, 0x7a, 0xa1),
        Category::Activation => Color32::from_rgb(0x59, 0xa1, 0x4f),
        Category::Temporary => Color32::from_rgb(0xed, 0xc9, 0x48),
        Category::Input => Color32::from_rgb(0x76, 0xb7, 0xb2),
        Category::AllocatorCache => Color32::from_rgb(0xba, 0xb0, 0xac),
        Category::NonFramework => Color32::from_rgb(0x9c, 0x75, 0x5f),
        Category::AutogradDetail => Color32::from_rgb(0xff, 0x9d, 0xa7),
        Category::Unknown => Color32::from_rgb(0x8c, 0x8f, 0x99),
    }
}

/// The colour of a category by its discriminant.
pub fn category_color_index(index: usize) -> Color32 {
    Category::ALL.get(index).map_or(Color32::GRAY, |&c| category_color(c))
}

/// A human name for a category: `optimizer state`.
pub fn category_label(category: Category) -> &'static str {
    match category {
        Category::Parameter => "parameter",
        Category::Gradient => "gradient",
        Category::OptimizerState => "optimizer state",
        Category::Activation => "activation",
        Category::Temporary => "temporary",
        Category::Input => "input",
        Category::AllocatorCache => "allocator cache",
        Category::NonFramework => "non-framework",
        Category::AutogradDetail => "autograd detail",
        Category::Unknown => "unknown",
    }
}

/// The reserved-bytes line.
pub const RESERVED: Color32 = Color32::from_rgb(0xe1, 0x57, 0x59);
/// The requested-bytes line.
pub const REQUESTED: Color32 = Color32::from_rgb(0x2b, 0x8c, 0xbe);
/// Out-of-memory markers.
pub const OOM: Color32 = Color32::from_rgb(0xd6, 0x27, 0x28);
/// The selected instant.
pub const SELECTION: Color32 = Color32::from_rgb(0x1f, 0x9e, 0xff);
/// The peak marker.
pub const PEAK: Color32 = Color32::from_rgb(0xff, 0x5a, 0x36);
