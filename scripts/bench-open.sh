#!/usr/bin/env bash
# Open-to-first-frame time and peak memory of the desktop app on generated snapshots of 1.5M,
# 9M and 36M trace entries (shaped like the real ones memory_viz was measured on: ~60 bytes of
# pickle per entry), under Xvfb.
#
#   scripts/bench-open.sh [RUNS] [ENTRIES...]
#
# Each run is a fresh process: `vramscope open FILE --screenshot`, with VRAMSCOPE_TIMINGS=1 so
# the app prints when its first frame with the trace is drawn; /usr/bin/time gives the peak RSS
# and the CPU time. Every file is read once first, so that all runs read it from the page cache.
# Each run is made twice, side by side: with the pickle run in pieces on every core (the default
# for large files) and in one go (VRAMSCOPE_PICKLE_PIECES=1), so that the ratio survives a noisy
# machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
runs="${1:-3}"
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1500000 9000000 36000000)
dir=/var/tmp/vramscope-bench
mkdir -p "$dir"
scripts/install-gui-deps.sh
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
cargo build --release --locked --bin vramscope
bin="$CARGO_TARGET_DIR/release/vramscope"
shape=(--context alloc --fresh-stack-fraction 0.2 --depth 16)
for entries in "${sizes[@]}"; do
    file="$dir/open_${entries}.pickle"
    [ -f "$file" ] || python3 scripts/gen_snapshot.py --entries "$entries" "${shape[@]}" --out "$file" >&2
    cat "$file" > /dev/null
    echo "## $(basename "$file"): $(du -m "$file" | cut -f1) MB"
    for _ in $(seq "$runs"); do
        for pieces in auto 1; do
            env_pieces=(VRAMSCOPE_PICKLE_PIECES="$pieces")
            printf 'pieces=%-4s ' "$pieces"
            env "${env_pieces[@]}" VRAMSCOPE_TIMINGS=1 xvfb-run -a -s "-screen 0 1600x1000x24" /usr/bin/time -v \
                "$bin" open "$file" --screenshot "$dir/open.png" 2>&1 |
                grep -E "first frame|read and imported|Maximum resident|User time|System time" | tr -s '\t\n ' ' '
            echo
        done
    done
done
