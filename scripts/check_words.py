#!/usr/bin/env python3
"""Fails when a face says in its own code a sentence the words module says.

    scripts/check_words.py

Only `analysis/src/query/words/` turns answers into sentences and labels (docs/ARCHITECTURE.md),
so that every face says the same thing the same way. A sentence copied into a face drifts from
the one the others say: this reads every string literal of the words module that is a phrase
(five words or more, twenty characters or more, format placeholders taken as gaps), and fails
when a face's code (the app: CLI, GUI, top, MCP, report; the Python package) holds the same
phrase. The faces' own layout text (headings, column names, key hints) is not a phrase of the
words module, and is left alone.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ROOT / "analysis" / "src" / "query" / "words"
FACES = [ROOT / "app" / "src", ROOT / "python" / "vramscope"]

def rust_literals(text: str) -> list[str]:
    """The string literals of Rust source (plain and raw), comments and char literals skipped."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            i = text.find("*/", i + 2)
            i = n if i < 0 else i + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            start = i + 2 + len(hashes)
            end = text.find('"' + hashes, start)
            end = n if end < 0 else end
            out.append(text[start:end])
            i = end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i + 1 : j])
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^'\\])'", text[i:]):
            i += len(re.match(r"'(\\.|[^'\\])'", text[i:]).group(0))
        else:
            i += 1
    return out


def python_literals(text: str) -> list[str]:
    """The string constants of Python source, docstrings left out."""
    import ast

    tree = ast.parse(text)
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return [
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def phrases(literals: list[str]) -> set[str]:
    """The phrases of string literals: the runs between format placeholders and line breaks."""
    found = set()
    for literal in literals:
        for run in re.split(r"\{[^}]*\}|\\n|\n|\\\s*", literal):
            run = " ".join(run.split()).strip(" ,.:;()")
            if len(run) >= 20 and len(run.split()) >= 5:
                found.add(run)
    return found


def main() -> int:
    said = set()
    for path in sorted(WORDS.rglob("*.rs")):
        # Tests may quote what the words say.
        said |= phrases(rust_literals(path.read_text().split("#[cfg(test)]")[0]))
    if len(said) < 100:
        print(f"check_words: only {len(said)} phrases read from {WORDS}: the check would see nothing", file=sys.stderr)
        return 1
    copies = []
    for face in FACES:
        for path in sorted(list(face.rglob("*.rs")) + list(face.rglob("*.py"))):
            text = path.read_text()
            if path.suffix == ".rs":
                literals = rust_literals(text.split("#[cfg(test)]")[0])
            else:
                literals = python_literals(text)
            spoken = " \u0000 ".join(" ".join(s.split()) for s in literals)
            for phrase in sorted(said):
                if phrase in spoken:
                    copies.append(f"{path.relative_to(ROOT)}: {phrase!r}")
    for copy in copies:
        print(f"a face says what the words module says (say it through query::words): {copy}", file=sys.stderr)
    if not copies:
        print(f"check_words: {len(said)} phrases of the words module, none said again by a face")
    return 1 if copies else 0


if __name__ == "__main__":
    sys.exit(main())
