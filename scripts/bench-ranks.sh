#!/usr/bin/env bash
# A run of many ranks: `vramscope info DIR` on generated per-rank snapshots of 150k trace entries
# each, read one file at a time and with a reader per core, side by side in one run; `diff` of
# two such runs (the second's ranks shifted by one, so every rank differs) and `advise` on one;
# `export --format parquet`; and the app opening the directory under Xvfb (when the first rank
# and all ranks are drawn, and the first frame of the rank shown in the other views). Peak RSS
# says whether a command holds one trace per reader or the whole run.
#
#   scripts/bench-ranks.sh [RUNS] [RANKS]
#
# RANKS defaults to 64. The first 64 files are generated with seeds 0..63; past 64, rank N is a
# hard link to rank N % 64's file (1,000 distinct files would take 25 minutes to generate and
# 9 GB of disk; every rank is read, analysed and held as its own all the same).
#
# Prints each run's wall time and peak RSS (GNU time), and the ratio of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
runs="${1:-3}"
ranks="${2:-64}"
entries=150000
dir=/var/tmp/vramscope-bench/ranks_${ranks}x${entries}
mkdir -p "$dir"
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
cargo build --release --locked --bin vramscope >&2
bin="$CARGO_TARGET_DIR/release/vramscope"
distinct=/var/tmp/vramscope-bench/ranks_64x${entries}
mkdir -p "$distinct"
for r in $(seq 0 63); do
    file="$distinct/snapshot_rank${r}.pickle"
    [ -f "$file" ] || python3 scripts/gen_snapshot.py --entries "$entries" --seed "$r" --out "$file" >&2
done
for r in $(seq 0 $((ranks - 1))); do
    [ -f "$dir/snapshot_rank${r}.pickle" ] || ln "$distinct/snapshot_rank$((r % 64)).pickle" "$dir/snapshot_rank${r}.pickle"
done
cat "$distinct"/*.pickle > /dev/null
echo "## $ranks ranks x $entries entries: $(du -sm "$dir" | cut -f1) MB in $dir"
one() {
    VRAMSCOPE_READ_THREADS="$1" /usr/bin/time -f "%e %M" "$bin" info "$dir" 2>&1 >/dev/null | tail -n1
}
declare -a serial parallel
for _ in $(seq "$runs"); do
    s=$(one 1); p=$(one "$(nproc)")
    echo "one reader: ${s% *} s, ${s#* } KiB peak RSS; $(nproc) readers: ${p% *} s, ${p#* } KiB"
    serial+=("${s% *}"); parallel+=("${p% *}")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms=$(median "${serial[@]}"); mp=$(median "${parallel[@]}")
echo "median: one reader $ms s, $(nproc) readers $mp s: $(awk -v a="$ms" -v b="$mp" 'BEGIN {printf "%.2fx", a / b}')"
# The other run: rank N is this run's rank N + 1.
other=/var/tmp/vramscope-bench/ranks_${ranks}x${entries}_shifted
mkdir -p "$other"
for r in $(seq 0 $((ranks - 1))); do
    ln -sf "$dir/snapshot_rank$(((r + 1) % ranks)).pickle" "$other/snapshot_rank${r}.pickle"
done
/usr/bin/time -f "diff DIR DIR2: %e s, %M KiB peak RSS" "$bin" diff "$dir" "$other" 2>&1 >/dev/null | tail -n1
/usr/bin/time -f "advise DIR: %e s, %M KiB peak RSS" "$bin" advise "$dir" 2>&1 >/dev/null | tail -n1
tables=$(mktemp -d /var/tmp/vramscope-bench/tables.XXXXXX)
/usr/bin/time -f "export DIR --format parquet: %e s, %M KiB peak RSS" "$bin" export "$dir" -o "$tables/t" \
    --format parquet 2>&1 >/dev/null | tail -n1
echo "  the tables: $(du -sm "$tables" | cut -f1) MB in $(find "$tables" -name '*.parquet' | wc -l) files"
rm -rf "$tables"
if command -v xvfb-run >/dev/null; then
    for _ in $(seq "$runs"); do
        VRAMSCOPE_TIMINGS=1 xvfb-run -a -s "-screen 0 1600x1000x24" /usr/bin/time -f "app: %e s, %M KiB peak RSS" \
            "$bin" "$dir" --screenshot "$dir.png" --size 1500x1000 2>&1 |
            grep -E "drawn after|first frame|peak RSS" | sed 's/^vramscope: //' | tr '\n' ';'
        echo
    done
fi
