#!/usr/bin/env python3
"""Renders every view of the app with one binary, and compares two such sets pixel by pixel.

    scripts/screenshot_views.py render BIN OUTDIR [--oom TRACE]
    scripts/screenshot_views.py compare DIR_A DIR_B

`render` runs `BIN ... --screenshot` under Xvfb for each view: the built-in sample (timeline,
peak, fragmentation, advisor), the compare view of two committed recordings, the ranks view of
the committed two-rank recording, and the OOM view of TRACE when one is given (a recording with
an out-of-memory error, e.g. of the fake driver's `client direct`). `compare` says, for each PNG
in both, how many pixels differ and where (the status bar's load time differs from run to run,
so differences are reported, not judged). Used to check that a change meant to keep the app as
it was does: render with the binary before and after, compare, and look at what differs.
"""

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "samples" / "traces"


def cases(oom: Path | None) -> list[tuple[str, list[str]]]:
    """Each screenshot's name and the arguments that draw it (before `--screenshot OUT`)."""
    out = [(view, ["--view", view]) for view in ["timeline", "peak", "fragmentation", "advisor"]]
    out.append(
        ("compare", ["compare", str(TRACES / "h200-torch-plain.vtrace"), str(TRACES / "h200-torch-bf16.vtrace")])
    )
    out.append(("ranks", ["open", str(TRACES / "cpu-ddp-gloo-2ranks.vtrace"), "--view", "ranks"]))
    if oom is not None:
        out.append(("oom", ["open", str(oom), "--view", "oom"]))
    return out


def render(binary: Path, outdir: Path, oom: Path | None) -> int:
    outdir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, args in cases(oom):
        png = outdir / f"{name}.png"
        command = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", str(binary), *args]
        command += ["--size", "1400x900", "--screenshot", str(png)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            print(f"{name}: failed ({result.returncode}): {result.stderr.strip()}", file=sys.stderr)
            failed += 1
        else:
            print(f"{name}: {png}")
    return 1 if failed else 0


def pixels(png: Path) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes, through `convert FILE.png ppm:-` (binary PPM)."""
    data = subprocess.run(["convert", str(png), "ppm:-"], capture_output=True, check=True).stdout
    fields: list[bytes] = []
    at = 0
    while len(fields) < 4:
        while data[at : at + 1].isspace():
            at += 1
        if data[at : at + 1] == b"#":
            at = data.index(b"\n", at) + 1
            continue
        end = at
        while not data[end : end + 1].isspace():
            end += 1
        fields.append(data[at:end])
        at = end
    if fields[0] != b"P6" or fields[3] != b"255":
        raise ValueError(f"{png}: not an 8-bit binary PPM from convert")
    width, height = int(fields[1]), int(fields[2])
    return width, height, data[at + 1 : at + 1 + width * height * 3]


def compare(a: Path, b: Path) -> int:
    different = 0
    for png in sorted(a.glob("*.png")):
        other = b / png.name
        if not other.exists():
            print(f"{png.name}: only in {a}")
            continue
        (wa, ha, pa), (wb, hb, pb) = pixels(png), pixels(other)
        if (wa, ha) != (wb, hb):
            print(f"{png.name}: sizes differ, {wa}x{ha} and {wb}x{hb}")
            different += 1
            continue
        xs, ys = [], []
        for i in range(0, len(pa), 3):
            if pa[i : i + 3] != pb[i : i + 3]:
                xs.append((i // 3) % wa)
                ys.append((i // 3) // wa)
        if xs:
            different += 1
            box = f"x {min(xs)}..{max(xs)}, y {min(ys)}..{max(ys)}"
            print(f"{png.name}: {len(xs)} pixels differ ({box})")
        else:
            print(f"{png.name}: identical")
    return 0 if different == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render", help="render every view with BIN into OUTDIR")
    r.add_argument("binary", type=Path)
    r.add_argument("outdir", type=Path)
    r.add_argument("--oom", type=Path, help="a trace with an out-of-memory error, for the OOM view")
    c = sub.add_parser("compare", help="compare two directories of renders pixel by pixel")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "render":
        return render(args.binary, args.outdir, args.oom)
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
