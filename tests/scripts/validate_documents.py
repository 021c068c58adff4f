"""Validates every JSON answer of the CLI and the MCP server against the schema `vramscope schema`
publishes, with the `jsonschema` package (an implementation of JSON Schema independent of ours).

    python validate_documents.py VRAMSCOPE_BIN WORK_DIR FIXTURES_DIR SAMPLES_DIR

Answers: `info --json` (with --blocks, --all-phases, --at) and `info --oom --json` and
`advise --json` on every fixture and sample, on a snapshot with an OOM and on runs of ranks;
`diff --json` of pairs of traces and of two runs of ranks; the MCP tools that answer with a
document. Each is validated against the document its shape names (`run` when it holds a run of
ranks, `ranks-diff` when it pairs ranks). Fails on the first answer that does not validate, and
when any document was never seen: a check that saw nothing does not pass.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from jsonschema import Draft202012Validator
from oom_snapshot import write_oom_snapshot

BIN, WORK, FIXTURES, SAMPLES = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])

published = json.loads(subprocess.run([BIN, "schema"], capture_output=True, text=True, check=True).stdout)
validators = {}
for name, schema in published["documents"].items():
    Draft202012Validator.check_schema(schema)
    validators[name] = Draft202012Validator(schema)
seen = {name: 0 for name in validators}


def undescribed(value, schema, defs, path=""):
    """The keys of `value` its schema does not name (a schema that leaves additional properties
    open validates them whatever they are; the documents' schemas must still name every key)."""
    while "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[-1]]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            for variant in schema[key]:
                if Draft202012Validator({**variant, "$defs": defs}).is_valid(value):
                    return undescribed(value, variant, defs, path)
            return []
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if not isinstance(extra, dict):
                return []
            return [p for k, v in value.items() for p in undescribed(v, extra, defs, f"{path}/{k}")]
        found = [f"{path}/{k}" for k in value if k not in properties]
        for k, v in value.items():
            if k in properties:
                found += undescribed(v, properties[k], defs, f"{path}/{k}")
        return found
    if isinstance(value, list):
        prefix = schema.get("prefixItems")
        found = []
        for i, v in enumerate(value):
            item = prefix[i] if prefix and i < len(prefix) else schema.get("items", {})
            found += undescribed(v, item if isinstance(item, dict) else {}, defs, f"{path}/{i}")
        return found
    return []


def validate(document, value, what):
    if value.get("schema_version") != published["schema_version"]:
        sys.exit(f"FAILED: {what}: schema_version {value.get('schema_version')!r}, "
                 f"the schema's is {published['schema_version']}")
    errors = sorted(validators[document].iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:10]]
        sys.exit(f"FAILED: {what} does not validate against the schema of {document}:\n" + "\n".join(lines))
    schema = published["documents"][document]
    unnamed = undescribed(value, schema, schema.get("$defs", {}))
    # The MCP server's paging says what it cut in a key of its own.
    unnamed = [key for key in unnamed if key != "/page"]
    if unnamed:
        sys.exit(f"FAILED: {what} has keys the schema of {document} does not name: {unnamed[:10]}")
    seen[document] += 1


def cli(*args, status=(0,)):
    run = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    if run.returncode not in status:
        sys.exit(f"FAILED: vramscope {' '.join(map(str, args))} exited {run.returncode}:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout)


def rank_dir(name, source, ranks):
    directory = WORK / name
    directory.mkdir()
    for rank in range(ranks):
        shutil.copy(source, directory / f"snap_rank{rank}.pickle")
    return directory


snapshots = FIXTURES / "pytorch-snapshots"
traces = sorted(SAMPLES.glob("*.vtrace")) + sorted(snapshots.glob("*.pickle"))
traces += sorted((FIXTURES / "torch-profiler").iterdir())
oom = write_oom_snapshot(WORK / "oom.pickle")
traces.append(oom)
for trace in traces:
    info = cli("info", "--json", trace)
    one = "run" not in info
    validate("info" if one else "run", info, f"info --json {trace.name}")
    if one:
        validate("info", cli("info", "--json", "--blocks", "5", "--all-phases", trace), f"info --blocks {trace.name}")
        # A trace shorter than 1 ms, or without allocator events, refuses the instant (exit 2).
        at = subprocess.run([BIN, "info", "--json", "--at", "+1ms", "--blocks", "3", str(trace)], capture_output=True,
                            text=True)
        if at.returncode == 0:
            validate("info", json.loads(at.stdout), f"info --at {trace.name}")
        elif "give an instant inside it" not in at.stderr and "no allocator events" not in at.stderr:
            sys.exit(f"FAILED: info --at +1ms {trace.name}: {at.stderr}")
        validate("oom", cli("info", "--oom", "--json", trace), f"info --oom {trace.name}")
    advice = cli("advise", "--json", trace, status=(0, 1))
    if "baseline" in advice:
        validate("advise", advice, f"advise --json {trace.name}")

for files in [[SAMPLES / "h200-torch-plain.vtrace"], [SAMPLES / "cpu-ddp-gloo-2ranks.vtrace"],
              [snapshots / "gpt_ctx128_forward_fp32.pickle", snapshots / "gpt_ctx128_forward_mixed.pickle"]]:
    image = WORK / f"report-{len(seen)}-{files[0].stem}.png"
    report = cli("report", *files, "-o", image, "--json", "--blocks", "3")
    if not image.is_file() or len(report["runs"]) != len(files):
        sys.exit(f"FAILED: report --json of {files} did not write {image} or left out a run")
    validate("report", report, f"report --json {' '.join(f.name for f in files)}")

if not cli("info", "--oom", "--json", oom)["ooms"]:
    sys.exit(f"FAILED: {oom} holds an OOM, and info --oom --json explained none")

gates = ["--fail-if-peak-grows", "5", "--fail-if-category-grows", "activation=10", "--fail-if-phase-grows", "forward=5"]
pairs = [
    (SAMPLES / "h200-torch-plain.vtrace", SAMPLES / "h200-torch-bf16.vtrace"),
    (snapshots / "gpt_ctx128_forward_fp32.pickle", snapshots / "gpt_ctx128_forward_mixed.pickle"),
    (snapshots / "gpt_ctx128_forward_fp32.pickle", snapshots / "gpt_ctx128_fullstep_fp32.pickle"),
]
for a, b in pairs:
    validate("diff", cli("diff", "--json", *gates, a, b, status=(0, 1)), f"diff {a.name} {b.name}")
    validate("diff", cli("diff", "--json", "--all-phases", a, b), f"diff --all-phases {a.name} {b.name}")
ranks_a = rank_dir("ranks_a", snapshots / "gpt_ctx128_forward_fp32.pickle", 3)
ranks_b = rank_dir("ranks_b", snapshots / "gpt_ctx128_forward_mixed.pickle", 2)
validate("run", cli("info", "--json", ranks_a), "info --json on a run of ranks")
validate("ranks-diff", cli("diff", "--json", "--fail-if-peak-grows", "1", ranks_a, ranks_b, status=(0, 1)),
         "diff of two runs of ranks")

# An estimate: a small model run on the emulated GPU (this script runs under the torch venv).
train = [sys.executable, str(SAMPLES.parent / "pytorch" / "train.py"), "--layers", "1", "--steps", "1", "--d-model", "64",
         "--vocab", "128", "--seq-len", "16"]
validate("estimate", cli("estimate", "--json", "--gpu", "h100", "--", *train), "estimate --json")
validate("estimate", cli("estimate", "--json", "--gpu", "t4", "--device-memory", "100MiB", "--", *train, status=(1,)),
         "estimate --json that does not fit")

# The MCP server answers with the same documents.
calls = [
    ("growth", "growth", {"path": str(SAMPLES / "h200-torch-plain.vtrace")}),
    ("growth", "growth", {"path": str(SAMPLES / "cpu-ddp-gloo-2ranks.vtrace")}),
    ("summary", "info", {"paths": str(snapshots / "gpt_ctx128_fullstep_fp32.pickle")}),
    ("summary", "run", {"paths": str(ranks_a)}),
    ("compare", "diff", {"a": str(pairs[0][0]), "b": str(pairs[0][1]), "fail_if_peak_grows": 5}),
    ("compare", "ranks-diff", {"a": str(ranks_a), "b": str(ranks_b)}),
    ("oom", "oom", {"path": str(oom)}),
    ("advise", "advise", {"path": str(snapshots / "gpt_ctx128_fullstep_fp32.pickle")}),
    ("peak_breakdown", "breakdown", {"path": str(snapshots / "gpt_ctx128_fullstep_fp32.pickle"), "blocks": 3}),
    ("memory_at", "instant", {"path": str(snapshots / "gpt_ctx128_fullstep_fp32.pickle"), "when": "backward"}),
    ("memory_at", "instant", {"path": str(SAMPLES / "h200-torch-plain.vtrace"), "when": "+1ms", "blocks": 2}),
    ("estimate", "estimate", {"command": train, "gpu": "l4", "context": "1GiB"}),
]
lines = [
    {"jsonrpc": "2.0", "id": 0, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "validate", "version": "0"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]
lines.append({"jsonrpc": "2.0", "id": 1000, "method": "tools/list"})
lines += [{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
          for i, (tool, _, arguments) in enumerate(calls)]
served = subprocess.run([BIN, "mcp"], input="".join(json.dumps(line) + "\n" for line in lines),
                        capture_output=True, text=True, timeout=600)
replies = {r["id"]: r for r in map(json.loads, served.stdout.splitlines())}
# Each tool's own output schema (what a client validates its answers against) holds its answers.
listed = {tool["name"]: tool for tool in replies.get(1000, {}).get("result", {}).get("tools", [])}
if set(listed) != {c[0] for c in calls}:
    sys.exit(f"FAILED: tools/list lists {sorted(listed)}; the calls here cover {sorted({c[0] for c in calls})}")
for name, tool in listed.items():
    schema = tool.get("outputSchema", {})
    if schema.get("type") != "object" or ("properties" not in schema and "anyOf" not in schema):
        sys.exit(f"FAILED: the tool {name}'s output schema says nothing of its answer: {json.dumps(schema)[:500]}")
    Draft202012Validator.check_schema(schema)
# Each tool's input schema, derived from its arguments' type, takes the calls made here and
# refuses what the server refuses.
for tool, _, arguments in calls:
    Draft202012Validator.check_schema(listed[tool]["inputSchema"])
    errors = list(Draft202012Validator(listed[tool]["inputSchema"]).iter_errors(arguments))
    if errors:
        sys.exit(f"FAILED: the tool {tool}'s input schema refuses {arguments}: {errors[0].message}")
for tool, arguments in [("summary", {"paths": "x", "bogus": 1}), ("advise", {"path": "x", "gpus": 0}),
                        ("peak_breakdown", {"path": "x", "blocks": 101}), ("compare", {"a": "x"}),
                        ("summary", {"paths": []}), ("memory_at", {"path": "x", "when": 5}),
                        ("estimate", {"command": []}), ("estimate", {"command": ["python"], "gpus": 0})]:
    if Draft202012Validator(listed[tool]["inputSchema"]).is_valid(arguments):
        sys.exit(f"FAILED: the tool {tool}'s input schema takes {arguments}, which the server refuses")
for i, (tool, document, _) in enumerate(calls):
    reply = replies.get(i + 1, {})
    result = reply.get("result", {})
    if result.get("isError") or "structuredContent" not in result:
        sys.exit(f"FAILED: the MCP tool {tool} gave no structured answer: {json.dumps(reply)[:2000]}")
    validate(document, result["structuredContent"], f"the MCP tool {tool} ({document})")
    errors = list(Draft202012Validator(listed[tool]["outputSchema"]).iter_errors(result["structuredContent"]))
    if errors:
        sys.exit(f"FAILED: the MCP tool {tool}'s answer does not validate against its own output schema: "
                 f"{errors[0].message[:500]}")

unseen = [name for name, count in seen.items() if count == 0]
if unseen:
    sys.exit(f"FAILED: no answer was validated against {', '.join(unseen)}")
print(f"all {sum(seen.values())} answers validate: " + ", ".join(f"{n} {c}" for n, c in seen.items()))
