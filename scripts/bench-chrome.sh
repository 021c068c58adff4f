#!/usr/bin/env bash
# Time and peak memory of reading a large profiler Chrome trace, plain and gzipped, by
# `vramscope info` and, side by side as the reference, by Python's json module (which only
# parses it: vramscope also builds and analyses the trace).
#
#   scripts/bench-chrome.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
events="${1:-2000000}"
dir=/var/tmp/vramscope-bench
mkdir -p "$dir"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
cargo build --release --locked --bin vramscope
bin="$CARGO_TARGET_DIR/release/vramscope"
file="$dir/chrome_${events}.json"
[ -f "$file" ] || python3 scripts/gen_chrome_trace.py "$events" "$file"
[ -f "$file.gz" ] || gzip -k -1 "$file"
echo "| file | size | vramscope info | Python json.load |"
echo "|---|---|---|---|"
for f in "$file" "$file.gz"; do
    ours=$(/usr/bin/time -f "%e s, %M KiB" "$bin" info "$f" 2>&1 >/dev/null | tail -n1)
    theirs=$(/usr/bin/time -f "%e s, %M KiB" python3 -c \
        "import gzip, json, sys; f = sys.argv[1]; json.load(gzip.open(f) if f.endswith('.gz') else open(f))" \
        "$f" 2>&1 | tail -n1)
    echo "| $(basename "$f") | $(du -m "$f" | cut -f1) MB | $ours | $theirs |"
done
