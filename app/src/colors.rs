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

#[cfg(test)]
mod python_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// The Python package says bytes and categories as the command does: its `format_bytes` is
    /// `units::bytes` on every order of magnitude and at each rounding edge, and its category names
    /// and colours are `words::category_label` and the app's palette.
    #[test]
    fn the_python_package_says_bytes_and_categories_as_the_command_does() {
        use std::process::Command;

        use vramscope_e2e::{repo_root, torch_python};
        use vramscope_trace_format::Category;

        use crate::query::words::category_label;

        let mut sizes: Vec<u64> = vec![0, 1, 512, 1023, 1024, 1025, 1536, 10_239, 10_240, 102_399, 102_400, 1_048_575];
        for shift in [10u32, 20, 30, 40, 50, 60] {
            let unit = 1u64 << shift;
            for factor in [1u64, 9, 10, 99, 100, 999, 1000, 1023] {
                sizes.push(unit.saturating_mul(factor));
                sizes.push(unit.saturating_mul(factor).saturating_sub(1));
                sizes.push(unit.saturating_mul(factor).saturating_add(unit / 200));
            }
        }
        sizes.push(u64::MAX);
        let categories: Vec<(String, String, String)> = Category::ALL
            .iter()
            .map(|&c| {
                let (r, g, b) = super::category_rgb(c);
                (c.name().to_owned(), category_label(c).to_owned(), format!("#{r:02x}{g:02x}{b:02x}"))
            })
            .collect();
        let code = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from vramscope._summary import _CATEGORIES, format_bytes
sizes = json.loads(sys.argv[2])
print(json.dumps({"bytes": [format_bytes(s) for s in sizes],
                  "categories": {name: list(v) for name, v in _CATEGORIES.items()}}))
"#;
        let python = repo_root().join("python");
        let output = Command::new(torch_python())
            .arg("-c")
            .arg(code)
            .arg(&python)
            .arg(serde_json::to_string(&sizes).unwrap_or_default())
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}"));
        for (i, &size) in sizes.iter().enumerate() {
            assert_eq!(said["bytes"][i].as_str(), Some(crate::units::bytes(size).as_str()), "{size} bytes");
        }
        let python_categories = said["categories"].as_object().map(|c| c.len()).unwrap_or_default();
        assert_eq!(python_categories, categories.len(), "the package names every category, and no other");
        for (name, label, colour) in categories {
            let entry = &said["categories"][&name];
            assert_eq!(entry[0].as_str().map(str::to_lowercase).as_deref(), Some(colour.as_str()), "{name}'s colour");
            assert_eq!(entry[1].as_str(), Some(label.as_str()), "{name}'s label");
        }
    }
}
