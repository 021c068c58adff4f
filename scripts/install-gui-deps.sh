#!/usr/bin/env bash
# Installs what the GUI needs at run time to draw under Xvfb (the build itself needs no -dev
# packages: winit, glutin and rfd load the system libraries when they start). Idempotent: does
# nothing when everything is there already.
set -euo pipefail

# x11-utils (xwininfo) and x11-apps (xwd): scripts/check_readme.py finds and captures the app's window.
# tmux: the terminal view's tests (tests/tests/top.rs) drive it in a real terminal.
packages=(xvfb xauth libgl1 libegl1 libgl1-mesa-dri libxkbcommon-x11-0 libxcursor1 libxrandr2 libxi6 fonts-dejavu-core
    x11-utils x11-apps tmux)
missing=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "installing: ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
