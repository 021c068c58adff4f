//! Containers around the formats: gzip and zstd, memory_viz HTML pages, and how deep they may
//! nest; each read as what it holds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use vramscope_trace_format::import::Wrapper;
use vramscope_trace_format::import::container::Compression;
use vramscope_trace_format::{Imported, NoProgress, import};

fn fixture(path: &str) -> Vec<u8> {
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map(std::path::PathBuf::from).unwrap_or_default();
    std::fs::read(root.join("../../shared/fixtures").join(path)).expect("fixture")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(data).unwrap();
    encoder.finish().unwrap()
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=".repeat(3 - chunk.len()));
    }
    out
}

fn same_trace(a: &Imported, b: &Imported) {
    assert_eq!(a.trace.events, b.trace.events);
    assert_eq!(a.trace.segments, b.trace.segments);
    assert_eq!(a.trace.annotations, b.trace.annotations);
    assert_eq!(a.trace.counters, b.trace.counters);
    assert_eq!(a.format, b.format);
}

#[test]
fn gzip_and_zstd_hold_any_format() {
    for path in [
        "pytorch-snapshots/mosaic_output.pickle",
        "torch-profiler/mlp_adam_cpu.chrome_trace.json",
        "torch-profiler/mlp_adam_cpu.memory_timeline.json",
    ] {
        let plain_bytes = fixture(path);
        let plain = import(&plain_bytes, &NoProgress).unwrap();
        let gz = import(&gzip(&plain_bytes), &NoProgress).unwrap();
        same_trace(&plain, &gz);
        assert_eq!(gz.wrappers, [Wrapper::Compressed(Compression::Gzip)], "{path}");
        let zst = import(&zstd::bulk::compress(&plain_bytes, 3).unwrap(), &NoProgress).unwrap();
        same_trace(&plain, &zst);
        assert_eq!(zst.wrappers, [Wrapper::Compressed(Compression::Zstd)], "{path}");
    }
}

#[test]
fn a_memory_viz_page_holds_its_snapshot() {
    // The template of torch/cuda/_memory_viz.py (2.1 to 2.15): the pickle padded with zero bytes
    // to a multiple of 3, base64, in `local_files`.
    let mut pickle = fixture("pytorch-snapshots/mosaic_output.pickle");
    let plain = import(&pickle, &NoProgress).unwrap();
    pickle.resize(pickle.len() + 3 - pickle.len() % 3, 0);
    let page = format!(
        "\n<!DOCTYPE html>\n<html>\n<head>\n</head>\n<body>\n<script type=\"module\">\nimport {{add_local_files}} from \
         \"https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js\"\nconst local_files = \
         [{{\"name\": \"snapshot.pickle\", \"base64\": \"{}\"}}]\nadd_local_files(local_files, 'Active Memory \
         Timeline')\n</script>\n</body>\n",
        base64(&pickle)
    );
    let from_page = import(page.as_bytes(), &NoProgress).unwrap();
    same_trace(&plain, &from_page);
    assert_eq!(from_page.wrappers, [Wrapper::MemoryVizHtml]);
    // Gzipped, as people send pages.
    let packed = import(&gzip(page.as_bytes()), &NoProgress).unwrap();
    same_trace(&plain, &packed);
    assert_eq!(packed.wrappers, [Wrapper::Compressed(Compression::Gzip), Wrapper::MemoryVizHtml]);
}

/// Valid files far more repetitive than any real trace (160 MiB of padding, more than 64 times
/// the compressed file plus 64 MiB, the bound before): one layer of gzip is never refused for
/// its ratio. JSON is parsed as it is inflated; a page is held whole, within the machine's memory.
#[test]
fn one_layer_of_gzip_is_never_refused_for_its_ratio() {
    let padding = vec![b' '; 160 << 20];
    let json = fixture("torch-profiler/mlp_adam_cpu.chrome_trace.json");
    let end = json.iter().rposition(|&b| b == b'}').unwrap();
    let padded = [&json[..end], &padding, &json[end..]].concat();
    let packed = gzip(&padded);
    assert!(padded.len() as u64 > 64 * packed.len() as u64 + (64 << 20), "{} from {}", padded.len(), packed.len());
    same_trace(&import(&json, &NoProgress).unwrap(), &import(&packed, &NoProgress).unwrap());

    let pickle = fixture("pytorch-snapshots/mosaic_output.pickle");
    let mut page = pickle.clone();
    page.resize(page.len() + 3 - page.len() % 3, 0);
    let page = format!(
        "<!DOCTYPE html>\n<html>\n<body>\n<script type=\"module\">\nconst local_files = [{{\"name\": \
         \"snapshot.pickle\", \"base64\": \"{}\"}}]\nadd_local_files(local_files, 'Active Memory Timeline')\n</script>\n",
        base64(&page)
    );
    let padded = [page.as_bytes(), &padding, b"</body>\n</html>\n"].concat();
    let packed = gzip(&padded);
    assert!(padded.len() as u64 > 64 * packed.len() as u64 + (64 << 20));
    let from_page = import(&packed, &NoProgress).unwrap();
    same_trace(&import(&pickle, &NoProgress).unwrap(), &from_page);
    assert_eq!(from_page.wrappers, [Wrapper::Compressed(Compression::Gzip), Wrapper::MemoryVizHtml]);
}

#[test]
fn nesting_is_bounded_and_damage_is_named() {
    let mut data = fixture("torch-profiler/mlp_adam_cpu.memory_timeline.json");
    for _ in 0..3 {
        data = gzip(&data);
    }
    import(&data, &NoProgress).expect("three layers are fine");
    let message = import(&gzip(&data), &NoProgress).unwrap_err().to_string();
    assert!(message.contains("wrapped more than 3 times"), "{message}");
    let whole = gzip(&fixture("torch-profiler/mlp_adam_cpu.chrome_trace.json"));
    let message = import(&whole[..whole.len() / 2], &NoProgress).unwrap_err().to_string();
    assert!(message.contains("cannot be decompressed") && message.contains("truncated"), "{message}");
}

#[test]
fn old_pickle_protocols_are_recognised_without_a_header() {
    use vramscope_trace_format::import::{Detected, detect};
    assert_eq!(detect(b"(dp0\nVsegments\np1\n(lp2\nsa.").unwrap(), Detected::Pickle);
    assert_eq!(detect(b"}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02u.").unwrap(), Detected::Pickle);
    // Text that merely starts with a parenthesis is not a pickle.
    assert!(detect(b"(see the notes below)\n").is_err());
    assert_eq!(detect(b"  <!DOCTYPE html><html>").unwrap(), Detected::Html);
}
