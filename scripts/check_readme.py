#!/usr/bin/env python3
"""Keeps README.md's set-up commands honest.

    scripts/check_readme.py [--timeout-s 120] [--out DIR]

Reads the "Set up on a fresh machine" section of README.md, which must hold exactly two shell
commands (one fenced ```sh block each, one line each): the main job and the test command.

* The test command must be the one CI runs: `.ci/run` must execute it.
* The main command is run exactly as written, headless: on a private Xvfb display, with fresh
  (empty) settings directories the way a newcomer has them. A `cargo run ...` command is built
  first with the same arguments (`cargo build ...`), so the time limit covers the start of the
  app and not a cold compile. Then, within the time limit, the app's window must show a file (its
  title "FILE — vramscope") and be drawn (a capture of it, taken with `xwd`, must hold many
  distinct colours, not a blank or a single fill), and the program must still be running when it
  is closed.

The capture is written to DIR (default: $CARGO_TARGET_DIR or /tmp) as readme-main.png so a
person can look at it. Standard library only; needs Xvfb, xwininfo and xwd
(scripts/install-gui-deps.sh installs them).
"""

import argparse
import os
import re
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = "## Set up on a fresh machine"


def fail(message):
    print(f"check_readme: {message}", file=sys.stderr)
    sys.exit(1)


def setup_commands(readme_text):
    """The commands of the set-up section, in order: one per ```sh block."""
    start = readme_text.find(SECTION)
    if start < 0:
        fail(f"README.md has no {SECTION!r} section")
    rest = readme_text[start + len(SECTION):]
    end = re.search(r"^## ", rest, re.MULTILINE)
    section = rest[: end.start()] if end else rest
    blocks = re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    commands = []
    for block in blocks:
        lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if len(lines) != 1:
            fail(f"each set-up block must hold one command; this one holds {len(lines)}: {block!r}")
        commands.append(lines[0].strip())
    return commands


def ci_runs(test_command):
    """Whether .ci/run executes the test command."""
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    return any(line == test_command or line == f"exec {test_command}" for line in lines)


def free_display():
    for n in range(140, 400):
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and not os.path.exists(f"/tmp/.X{n}-lock"):
            return n
    fail("no free X display number between 140 and 400")


def find_window(display):
    """(id, title) of the app's top-level window on the display, if one is mapped: titled
    "vramscope" while it starts, "FILE — vramscope" once it shows a file."""
    out = subprocess.run(
        ["xwininfo", "-root", "-tree", "-display", display], capture_output=True, text=True, check=False
    ).stdout
    for line in out.splitlines():
        m = re.match(r'\s*(0x[0-9a-f]+) "(.*)": \(', line)
        if m and (m.group(2) == "vramscope" or m.group(2).endswith(" vramscope")):
            geometry = re.search(r"\) +(\d+)x(\d+)\+", line)
            if geometry and int(geometry.group(1)) > 100 and int(geometry.group(2)) > 100:
                return m.group(1), m.group(2)
    return None, None


def read_xwd(data):
    """(width, height, rows of RGB bytes) of a 24/32-bit ZPixmap XWD image."""
    fields = struct.unpack(">25I", data[:100])
    header_size, _version, pixmap_format, _depth, width, height = fields[:6]
    byte_order, bits_per_pixel, bytes_per_line, ncolors = fields[7], fields[11], fields[12], fields[19]
    if pixmap_format != 2 or bits_per_pixel not in (24, 32):
        fail(f"unexpected xwd image: format {pixmap_format}, {bits_per_pixel} bits per pixel")
    offset = header_size + 12 * ncolors
    step = bits_per_pixel // 8
    rows = []
    for y in range(height):
        line = data[offset + y * bytes_per_line: offset + y * bytes_per_line + width * step]
        rgb = bytearray()
        for x in range(0, len(line), step):
            px = line[x: x + step]
            # LSBFirst: blue, green, red (, pad); MSBFirst the reverse.
            b, g, r = (px[0], px[1], px[2]) if byte_order == 0 else (px[-1], px[-2], px[-3])
            rgb += bytes((r, g, b))
        rows.append(bytes(rgb))
    return width, height, rows


def write_png(path, width, height, rows):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + row for row in rows)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


def run_main(command, timeout_s, out_dir):
    env = dict(os.environ)
    words = shlex.split(command)
    if words[:2] == ["cargo", "run"]:
        build = ["cargo", "build"] + words[2:]
        if "--" in build:
            build = build[: build.index("--")]
        print(f"check_readme: building first: {' '.join(build)}", file=sys.stderr)
        subprocess.run(build, cwd=ROOT, env=env, check=True)
    display_number = free_display()
    display = f":{display_number}"
    xvfb = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    fresh = tempfile.mkdtemp(prefix="vramscope-readme-")
    env.update(
        DISPLAY=display,
        XDG_DATA_HOME=os.path.join(fresh, "data"),
        XDG_CONFIG_HOME=os.path.join(fresh, "config"),
        XDG_CACHE_HOME=os.path.join(fresh, "cache"),
        WAYLAND_DISPLAY="",
    )
    log_path = os.path.join(fresh, "main.log")
    log = open(log_path, "wb")
    app = None
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(f"/tmp/.X11-unix/X{display_number}"):
            if time.monotonic() > deadline or xvfb.poll() is not None:
                fail(f"Xvfb did not start on {display}")
            time.sleep(0.1)
        print(f"check_readme: running the README's main command on {display}: {command}", file=sys.stderr)
        started = time.monotonic()
        app = subprocess.Popen(
            command, shell=True, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        window, title = None, None
        best = 0
        while time.monotonic() - started < timeout_s:
            if app.poll() is not None:
                fail(f"the main command exited with status {app.returncode} before its window was drawn:\n"
                     + open(log_path, encoding="utf-8", errors="replace").read()[-4000:])
            window, title = find_window(display)
            # Drawn and showing a file (the built-in sample): the title names it.
            if window and title != "vramscope":
                # The window exists; wait until it is drawn (the sample loads in the background).
                xwd = subprocess.run(
                    ["xwd", "-silent", "-id", window, "-display", display], capture_output=True, check=False
                ).stdout
                if len(xwd) > 100:
                    width, height, rows = read_xwd(xwd)
                    colours = set()
                    for row in rows[::4]:
                        colours.update(row[i: i + 3] for i in range(0, len(row), 12))
                    best = max(best, len(colours))
                    if len(colours) >= 200:
                        # Drawn: the timeline, text and the banner, not a flat fill.
                        time.sleep(1.0)
                        if app.poll() is not None:
                            fail(f"the main command exited with status {app.returncode} right after drawing")
                        os.makedirs(out_dir, exist_ok=True)
                        png = os.path.join(out_dir, "readme-main.png")
                        write_png(png, width, height, rows)
                        elapsed = time.monotonic() - started
                        print(
                            f"check_readme: the window {title!r} was drawn after {elapsed:.1f} s "
                            f"({width}x{height}, {len(colours)} colours sampled); capture: {png}",
                            file=sys.stderr,
                        )
                        return
            time.sleep(0.5)
        if not window:
            state = "no window titled 'vramscope' showed a file"
        else:
            state = f"the window {title!r} stayed blank ({best} colours)"
        fail(f"within {timeout_s} s of starting the main command, {state}:\n"
             + open(log_path, encoding="utf-8", errors="replace").read()[-4000:])
    finally:
        if app is not None and app.poll() is None:
            os.killpg(app.pid, signal.SIGTERM)
            try:
                app.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(app.pid, signal.SIGKILL)
        xvfb.terminate()
        xvfb.wait()
        log.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="time for the window to be drawn")
    parser.add_argument("--out", default=os.environ.get("CARGO_TARGET_DIR", "/tmp"), help="where the capture goes")
    args = parser.parse_args()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        commands = setup_commands(f.read())
    if len(commands) != 2:
        fail(f"README.md's set-up section must give exactly two commands; it gives {len(commands)}: {commands}")
    main_command, test_command = commands
    if not ci_runs(test_command):
        fail(f"README.md's test command {test_command!r} is not what .ci/run executes")
    print(f"check_readme: the test command is what CI runs: {test_command}", file=sys.stderr)
    run_main(main_command, args.timeout_s, args.out)


if __name__ == "__main__":
    main()
