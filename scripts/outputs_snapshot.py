#!/usr/bin/env python3
"""Write what every headless command prints on every fixture and sample, for comparing two builds.

    scripts/outputs_snapshot.py BINARY OUTDIR      capture BINARY's outputs into OUTDIR
    scripts/outputs_snapshot.py --compare OLD NEW  say which outputs differ, JSON compared as data

A change meant to keep behaviour (a refactoring) is checked by capturing the outputs of the build
before it and the build after it and comparing the two folders. JSON is compared as data (key order
ignored); keys only the new build has are listed apart from changed values, since a document may
gain fields. Text is compared line by line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT.parent / "shared" / "fixtures"
SAMPLES = ROOT / "samples" / "traces"


def traces() -> list[Path]:
    files = sorted(SAMPLES.glob("*.vtrace"))
    files += sorted((FIXTURES / "pytorch-snapshots").glob("*.pickle"))
    files += sorted((FIXTURES / "torch-profiler").glob("*"))
    return files


PAIRS = [
    ("h200-torch-plain.vtrace", "h200-torch-bf16.vtrace"),
    ("h200-torch-plain.vtrace", "h200-torch-expandable.vtrace"),
    ("gpt_ctx128_forward_fp32.pickle", "gpt_ctx128_forward_mixed.pickle"),
    ("gpt_ctx128_forward_fp32.pickle", "gpt_ctx128_fullstep_fp32.pickle"),
]


def commands() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    by_name = {p.name: p for p in traces()}
    for path in traces():
        f = str(path)
        n = path.name
        out += [
            (f"info.{n}.txt", ["info", f]),
            (f"info.{n}.json", ["info", "--json", f]),
            (f"info-blocks.{n}.json", ["info", "--json", "--blocks", "5", f]),
            (f"info-phases.{n}.json", ["info", "--json", "--all-phases", f]),
            (f"info-at.{n}.txt", ["info", "--at", "+1ms", "--blocks", "3", f]),
            (f"info-at.{n}.json", ["info", "--json", "--at", "+1ms", "--blocks", "3", f]),
            (f"oom.{n}.txt", ["info", "--oom", f]),
            (f"oom.{n}.json", ["info", "--oom", "--json", f]),
            (f"advise.{n}.txt", ["advise", f]),
            (f"advise.{n}.json", ["advise", "--json", f]),
        ]
    for a, b in PAIRS:
        fa, fb = str(by_name[a]), str(by_name[b])
        key = f"{a}-vs-{b}"
        gates = ["--fail-if-peak-grows", "5", "--fail-if-category-grows", "activation=10"]
        out += [
            (f"diff.{key}.txt", ["diff", fa, fb, *gates]),
            (f"diff.{key}.json", ["diff", "--json", fa, fb, *gates]),
            (f"diff-phases.{key}.json", ["diff", "--json", "--all-phases", fa, fb]),
        ]
    ddp = str(SAMPLES / "cpu-ddp-gloo-2ranks.vtrace")
    out += [("diff-self.ddp.json", ["diff", "--json", ddp, ddp])]
    return out


def capture(binary: str, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    for name, args in commands():
        proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
        (outdir / name).write_text(proc.stdout)
        (outdir / (name + ".status")).write_text(f"{proc.returncode}\n{proc.stderr}")
    print(f"{len(commands())} outputs in {outdir}")


def flat(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        items: dict[str, object] = {}
        for k, v in value.items():
            items.update(flat(v, f"{prefix}.{k}" if prefix else k))
        return items
    if isinstance(value, list):
        items = {}
        for i, v in enumerate(value):
            items.update(flat(v, f"{prefix}[{i}]"))
        return items or {prefix: []}
    return {prefix: value}


def compare(old: Path, new: Path) -> int:
    changed = 0
    for path in sorted(old.iterdir()):
        other = new / path.name
        if not other.exists():
            print(f"{path.name}: missing in {new}")
            changed += 1
            continue
        a, b = path.read_text(), other.read_text()
        if a == b:
            continue
        if path.name.endswith(".json") and a.strip() and b.strip():
            try:
                fa, fb = flat(json.loads(a)), flat(json.loads(b))
            except json.JSONDecodeError:
                fa, fb = {"": a}, {"": b}
            differing = [k for k in fa if k in fb and fa[k] != fb[k]]
            gone = [k for k in fa if k not in fb]
            gained = [k for k in fb if k not in fa]
            if not differing and not gone:
                if gained:
                    print(f"{path.name}: gained {len(gained)} keys, e.g. {gained[:3]}")
                continue
            changed += 1
            print(f"{path.name}: {len(differing)} values differ, {len(gone)} keys gone, {len(gained)} gained")
            for k in differing[:5]:
                print(f"    {k}: {fa[k]!r} -> {fb[k]!r}")
            for k in gone[:5]:
                print(f"    gone: {k}")
        else:
            changed += 1
            la, lb = a.splitlines(), b.splitlines()
            diff = [(x, y) for x, y in zip(la, lb) if x != y]
            print(f"{path.name}: {len(diff)} lines differ ({len(la)} -> {len(lb)} lines)")
            for x, y in diff[:3]:
                print(f"    - {x}\n    + {y}")
    print(f"{changed} outputs differ")
    return 1 if changed else 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        return compare(Path(sys.argv[2]), Path(sys.argv[3]))
    if len(sys.argv) == 3:
        capture(sys.argv[1], Path(sys.argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
