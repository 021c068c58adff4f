#!/usr/bin/env bash
# Renders the README's screenshots with the real window under Xvfb:
#   scripts/screenshots.sh [SNAPSHOT]   (default: the GPT full-step fixture)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
scripts/install-gui-deps.sh
cargo build --release --locked --bin vramscope
file="${1:-../shared/fixtures/pytorch-snapshots/gpt_ctx128_fullstep_fp32.pickle}"
mkdir -p docs/screenshots
for view in timeline peak fragmentation; do
    xvfb-run -a -s "-screen 0 1920x1200x24" "$CARGO_TARGET_DIR/release/vramscope" open "$file" \
        --view "$view" --size 1400x900 --screenshot "docs/screenshots/$view.png"
    echo "docs/screenshots/$view.png"
done
# The built-in sample (an H200 recording with tags and phases): peak breakdown and Advisor.
for view in peak advisor; do
    xvfb-run -a -s "-screen 0 1920x1200x24" "$CARGO_TARGET_DIR/release/vramscope" open \
        vramscope-sample:h200-gpt-adamw.vtrace --view "$view" --size 1400x900 \
        --screenshot "docs/screenshots/sample-$view.png"
    echo "docs/screenshots/sample-$view.png"
done
# A run of two ranks (the DDP recording, torchrun with gloo): the ranks view.
xvfb-run -a -s "-screen 0 1920x1200x24" "$CARGO_TARGET_DIR/release/vramscope" open \
    samples/traces/cpu-ddp-gloo-2ranks.vtrace --view ranks --size 1400x900 --screenshot docs/screenshots/ranks.png
echo docs/screenshots/ranks.png
pair=(../shared/fixtures/pytorch-snapshots/gpt_ctx128_forward_fp32.pickle ../shared/fixtures/pytorch-snapshots/gpt_ctx128_forward_mixed.pickle)
xvfb-run -a -s "-screen 0 1920x1200x24" "$CARGO_TARGET_DIR/release/vramscope" compare "${pair[@]}" \
    --size 1400x900 --screenshot docs/screenshots/compare.png
echo docs/screenshots/compare.png
"$CARGO_TARGET_DIR/release/vramscope" report "${pair[@]}" -o docs/screenshots/report-compare.png --force
"$CARGO_TARGET_DIR/release/vramscope" report "$file" -o docs/screenshots/report.png --force
# Phase by phase: a real PyTorch run on the CPU at context 16 and 40, recorded (both peak in the
# optimizer step; the forward and backward passes grew). Needs PyTorch: scripts/install-torch.sh.
python="${VRAMSCOPE_TORCH_PYTHON:-$(scripts/install-torch.sh | tail -n1)}"
runs="$(mktemp -d)"
trap 'rm -rf "$runs"' EXIT
for len in 16 40; do
    VRAMSCOPE_TORCH_PYTHON="$python" "$CARGO_TARGET_DIR/release/vramscope" record --force -o "$runs/context$len.vtrace" \
        -- "$python" tests/workloads/phases.py --seq-len "$len" --no-profile
done
xvfb-run -a -s "-screen 0 1920x1200x24" "$CARGO_TARGET_DIR/release/vramscope" compare "$runs/context16.vtrace" \
    "$runs/context40.vtrace" --size 1400x1000 --screenshot docs/screenshots/compare-phases.png
echo docs/screenshots/compare-phases.png
"$CARGO_TARGET_DIR/release/vramscope" report "$runs/context16.vtrace" "$runs/context40.vtrace" \
    -o docs/screenshots/report-phases.png --force
