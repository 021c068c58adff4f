//! The colour and the name of each category, shared by the app and the reports so a category looks the same
//! everywhere.

use vramscope_trace_format::Category;

/// A category's colour as RGB.
pub fn category_rgb(category: Category) -> (u8, u8, u8) {
    match category {
        Category::Parameter => (0x4e, 0x79, 0xa7),
        Category::Gradient => (0xf2, 0x8e, 0x2b),
        Category::OptimizerState => (0xb0, 0x7a, 0xa1),
        Category::Activation => (0x59, 0xa1, 0x4f),
        Category::Temporary => (0xed, 0xc9, 0x48),
        Category::Input => (0x76, 0xb7, 0xb2),
        Category::AllocatorCache => (0xba, 0xb0, 0xac),
        Category::NonFramework => (0x9c, 0x75, 0x5f),
        Category::AutogradDetail => (0xff, 0x9d, 0xa7),
        Category::Unknown => (0x8c, 0x8f, 0x99),
    }
}

/// The reserved-bytes line.
pub const RESERVED_RGB: (u8, u8, u8) = (0xe1, 0x57, 0x59);
/// The requested-bytes line.
pub const REQUESTED_RGB: (u8, u8, u8) = (0x2b, 0x8c, 0xbe);
