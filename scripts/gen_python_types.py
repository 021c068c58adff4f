#!/usr/bin/env python3
"""Writes the Python package's types of the documents (python/vramscope/_documents.py) from the
published schema (docs/schema.json, which `vramscope schema` prints).

    scripts/gen_python_types.py            write python/vramscope/_documents.py
    scripts/gen_python_types.py --check    fail when the file is not what the schema makes

Each object of the schema becomes a `TypedDict` (keys a document may leave out are `NotRequired`,
spelled for Python 3.9 as a `total=False` class over the required keys), each string enum a
`Literal`, a map `dict[str, ...]`, a pair `list[int]` (JSON has no tuples). The file is checked
in; python/tests/test_documents.py fails when regenerating would change it, so the types follow
the schema, which follows the Rust documents.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "docs" / "schema.json"
OUT = ROOT / "python" / "vramscope" / "_documents.py"

# The documents' Python names, by the name `vramscope schema` knows them by.
ROOT_NAMES = {
    "info": "InfoDocument",
    "run": "RunDocument",
    "oom": "OomDocument",
    "diff": "DiffDocument",
    "ranks-diff": "RanksDiffDocument",
    "advise": "AdviceDocument",
    "growth": "GrowthDocument",
    "breakdown": "BreakdownDocument",
    "instant": "InstantDocument",
    "report": "ReportDocument",
    "estimate": "EstimateDocument",
}


class Generator:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.defs: dict[str, dict[str, Any]] = {}
        for name, document in schema["documents"].items():
            for key, value in document.get("$defs", {}).items():
                if key in ROOT_NAMES.values():
                    continue  # a document inside another (a report's advice): the document's own
                if key in self.defs and self.defs[key] != value:
                    raise SystemExit(f"two definitions named {key} differ: name the Rust types apart")
                self.defs[key] = value
            root = {k: v for k, v in document.items() if k not in ("$defs", "$schema", "$id", "title")}
            root["description"] = (
                root.get("description", "").strip()
                + f"\n\nA document as the command prints it (``vramscope schema {name}`` describes it)."
            )
            self.defs[ROOT_NAMES[name]] = root
        self.aliases: dict[str, str] = {}
        self.classes: dict[str, str] = {}

    def type_of(self, schema: dict[str, Any], hint: str) -> str:
        if not schema:
            return "Any"
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            self.define(name)
            return name
        if "const" in schema:
            return f"Literal[{json.dumps(schema['const'])}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(json.dumps(v) for v in schema["enum"]) + "]"
        for key in ("oneOf", "anyOf"):
            if key in schema:
                return self.union([self.type_of(s, self.variant_name(hint, s, i)) for i, s in enumerate(schema[key])])
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.union([self.type_of({**schema, "type": k}, hint) for k in kind])
        if kind == "null":
            return "None"
        if kind == "boolean":
            return "bool"
        if kind == "integer":
            return "int"
        if kind == "number":
            return "float"
        if kind == "string":
            return "str"
        if kind == "array":
            if "prefixItems" in schema:
                items = sorted({self.type_of(s, hint) for s in schema["prefixItems"]})
                return f"list[{self.union(items)}]"
            return f"list[{self.type_of(schema.get('items', {}), hint)}]"
        if kind == "object":
            if "properties" in schema:
                self.define_object(hint, schema)
                return hint
            extra = schema.get("additionalProperties", {})
            return f"dict[str, {self.type_of(extra if isinstance(extra, dict) else {}, hint)}]"
        raise SystemExit(f"{hint}: a schema this generator does not know: {json.dumps(schema)[:200]}")

    @staticmethod
    def variant_name(hint: str, schema: dict[str, Any], index: int) -> str:
        """A variant of a tagged enum is named by its tag (`IterationsPattern`), else by its place."""
        for value in schema.get("properties", {}).values():
            if isinstance(value.get("const"), str):
                return hint + "".join(part.capitalize() for part in value["const"].split("_"))
        return f"{hint}{index}"

    @staticmethod
    def union(types: list[str]) -> str:
        unique = list(dict.fromkeys(types))
        literals = [t for t in unique if t.startswith("Literal[")]
        if len(literals) > 1:
            merged = "Literal[" + ", ".join(t[len("Literal[") : -1] for t in literals) + "]"
            unique = [merged] + [t for t in unique if not t.startswith("Literal[")]
        return unique[0] if len(unique) == 1 else f"Union[{', '.join(unique)}]"

    def define(self, name: str) -> None:
        if name in self.classes or name in self.aliases:
            return
        schema = self.defs[name]
        if schema.get("type") == "object" and "properties" in schema:
            self.define_object(name, schema)
        else:
            self.aliases[name] = ""  # reserve: a type may refer to itself
            self.aliases[name] = self.type_of(schema, name)

    def define_object(self, name: str, schema: dict[str, Any]) -> None:
        if name in self.classes:
            return
        self.classes[name] = ""  # reserve
        required = set(schema.get("required", []))
        fields = []
        for key, value in schema["properties"].items():
            if not key.isidentifier():
                raise SystemExit(f"{name}.{key}: not a Python identifier")
            field_type = self.type_of(value, name + "".join(p.capitalize() for p in key.split("_")))
            fields.append((key, field_type, key in required, value.get("description", "")))
        self.classes[name] = self.render(name, schema.get("description", ""), fields)

    @staticmethod
    def comment(text: str, indent: str) -> list[str]:
        lines = []
        for line in text.strip().splitlines():
            lines.append(f"{indent}#: {line}".rstrip())
        return lines

    def render(self, name: str, description: str, fields: list[tuple[str, str, bool, str]]) -> str:
        doc = description.strip().replace('"""', "'''") or name
        lines: list[str] = []
        must = [f for f in fields if f[2]]
        may = [f for f in fields if not f[2]]
        base = f"_{name}Required" if must and may else None
        if base and any(keyword.iskeyword(f[0]) for f in must):
            # A key that is a Python keyword (`from`) is only spelled in TypedDict's call form.
            lines.append(f"# The keys {name} always has.")
            lines.append(f'{base} = TypedDict("{base}", {{')
            for key, kind, _, text in must:
                lines += self.comment(text, "    ")
                lines.append(f'    "{key}": "{kind}",')
            lines.append("})")
            lines.append("")
            lines.append("")
        elif base:
            lines.append(f"class {base}(TypedDict):")
            lines.append(f'    """The keys {name} always has."""')
            lines.append("")
            for key, kind, _, text in must:
                lines += self.comment(text, "    ")
                lines.append(f"    {key}: {kind}")
            lines.append("")
            lines.append("")
        elif any(keyword.iskeyword(f[0]) for f in fields) and not may:
            doc_lines = [f"# {line}".rstrip() for line in doc.splitlines()]
            lines += doc_lines
            lines.append(f'{name} = TypedDict("{name}", {{')
            for key, kind, _, text in fields:
                lines += self.comment(text, "    ")
                lines.append(f'    "{key}": "{kind}",')
            lines.append("})")
            return "\n".join(lines)
        if any(keyword.iskeyword(f[0]) for f in may):
            raise SystemExit(f"{name}: an optional key that is a Python keyword")
        parent = base or "TypedDict"
        total = ", total=False" if may else ""
        lines.append(f"class {name}({parent}{total}):")
        indented = "\n".join(f"    {line}".rstrip() if i else line for i, line in enumerate(doc.splitlines()))
        lines.append(f'    """{doc}"""' if "\n" not in doc else f'    """{indented}\n    """')
        shown = may if base else fields
        if shown:
            lines.append("")
        for key, kind, _, text in shown:
            lines += self.comment(text, "    ")
            lines.append(f"    {key}: {kind}")
        return "\n".join(lines)

    def generate(self) -> str:
        for name in ROOT_NAMES.values():
            self.define(name)
        out = [
            '"""The documents vramscope answers with, as Python types: generated by',
            "scripts/gen_python_types.py from docs/schema.json (`vramscope schema`); do not edit.",
            "",
            f"Schema version {self.schema['schema_version']}. Every JSON answer of the command (``--json``) and of",
            "its MCP server is one of the ``...Document`` types below; the package's functions return",
            'them.\n"""',
            "",
            "from __future__ import annotations",
            "",
            "from typing import Any, Dict, List, Literal, TypedDict, Union",
            "",
            f"SCHEMA_VERSION = {self.schema['schema_version']}",
            "",
            "__all__ = [",
            '    "SCHEMA_VERSION",',
        ]
        names = sorted(list(self.aliases) + [c for c in self.classes if not c.startswith("_")])
        out += [f'    "{n}",' for n in names]
        out += ["]", ""]
        # Classes first (their annotations are read lazily), then the aliases, each after those
        # it names: an alias is evaluated at import.
        for name in sorted(self.classes):
            out += ["", "", self.classes[name]]
        out.append("")
        done: set[str] = set()
        pending = sorted(self.aliases)
        while pending:
            ready = [n for n in pending if not any(re.search(rf"\b{o}\b", self.aliases[n]) for o in pending if o != n)]
            if not ready:
                raise SystemExit(f"aliases that name each other: {pending}")
            for name in ready:
                out += ["", f"{name} = {self.aliases[name]}"]
                done.add(name)
            pending = [n for n in pending if n not in done]
        text = "\n".join(out) + "\n"
        # `dict[...]`/`list[...]` in aliases run at import on 3.9: spell them with typing's names.
        alias_lines = []
        for line in text.splitlines():
            if " = " in line and not line.startswith((" ", "#", "SCHEMA")) and "[" in line:
                line = line.replace("dict[", "Dict[").replace("list[", "List[")
            alias_lines.append(line)
        return "\n".join(alias_lines) + "\n"


def main() -> int:
    text = Generator(json.loads(SCHEMA.read_text())).generate()
    if sys.argv[1:] == ["--check"]:
        if OUT.read_text() != text:
            print(f"{OUT} is not what {SCHEMA} makes: run scripts/gen_python_types.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
