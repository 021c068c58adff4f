"""Drives `vramscope mcp` with the official MCP client (the `mcp` package from PyPI): a consistency
test, every tool's document checked against the CLI's own JSON on the same files, and its numbers
also against an independent reference (scripts/reference/snapshot_reference.py on the snapshots,
the hand-made snapshot's own numbers for the OOM).

    python mcp_client.py VRAMSCOPE_BIN WORK_DIR FIXTURES_DIR

WORK_DIR is an empty directory for the files made here (a run of ranks, a snapshot with an OOM).
Prints one line per check; exits non-zero (with the difference) on the first that fails.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from oom_snapshot import write_oom_snapshot

from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

BIN, WORK, FIXTURES = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
SNAPSHOTS = FIXTURES / "pytorch-snapshots"
FULLSTEP = SNAPSHOTS / "gpt_ctx128_fullstep_fp32.pickle"
FORWARD = SNAPSHOTS / "gpt_ctx128_forward_fp32.pickle"
MIXED = SNAPSHOTS / "gpt_ctx128_forward_mixed.pickle"
STANFORD = SNAPSHOTS / "stanford_cs336_a2_memory_snapshot.pickle"
TOOLS = {"summary", "peak_breakdown", "memory_at", "compare", "growth", "oom", "advise", "estimate"}
checks = 0


def check(ok, what, detail=""):
    global checks
    if not ok:
        sys.exit(f"FAILED: {what}\n{detail}"[:20000])
    checks += 1
    print(f"ok: {what}")


def cli(*args, status=(0,)):
    """The CLI's JSON for the same question, and its exit status."""
    run = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    check(run.returncode in status, f"vramscope {' '.join(map(str, args))} exits {status}", run.stderr)
    return json.loads(run.stdout), run.returncode


def answer(result, what):
    """A tool's structured answer; the text content says the same."""
    check(not result.is_error, f"{what} answers", result.content[0].text if result.content else "")
    text = json.loads(result.content[0].text)
    check(text == result.structured_content, f"{what}: its text and its structured content agree")
    return result.structured_content


REFERENCE = Path(__file__).resolve().parents[2] / "scripts" / "reference" / "snapshot_reference.py"
# The independent reference's per-device keys (scripts/reference/snapshot_reference.py replays a
# snapshot on its own): the MCP's numbers are checked against it, not only against the CLI's.
REFERENCE_KEYS = ["peak_allocated_bytes", "peak_reserved_bytes", "allocated_bytes", "reserved_bytes", "segments",
                  "categories_at_peak"]


def reference(path):
    run = subprocess.run([sys.executable, str(REFERENCE), str(path)], capture_output=True, text=True, check=True)
    return {d["device"]: d for d in json.loads(run.stdout)["devices"]}


def make_rank_dir(name, source, ranks=3):
    directory = WORK / name
    directory.mkdir()
    for rank in range(ranks):
        shutil.copy(source, directory / f"snap_rank{rank}.pickle")
    return directory


async def tools_answer_as_the_cli_does(client):
    listed = await client.list_tools()
    names = {t.name for t in listed.tools}
    check(names == TOOLS, "tools/list lists the eight tools", str(names))
    check(listed.next_cursor is None, "every tool is on one page")
    for tool in listed.tools:
        schema = tool.input_schema
        check(schema.get("type") == "object" and schema.get("additionalProperties") is False and tool.description,
              f"{tool.name}: an object schema and a description")

    # summary: one trace, equal to `info --json`.
    got = answer(await client.call_tool("summary", {"paths": str(FULLSTEP)}), "summary")
    want, _ = cli("info", "--json", FULLSTEP)
    check(got == want, "summary equals info --json", json.dumps([got, want])[:4000])
    theirs = reference(FULLSTEP)
    for device in got["devices"]:
        r = theirs.get(device["device"], {})
        check(all(device[k] == r.get(k) for k in REFERENCE_KEYS), f"summary {device['label']}: the reference's numbers",
              json.dumps([{k: device[k] for k in REFERENCE_KEYS}, {k: r.get(k) for k in REFERENCE_KEYS}])[:2000])

    # summary with every iteration, a page at a time (a generated snapshot of 5 iterations).
    steps = WORK / "steps.pickle"
    generator = Path(__file__).resolve().parents[2] / "scripts" / "gen_snapshot.py"
    subprocess.run([sys.executable, str(generator), "--entries", "20000", "--out", str(steps)], check=True,
                   capture_output=True)
    want, _ = cli("info", "--json", "--all-phases", steps)
    got = answer(await client.call_tool("summary", {"paths": [str(steps)], "all_phases": True, "offset": 1, "limit": 1}),
                 "summary, all phases, page 2")
    for i, (g, w) in enumerate(zip(got["devices"], want["devices"])):
        for key in ("phases", "iterations"):
            whole = w["phases"][key]
            check(len(whole) > 2 and g["phases"][key] == whole[1:2], f"device {i}: {key} page 2 is the CLI's item 2")
            listed = [l for l in got["page"]["lists"] if l["list"] == f"/devices/{i}/phases/{key}"]
            check(listed and listed[0]["total"] == len(whole), f"device {i}: the page says {key}' total")
    check(got["page"]["next_offset"] == 2, "the page gives the next offset")
    last = answer(await client.call_tool("summary", {"paths": str(steps), "all_phases": True, "offset": 1, "limit": 500}),
                  "summary, all phases, the rest")
    check(last["page"]["next_offset"] is None, "the last page says there is no more")
    check(last["devices"][0]["phases"]["phases"] == want["devices"][0]["phases"]["phases"][1:], "the rest, whole")

    # summary of a run of ranks, paged.
    ranks = make_rank_dir("ranks_a", FORWARD)
    want, _ = cli("info", "--json", ranks)
    got = answer(await client.call_tool("summary", {"paths": str(ranks), "limit": 2}), "summary of a run of ranks")
    check(got["run"]["ranks"] == want["run"]["ranks"][:2], "a run's ranks, the first page of 2")
    check(got["page"]["next_offset"] == 2 and got["page"]["lists"][0]["total"] == 3, "the run's page says 3 ranks")
    got["run"]["ranks"] = want["run"]["ranks"]
    del got["page"]
    check(got == want, "the rest of the run's summary equals info --json")

    # peak_breakdown: info --json --blocks N, at the peak.
    want, _ = cli("info", "--json", "--blocks", 3, FULLSTEP)
    got = answer(await client.call_tool("peak_breakdown", {"path": str(FULLSTEP), "blocks": 3}), "peak_breakdown")
    check(got["largest_blocks"] == want["largest_blocks"], "the largest blocks at the peak equal info --blocks 3")
    check(len(got["largest_blocks"]["devices"][0]["blocks"]) == 3, "three blocks, as asked")
    for g, w in zip(got["devices"], want["devices"], strict=True):
        for key in ("peak_allocated_bytes", "peak_reserved_bytes", "categories_at_peak", "live_blocks_at_peak"):
            check(g[key] == w[key], f"peak_breakdown {g['label']}: {key} equals info's")

    # memory_at: info --json --at WHEN --blocks N.
    want, _ = cli("info", "--json", "--at", "backward", "--blocks", 5, FULLSTEP)
    got = answer(await client.call_tool("memory_at", {"path": str(FULLSTEP), "when": "backward", "blocks": 5}), "memory_at")
    check(got["at"] == want["at"] and got["largest_blocks"] == want["largest_blocks"],
          "memory at backward equals info --at backward", json.dumps([got, want["at"]])[:4000])
    check(sum(got["at"]["devices"][0]["categories"].values()) == got["at"]["devices"][0]["allocated_bytes"],
          "the categories at the instant add up to its allocated bytes")

    # compare, with gates: diff --json and its exit status.
    want, status = cli("diff", "--json", "--fail-if-peak-grows", 5, "--fail-if-category-grows", "activation=10",
                       "--fail-if-phase-grows", "forward=5", FORWARD, MIXED, status=(0, 1))
    got = answer(await client.call_tool("compare", {
        "a": str(FORWARD), "b": str(MIXED), "fail_if_peak_grows": 5,
        "fail_if_category_grows": {"activation": 10}, "fail_if_phase_grows": {"forward": 5}}), "compare")
    check(got["gates_hold"] == (status == 0), "gates_hold is diff's exit status")
    got.pop("page", None)
    check(got == want, "compare equals diff --json", json.dumps([got, want])[:4000])
    for side, path in (("a", FORWARD), ("b", MIXED)):
        r = reference(path)[got[side]["device"]]
        keys = ["peak_allocated_bytes", "peak_reserved_bytes", "categories_at_peak"]
        check(all(got[side][k] == r[k] for k in keys), f"compare {side}: the reference's peaks and categories",
              json.dumps([{k: got[side][k] for k in keys}, {k: r[k] for k in keys}])[:2000])
    check(len(got["gates"]) == 3, "three gates checked")

    # compare of two runs of ranks, paired by number.
    other = make_rank_dir("ranks_b", MIXED)
    want, status = cli("diff", "--json", ranks, other, status=(0,))
    got = answer(await client.call_tool("compare", {"a": str(ranks), "b": str(other), "limit": 500}), "compare of ranks")
    check(got["gates_hold"] is True, "no gate: the ranks' comparison holds")
    check(got.pop("page")["lists"][0]["total"] == 3, "the ranks' page says 3 ranks")
    check(got == want, "compare of ranks equals diff --json", json.dumps([got, want])[:4000])

    # growth: each device's finding, as info --json has it.
    want, _ = cli("info", "--json", STANFORD)
    got = answer(await client.call_tool("growth", {"path": str(STANFORD)}), "growth")
    for g, w in zip(got["devices"], want["devices"], strict=True):
        check(g["growth"] == w.get("growth"), f"growth on {g['label']} equals info's", json.dumps([g, w.get("growth")]))
        check(g["words"], f"growth on {g['label']} is said in words")

    # oom: info --oom --json, on a snapshot with an OOM and on one without.
    oom = write_oom_snapshot(WORK / "oom.pickle")
    want, _ = cli("info", "--oom", "--json", oom)
    got = answer(await client.call_tool("oom", {"path": str(oom)}), "oom")
    check(got == want and got["oom_count"] == 1, "the OOM post-mortem equals info --oom --json", json.dumps(got)[:3000])
    # The snapshot is made by hand above: 64 MiB asked with 1 MiB free on the device, 12 MiB
    # allocated in a 20 MiB segment.
    mb = 1 << 20
    first = got["ooms"][0]
    check((first["requested_bytes"], first["device_free_bytes"], first["allocated_bytes"], first["reserved_bytes"])
          == (64 * mb, mb, 12 * mb, 20 * mb), "the post-mortem's numbers are the hand-made snapshot's", json.dumps(first)[:2000])
    check(got["ooms"][0]["words"], "the post-mortem is said in words")
    got = answer(await client.call_tool("oom", {"path": str(FULLSTEP)}), "oom with none")
    check(got["oom_count"] == 0 and got["ooms"] == [], "a trace without an OOM says so")

    # advise: advise --json with a target.
    want, _ = cli("advise", "--json", "--target-bytes", "20GiB", "--gpus", 2, FORWARD)
    got = answer(await client.call_tool("advise", {"path": str(FORWARD), "target_bytes": "20GiB", "gpus": 2}), "advise")
    check(got == want, "advise equals advise --json --target-bytes 20GiB --gpus 2")
    got = answer(await client.call_tool("advise", {"path": str(FORWARD), "target_bytes": 20 << 30, "gpus": 2}), "advise")
    check(got == want, "a target in bytes is the same target")

    # estimate: a program run on the emulated GPU, as estimate --json runs it. It prints (--print)
    # and the protocol is unharmed: its output goes to the server's standard error. The summary's
    # times are the run's own; everything else is the same run to run.
    train = [sys.executable, str(Path(__file__).resolve().parents[2] / "samples" / "pytorch" / "train.py"),
             "--layers", "1", "--steps", "2", "--d-model", "64", "--vocab", "256", "--seq-len", "32", "--print"]
    want, _ = cli("estimate", "--json", "--gpu", "a10", "--", *train)
    got = answer(await client.call_tool("estimate", {"command": train, "gpu": "a10"}), "estimate")
    stable = ("target", "fits", "devices", "rests_on", "standins", "not_modelled", "context_bytes", "exit_code")
    check({k: got.get(k) for k in stable} == {k: want.get(k) for k in stable}, "estimate equals estimate --json",
          json.dumps([got, want])[:4000])
    check(got["devices"][0]["peak_allocated_bytes"] > 0 and got["target"]["name"] == "NVIDIA A10",
          "estimate ran on the A10", json.dumps(got["devices"]))

    # Failures come back as results the model can read, naming what is wrong.
    missing = WORK / "no_such.pickle"
    result = await client.call_tool("summary", {"paths": str(missing)})
    check(result.is_error and str(missing) in result.content[0].text, "a missing file is an error naming it",
          result.content[0].text)
    result = await client.call_tool("memory_at", {"path": str(FULLSTEP), "when": "sometime"})
    check(result.is_error and "when" in result.content[0].text, "a bad instant is an error naming the argument")
    result = await client.call_tool("peak_breakdown", {"path": str(FULLSTEP), "blocks": "many"})
    check(result.is_error and "blocks" in result.content[0].text, "a wrong type is an error naming the argument")
    result = await client.call_tool("compare", {"a": str(FORWARD), "b": str(MIXED), "fail_if_category_grows": {"cats": 1}})
    check(result.is_error and "cats" in result.content[0].text, "an unknown category is an error naming it")
    garbage = WORK / "garbage.pickle"
    garbage.write_bytes(os.urandom(4096))
    result = await client.call_tool("summary", {"paths": str(garbage)})
    check(result.is_error and str(garbage) in result.content[0].text, "a corrupt file is an error naming it")
    try:
        await client.call_tool("delete_everything", {})
        check(False, "an unknown tool is refused")
    except MCPError as e:
        check(e.error.code == -32602, "an unknown tool is an invalid-params error", str(e))
    # Still serving after all of that.
    got = answer(await client.call_tool("summary", {"paths": str(MIXED)}), "summary after errors")
    check(got == cli("info", "--json", MIXED)[0], "the server answers as before after the errors")


async def main():
    params = StdioServerParameters(command=BIN, args=["mcp"], cwd=str(WORK))
    # The default client first asks `server/discover` (2026 protocol) and falls back to the
    # handshake on an error: the server must answer at once, not leave it to time out.
    started = time.monotonic()
    async with Client(params) as client:
        connected = time.monotonic() - started
        check(connected < 5, f"the default client connects in {connected:.2f} s (no discovery timeout)")
        await tools_answer_as_the_cli_does(client)
    # The low-level session with the handshake, as older clients speak it.
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            check(init.protocol_version == "2025-11-25" and init.server_info.name == "vramscope",
                  "the handshake agrees on 2025-11-25", str(init))
            result = await session.call_tool("summary", {"paths": "../" + WORK.name + "/ranks_a"})
            check(not result.is_error and len(result.structured_content["run"]["ranks"]) == 3,
                  "a path relative to the server's directory")


asyncio.run(main())
print(f"all {checks} checks passed")
