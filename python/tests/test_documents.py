"""The package's types of the documents (vramscope._documents) against the schema the installed
command publishes: generated from it, and held by every answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import vramscope
from vramscope import _documents

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(os.environ.get("VRAMSCOPE_FIXTURES", REPO.parent / "shared" / "fixtures"))
FORWARD_FP32 = FIXTURES / "pytorch-snapshots" / "gpt_ctx128_forward_fp32.pickle"
FORWARD_MIXED = FIXTURES / "pytorch-snapshots" / "gpt_ctx128_forward_mixed.pickle"


def test_the_types_are_what_the_published_schema_makes() -> None:
    # The installed command's schema is the checked-in one, and regenerating the types from it
    # changes nothing.
    printed = subprocess.run([vramscope.binary(), "schema"], capture_output=True, text=True, check=True).stdout
    assert json.loads(printed) == json.loads((REPO / "docs" / "schema.json").read_text())
    assert json.loads(printed)["schema_version"] == _documents.SCHEMA_VERSION
    generator = REPO / "scripts" / "gen_python_types.py"
    done = subprocess.run([sys.executable, str(generator), "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def has_required_keys(value: Any, kind: Any, where: str) -> None:
    """`value` has every key `kind` (a TypedDict) requires, at the top level."""
    missing = set(kind.__required_keys__) - set(value)
    assert not missing, f"{where}: {kind.__name__} requires {sorted(missing)}"
    unknown = set(value) - set(kind.__required_keys__) - set(kind.__optional_keys__)
    assert not unknown, f"{where}: keys {kind.__name__} does not name: {sorted(unknown)}"


def test_answers_have_the_keys_their_types_name() -> None:
    facts = vramscope.summary(FORWARD_FP32)
    has_required_keys(facts, _documents.InfoDocument, "summary")
    info = facts.document
    assert "run" not in info
    for device in info["devices"]:
        has_required_keys(device, _documents.DeviceSummary, "summary's device")
    change = vramscope.compare(
        FORWARD_FP32, FORWARD_MIXED, fail_if_peak_grows=5, fail_if_category_grows={"activation": 10}
    )
    has_required_keys(change, _documents.DiffDocument, "compare")
    assert "ranks" not in change
    assert change["gates_hold"] is False
    assert [gate["words"].endswith("FAILED") for gate in change["gates"]] == [True, True]
    assert change["b"]["peak_allocated_bytes"] > change["a"]["peak_allocated_bytes"]
