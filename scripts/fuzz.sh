#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS (default 60), seeded from the shared fixtures.
# Installs cargo-fuzz when missing. The toolchain here is stable, so RUSTC_BOOTSTRAP lets
# cargo-fuzz pass its flags; no sanitizer is needed because the importers contain no unsafe code.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail

cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(snapshot snapshot_structured chrome_trace memory_timeline vtrace vtrace_structured serve_frames)

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --version 0.13.2
fi

export RUSTC_BOOTSTRAP=1
target_dir="${FUZZ_TARGET_DIR:-/var/tmp/vramscope-fuzz-target}"
corpus_root="$(mktemp -d)"
trap 'rm -rf "$corpus_root"' EXIT

fixtures=../shared/fixtures
mkdir -p "$corpus_root"/{snapshot,snapshot_structured,chrome_trace,memory_timeline,vtrace,vtrace_structured,serve_frames}
cp "$fixtures"/pytorch-snapshots/mosaic_output.pickle "$corpus_root/snapshot/" 2>/dev/null || true
cp "$fixtures"/pytorch-snapshots/stanford_cs336_a2_memory_snapshot.pickle "$corpus_root/snapshot/" 2>/dev/null || true
head -c 65536 "$fixtures"/torch-profiler/mlp_adam_cpu.chrome_trace.json > "$corpus_root/chrome_trace/head.json" 2>/dev/null || true
cp "$fixtures"/torch-profiler/mlp_adam_cpu.memory_timeline.json "$corpus_root/memory_timeline/" 2>/dev/null || true
cp "$fixtures"/torch-profiler/mlp_adam_cpu.memory_timeline.raw.json.gz "$corpus_root/memory_timeline/" 2>/dev/null || true
# The memory_timeline target also runs `import` on its input: containers and HTML pages reach
# every importer through it.
gzip -c "$corpus_root/chrome_trace/head.json" > "$corpus_root/memory_timeline/head.json.gz" 2>/dev/null || true
printf '<!DOCTYPE html>\n<script>const local_files = [{"name": "snapshot.pickle", "base64": "%s"}]</script>\n' \
    "$(head -c 3000 "$fixtures"/pytorch-snapshots/mosaic_output.pickle | base64 -w0)" \
    > "$corpus_root/memory_timeline/page.html" 2>/dev/null || true
cp trace-format/tests/fixtures/v1/small.vtrace "$corpus_root/vtrace/"
# A hello, a have and a data frame, as a viewer and a server send them.
python3 - "$corpus_root/serve_frames/frames.bin" <<'EOF_SEED'
import struct, sys
def frame(kind, payload):
    return bytes([kind]) + struct.pack("<I", len(payload)) + payload
name = b"events.1.bin"
data = bytes([len(name)]) + name + struct.pack("<Q", 0) + b"abcd"
seed = frame(1, b"vramscope-serve 1\ntoken abc\n") + frame(9, b"have 4096 events.1.bin\n") + frame(4, data)
open(sys.argv[1], "wb").write(seed)
EOF_SEED

cd fuzz
cargo fuzz build --sanitizer none --release --target-dir "$target_dir"
log="$corpus_root/fuzz.log"
for target in "${targets[@]}"; do
    echo "fuzzing $target for ${seconds}s"
    status=0
    cargo fuzz run --sanitizer none --release --target-dir "$target_dir" "$target" "$corpus_root/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
    grep -E '^(Done|stat::number_of_executed_units)' "$log" || true
    if [ "$status" -ne 0 ]; then
        echo "fuzz target $target failed:"
        tail -n 60 "$log"
        exit "$status"
    fi
done
