#!/usr/bin/env bash
# What watching a run costs the workload: a CPU PyTorch training run (samples/pytorch/train.py,
# GPT, 300 steps) recorded plain; with `--serve` and a viewer that only copies what is sent (as
# the server sees a viewer on another machine: the protocol spoken by a few lines of Python
# here); with `--serve` and `top --connect` on this same machine (the viewer's own work counted
# too: an upper bound); and with `--tui` (in tmux); side by side in each round.
# Prints each run's wall time (from the start of `record` to its trace written: the workload,
# the merge and the write) and the medians' ratios to the plain recording.
#
#   scripts/bench-serve.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/vramscope-target}"
rounds="${1:-3}"
cargo build --release --locked --bin vramscope >&2
bin="$CARGO_TARGET_DIR/release/vramscope"
py="${VRAMSCOPE_TORCH_PYTHON:-$(scripts/install-torch.sh | tail -n1)}"
work="$(mktemp -d)"
trap 'tmux -S "$work/tmux" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
train=("$py" samples/pytorch/train.py --device cpu --steps 300)
export VRAMSCOPE_TOKEN=bench XDG_CACHE_HOME="$work/cache"
now() { date +%s.%N; }

plain() {
    local t0; t0=$(now)
    "$bin" record --force -o "$work/plain.vtrace" -- "${train[@]}" >/dev/null 2>&1
    echo "$(now) - $t0" | bc
}

# A viewer that copies and discards: hello, nothing held, then read frames until the end.
copier() {
    python3 - "$1" <<'EOF_PY'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def frame(kind, payload):
    s.sendall(bytes([kind]) + struct.pack("<I", len(payload)) + payload)
def read(n):
    out = b""
    while len(out) < n:
        part = s.recv(n - len(out))
        if not part:
            sys.exit(0)
        out += part
    return out
frame(1, b"vramscope-serve 1\ntoken bench\n")
kind, n = struct.unpack("<BI", read(5)); read(n)
frame(9, b"")
while True:
    kind, n = struct.unpack("<BI", read(5)); read(n)
    if kind == 7:
        break
EOF_PY
}

copied() {
    local port=$((20000 + RANDOM % 20000)) t0
    rm -f "$work/copied.vtrace"
    t0=$(now)
    "$bin" record --force --serve "127.0.0.1:$port" -o "$work/copied.vtrace" -- "${train[@]}" >/dev/null 2>&1 &
    local pid=$!
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
    copier "$port" &
    until [ -s "$work/copied.vtrace" ]; do sleep 0.02; done
    local t1; t1=$(now)
    wait "$pid"
    echo "$t1 - $t0" | bc
}

served() {
    local port=$((20000 + RANDOM % 20000)) t0
    rm -f "$work/served.vtrace"
    t0=$(now)
    "$bin" record --force --serve "127.0.0.1:$port" -o "$work/served.vtrace" -- "${train[@]}" >/dev/null 2>&1 &
    local pid=$!
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.05; done
    tmux -S "$work/tmux" new-session -d -x 80 -y 24 -s viewer "$bin top --connect 127.0.0.1:$port; sleep 600"
    until [ -s "$work/served.vtrace" ]; do sleep 0.02; done
    local t1; t1=$(now)
    wait "$pid"
    tmux -S "$work/tmux" kill-server 2>/dev/null || true
    echo "$t1 - $t0" | bc
}

tui() {
    rm -f "$work/done" "$work/tui.vtrace"
    local t0; t0=$(now)
    tmux -S "$work/tmux" new-session -d -x 80 -y 24 -s tui \
        "$bin record --force --tui -o $work/tui.vtrace -- ${train[*]}; touch $work/done; sleep 600"
    # The view stays on the finished trace until q: timed to the trace written.
    until [ -s "$work/tui.vtrace" ]; do sleep 0.02; done
    local t1; t1=$(now)
    until tmux -S "$work/tmux" capture-pane -p -t tui | grep -q "finished:"; do sleep 0.05; done
    tmux -S "$work/tmux" send-keys -t tui q
    until [ -f "$work/done" ]; do sleep 0.05; done
    tmux -S "$work/tmux" kill-server 2>/dev/null || true
    echo "$t1 - $t0" | bc
}

declare -a p c s t
for r in $(seq "$rounds"); do
    a=$(plain); b=$(copied); d=$(served); e=$(tui)
    printf 'round %d: plain %.2f s, --serve copied elsewhere %.2f s, --serve with top --connect here %.2f s, --tui %.2f s\n' \
        "$r" "$a" "$b" "$d" "$e"
    p+=("$a"); c+=("$b"); s+=("$d"); t+=("$e")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mp=$(median "${p[@]}"); mc=$(median "${c[@]}"); ms=$(median "${s[@]}"); mt=$(median "${t[@]}")
ratio() { echo "$1 / $mp" | bc -l; }
printf 'median: plain %.2f s; --serve copied elsewhere %.2f s (%.2fx); with top --connect here %.2f s (%.2fx); --tui %.2f s (%.2fx)\n' \
    "$mp" "$mc" "$(ratio "$mc")" "$ms" "$(ratio "$ms")" "$mt" "$(ratio "$mt")"
