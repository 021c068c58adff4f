#!/usr/bin/env python3
"""Fails when the modules directly under a Rust module directory import each other in a cycle.

    scripts/module_cycles.py app/src/gui

Each file `NAME.rs` or directory `NAME/` under the directory is one module; what it imports is
every sibling it names as `super::SIBLING` (from a file of its own directory), `super::super::SIBLING`
(from one level down), or `crate::<path to the directory>::SIBLING`. The strongly connected
components of that graph with more than one module are printed with the imports that close them,
and the exit status is 1. `--graph` prints the whole graph (one line per module) instead.
"""

import argparse
import re
import sys
from pathlib import Path


def module_files(root: Path) -> dict[str, list[tuple[Path, int]]]:
    """Each module's files, with how deep below `root` each lies (0: directly in it)."""
    modules: dict[str, list[tuple[Path, int]]] = {}
    for path in sorted(root.iterdir()):
        if path.suffix == ".rs" and path.stem != "mod":
            modules.setdefault(path.stem, []).append((path, 0))
        elif path.is_dir():
            for file in sorted(path.rglob("*.rs")):
                depth = len(file.relative_to(path).parts)
                # NAME/mod.rs is the module itself; NAME/x.rs one level down.
                modules.setdefault(path.name, []).append((file, 0 if file.name == "mod.rs" else depth))
    return modules


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def imports(root: Path, crate_path: str) -> dict[str, dict[str, str]]:
    """For each module, the siblings it imports, each with the first line that does."""
    modules = module_files(root)
    graph: dict[str, dict[str, str]] = {name: {} for name in modules}
    for name, files in modules.items():
        for file, depth in files:
            text = strip_comments(file.read_text())
            prefixes = ["super::" * (depth + 1), f"{crate_path}::"]
            for prefix in prefixes:
                for match in re.finditer(re.escape(prefix) + r"(\{[^}]*\}|\w+)", text):
                    group = match.group(1)
                    targets = re.findall(r"\b(\w+)", group) if group.startswith("{") else [group]
                    for target in targets:
                        if target in modules and target != name and target not in graph[name]:
                            line = text[: match.start()].count("\n") + 1
                            graph[name][target] = f"{file}:{line}"
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path, help="a module directory, e.g. app/src/gui")
    parser.add_argument("--graph", action="store_true", help="print every module's imports")
    args = parser.parse_args()
    root: Path = args.directory
    parts = root.parts
    if "src" not in parts:
        print(f"{root}: not under a crate's src/", file=sys.stderr)
        return 2
    crate_path = "::".join(["crate", *parts[parts.index("src") + 1 :]])
    graph = imports(root, crate_path)
    if args.graph:
        for name in sorted(graph):
            print(f"{name} -> {', '.join(sorted(graph[name])) or '(nothing)'}")
        return 0
    found = cycles(graph)
    if not found:
        print(f"{root}: {len(graph)} modules, no import cycle")
        return 0
    for component in found:
        print(f"{root}: an import cycle of {len(component)} modules: {', '.join(component)}")
        members = set(component)
        for name in component:
            for target, where in sorted(graph[name].items()):
                if target in members:
                    print(f"  {name} -> {target}  ({where})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
