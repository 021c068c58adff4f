#!/usr/bin/env python3
"""PyTorch's MemoryViz (the web viewer of CUDA memory snapshots) against the desktop app, opening
the same snapshot pickle: time to the first painted frame with the data, and peak memory.

    scripts/bench-memoryviz.py [--runs N] [--memoryviz-dir DIR] [--vramscope BIN]
                               [--timeout S] [--screenshot PNG] FILE.pickle

MemoryViz runs in headless Chromium (/usr/bin/chromium) on a page served from 127.0.0.1 that
loads the snapshot by URL, the way its `add_remote_files` does, in its default view (Active
Memory Timeline). Its time runs from launching the browser to the page saying, two animation
frames after the timeline's polygons were drawn, that it is done. Peak memory is sampled from
/proc every 20 ms: the largest renderer's RSS, and the sum of RSS over the whole browser's
process tree (which counts pages shared between its processes more than once). The app runs
as `vramscope open FILE --screenshot` under Xvfb with VRAMSCOPE_TIMINGS=1, which prints its
first frame with the trace (from its process start) and its peak RSS up to then (VmHWM, exact,
where MemoryViz's sampling can only miss a peak); /usr/bin/time -v gives its peak RSS over the
whole run, the analyses after the first frame and the screenshot's encoding included. The
two take turns in each round, and the file is read once first so both read it from the cache.

DIR (default $MEMORYVIZ_DIR or /var/tmp/vramscope-bench/memoryviz) holds MemoryViz.js and
process_alloc_data.js from a PyTorch checkout's torch/utils/viz/; they are used as they are
and never kept in this repository. d3 v7, which MemoryViz imports from a CDN, is installed
from npm into /var/tmp/vramscope-bench/memoryviz-npm when missing and mapped onto the CDN URLs
with an import map. BIN defaults to $CARGO_TARGET_DIR/release/vramscope (CARGO_TARGET_DIR
defaulting to /var/tmp/vramscope-target). --screenshot saves the MemoryViz page as it was when
done, in the last round. Needs chromium, node/npm, xvfb-run and GNU time; standard library only.
"""

import argparse
import base64
import functools
import http.server
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CHROMIUM = "/usr/bin/chromium"
NPM_DIR = "/var/tmp/vramscope-bench/memoryviz-npm"
D3 = os.path.join(NPM_DIR, "node_modules", "d3", "dist", "d3.min.js")
SAMPLE_S = 0.02

# Lists the names the d3 bundle puts on `window.d3`, so that the shim can export every one.
D3_KEYS = """const vm = require('vm'), fs = require('fs'); const g = {}; vm.createContext(g);
vm.runInContext(fs.readFileSync(process.argv[1], 'utf8'), g);
console.log(JSON.stringify(Object.keys(g.d3)));"""

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>MemoryViz benchmark</title>
<script src="d3.min.js"></script>
<script type="importmap">IMPORT_MAP</script>
</head><body>
<script type="module">
const post = (path, body) => fetch(path, {method: 'POST', body: JSON.stringify(body)});
const fail = e => post('/error', {error: String((e && (e.stack || e.message)) || e)});
window.addEventListener('error', e => fail(e.error || e.message));
window.addEventListener('unhandledrejection', e => fail(e.reason));
// MemoryPlot draws one polygon per allocation (and one for the small ones summed) inside a
// clipped group; the minimap's single polygon is outside it.
const drawn = () => [...document.querySelectorAll('g[clip-path] polygon')]
  .filter(p => p.getAttribute('points')).length;
import('./MemoryViz.js').then(viz => {
  viz.add_remote_files([{name: SNAPSHOT_NAME, url: '/snapshot.pickle'}]);
  const poll = setInterval(() => {
    const polygons = drawn();
    if (polygons === 0) return;
    clearInterval(poll);
    requestAnimationFrame(() => requestAnimationFrame(() =>
      post('/done', {t: performance.now(), polygons})));
  }, 10);
}).catch(fail);
</script>
</body></html>
"""


class BenchError(Exception):
    pass


class Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the page's directory; a POST (/done or /error) is queued with when it came."""

    def do_POST(self):
        arrived = time.monotonic()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.reports.put((self.path, arrived, json.loads(body or b"{}")))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args):
        pass


def write_page(page_dir, viz_dir, snapshot):
    """The page, a d3 shim standing for every CDN URL MemoryViz imports, and links to the rest."""
    with open(os.path.join(viz_dir, "MemoryViz.js"), encoding="utf-8") as f:
        urls = sorted(set(re.findall(r"""from\s+["'](https?://[^"']+)["']""", f.read())))
    node = subprocess.run(["node", "-e", D3_KEYS, D3], check=True, capture_output=True, text=True)
    keys = json.loads(node.stdout)
    with open(os.path.join(page_dir, "d3-shim.js"), "w") as f:
        # globalThis, not window: d3 has a `window` of its own, which the shim exports.
        f.write(f"export default globalThis.d3;\nexport const {{{', '.join(keys)}}} = globalThis.d3;\n")
    imports = json.dumps({"imports": {url: "./d3-shim.js" for url in urls}})
    name = json.dumps(os.path.basename(snapshot))
    with open(os.path.join(page_dir, "index.html"), "w") as f:
        f.write(PAGE.replace("IMPORT_MAP", imports).replace("SNAPSHOT_NAME", name))
    links = {"MemoryViz.js": os.path.join(viz_dir, "MemoryViz.js"), "d3.min.js": D3,
             "process_alloc_data.js": os.path.join(viz_dir, "process_alloc_data.js"),
             "snapshot.pickle": snapshot}
    for name, target in links.items():
        os.symlink(os.path.abspath(target), os.path.join(page_dir, name))


def tree_rss_kb(root, renderers):
    """RSS summed over `root` and its descendants, and the largest renderer's, in kB.
    `renderers` keeps the pids seen to be renderers (a child of the zygote takes its
    --type=renderer command line a while after it is forked)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(name))
    total = largest = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
            if pid not in renderers:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"--type=renderer" in f.read():
                        renderers.add(pid)
        except OSError:
            continue
        total += rss
        if pid in renderers:
            largest = max(largest, rss)
    return total, largest


class Sampler(threading.Thread):
    """Keeps the peaks of tree_rss_kb(pid) until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.total, self.renderer = pid, 0, 0
        self.stopped = threading.Event()

    def run(self):
        renderers = set()
        while True:
            total, renderer = tree_rss_kb(self.pid, renderers)
            self.total, self.renderer = max(self.total, total), max(self.renderer, renderer)
            if self.stopped.wait(SAMPLE_S):
                return

    def stop(self):
        self.stopped.set()
        self.join()


class Cdp:
    """The DevTools protocol over --remote-debugging-pipe: NUL-terminated JSON, in on the
    browser's fd 3 and out on its fd 4."""

    def __init__(self):
        (self.cmd_r, self.cmd_w), (self.out_r, self.out_w) = os.pipe(), os.pipe()
        self.last, self.buffer = 0, b""

    def wrap(self, cmd):
        """`cmd` run with the pipes on fds 3 and 4 (sh moves them there, then execs it)."""
        return ["sh", "-c", f'exec "$@" 3<&{self.cmd_r} 4>&{self.out_w}', "sh", *cmd]

    def call(self, method, session=None, **params):
        self.last += 1
        message = {"id": self.last, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self.cmd_w, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self.buffer:
                chunk = os.read(self.out_r, 1 << 20)
                if not chunk:
                    raise BenchError("chromium closed the DevTools pipe")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\0", 1)
            reply = json.loads(line)
            if reply.get("id") == self.last:
                if "error" in reply:
                    raise BenchError(f"DevTools {method}: {reply['error']}")
                return reply["result"]

    def screenshot(self, url, out):
        pages = [t for t in self.call("Target.getTargets")["targetInfos"] if t["url"] == url]
        if not pages:
            raise BenchError(f"no page at {url} to take a screenshot of")
        target = pages[0]["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        png = self.call("Page.captureScreenshot", session, format="png")["data"]
        with open(out, "wb") as f:
            f.write(base64.b64decode(png))

    def close(self):
        for fd in (self.cmd_r, self.cmd_w, self.out_r, self.out_w):
            os.close(fd)


def run_memoryviz(server, url, tmp, timeout, screenshot=None):
    """One browser from launch to the page's report: (ms, page's ms, polygons, renderer kB, total kB)."""
    while not server.reports.empty():
        server.reports.get()
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp)
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
           "--window-size=1600,1000", "--no-first-run", "--disable-extensions"]
    cdp = Cdp() if screenshot else None
    if cdp:
        cmd = cdp.wrap(cmd + ["--remote-debugging-pipe"])
    log = open(os.path.join(tmp, "chromium.log"), "w")
    start = time.monotonic()
    proc = subprocess.Popen(cmd + [url], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            pass_fds=(cdp.cmd_r, cdp.out_w) if cdp else ())
    sampler = Sampler(proc.pid)
    sampler.start()
    try:
        try:
            path, arrived, report = server.reports.get(timeout=timeout)
        except queue.Empty:
            said = tail(log.name)
            raise BenchError(f"MemoryViz drew nothing in {timeout} s; chromium said:\n{said}") from None
        sampler.stop()
        if path != "/done":
            raise BenchError(f"MemoryViz failed: {report.get('error')}")
        if cdp:
            cdp.screenshot(url, screenshot)
        return (arrived - start) * 1000, report["t"], report["polygons"], sampler.renderer, sampler.total
    finally:
        sampler.stop()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()
        if cdp:
            cdp.close()
        shutil.rmtree(profile, ignore_errors=True)


def run_vramscope(binary, snapshot, tmp, timeout):
    """One `vramscope open --screenshot` under Xvfb: (first frame ms, peak RSS kB up to the first
    frame, peak RSS kB of the whole run)."""
    cmd = ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", "/usr/bin/time", "-v",
           binary, "open", snapshot, "--screenshot", os.path.join(tmp, "vramscope.png")]
    env = dict(os.environ, VRAMSCOPE_TIMINGS="1")
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"vramscope took over {timeout} s") from None
    said = out.stdout + out.stderr
    ms = re.search(r"first frame with the trace after (\d+) ms(?: \(VmHWM: (\d+) kB)?", said)
    kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", said)
    if out.returncode != 0 or not ms or not kb:
        raise BenchError(f"vramscope failed (exit {out.returncode}):\n{said[-3000:]}")
    # A build older than the peak printed at the first frame: the whole run's, an upper bound.
    return float(ms.group(1)), int(ms.group(2) or kb.group(1)), int(kb.group(1))


def tail(path, n=3000):
    with open(path, errors="replace") as f:
        return f.read()[-n:]


def ensure_d3():
    if not os.path.exists(D3):
        print(f"installing d3 v7 from npm into {NPM_DIR}", file=sys.stderr)
        subprocess.run(["npm", "install", "--prefix", NPM_DIR, "--no-audit", "--no-fund", "d3@7"],
                       check=True)


def cell(values, unit=1):
    values = [v / unit for v in values]
    return f"{', '.join(f'{v:.0f}' for v in values)} (median {statistics.median(values):.0f})"


def ratio(a, b):
    return f"{statistics.median(a) / statistics.median(b):.1f}x"


def main():
    target = os.environ.get("CARGO_TARGET_DIR", "/var/tmp/vramscope-target")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", metavar="FILE.pickle")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--memoryviz-dir",
                        default=os.environ.get("MEMORYVIZ_DIR", "/var/tmp/vramscope-bench/memoryviz"))
    parser.add_argument("--vramscope", default=os.path.join(target, "release", "vramscope"))
    parser.add_argument("--timeout", type=float, default=180, help="seconds one run may take")
    parser.add_argument("--screenshot", metavar="PNG", help="save the MemoryViz page when done")
    args = parser.parse_args()

    missing = [n for n in ("MemoryViz.js", "process_alloc_data.js")
               if not os.path.isfile(os.path.join(args.memoryviz_dir, n))]
    if missing:
        sys.exit(f"{args.memoryviz_dir} lacks {' and '.join(missing)}: copy MemoryViz.js and "
                 "process_alloc_data.js there from a PyTorch checkout's torch/utils/viz/ "
                 "(or point --memoryviz-dir or MEMORYVIZ_DIR at that folder)")
    needed = [(args.file, "no such snapshot"), (CHROMIUM, "apt-get install chromium"),
              ("/usr/bin/time", "apt-get install time"),
              (args.vramscope, "cargo build --release --bin vramscope")]
    for path, hint in needed:
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: {hint}")
    ensure_d3()
    snapshot = os.path.abspath(args.file)
    with open(snapshot, "rb") as f:
        while f.read(1 << 24):
            pass

    ours, viz = [], []
    with tempfile.TemporaryDirectory(prefix="bench-memoryviz-") as tmp:
        page_dir = os.path.join(tmp, "page")
        os.mkdir(page_dir)
        write_page(page_dir, args.memoryviz_dir, snapshot)
        handler = functools.partial(Handler, directory=page_dir)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads, server.reports = True, queue.Queue()
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        try:
            for i in range(1, args.runs + 1):
                ms, first_kb, kb = run_vramscope(args.vramscope, snapshot, tmp, args.timeout)
                ours.append((ms, first_kb, kb))
                print(f"round {i}: vramscope  first frame {ms:.0f} ms, peak RSS {first_kb / 1024:.0f} MiB "
                      f"up to it, {kb / 1024:.0f} MiB over the whole run", flush=True)
                shot = args.screenshot if i == args.runs else None
                ms, page_ms, polygons, renderer, total = run_memoryviz(server, url, tmp, args.timeout, shot)
                viz.append((ms, renderer, total))
                print(f"round {i}: MemoryViz  first frame {ms:.0f} ms ({page_ms:.0f} ms after the page's "
                      f"start), {polygons} polygons, peak RSS {renderer / 1024:.0f} MiB renderer, "
                      f"{total / 1024:.0f} MiB whole browser", flush=True)
        except BenchError as e:
            sys.exit(f"error: {e}")
        finally:
            server.shutdown()
            server.server_close()

    our_ms, our_first_kb, our_kb = ([run[i] for run in ours] for i in range(3))
    viz_ms, viz_renderer, viz_total = ([run[i] for run in viz] for i in range(3))
    print(f"\n{os.path.basename(snapshot)} ({os.path.getsize(snapshot) / 1e6:.1f} MB), {args.runs} rounds\n")
    print("| | vramscope | MemoryViz (headless Chromium) | MemoryViz / vramscope |")
    print("|---|---|---|---|")
    print(f"| first frame with data, ms | {cell(our_ms)} | {cell(viz_ms)} | {ratio(viz_ms, our_ms)} |")
    print(f"| peak RSS up to the first frame, MiB (MemoryViz: largest renderer) | "
          f"{cell(our_first_kb, 1024)} | {cell(viz_renderer, 1024)} | {ratio(viz_renderer, our_first_kb)} |")
    print(f"| peak RSS up to the first frame, MiB (MemoryViz: whole browser) | same | "
          f"{cell(viz_total, 1024)} | {ratio(viz_total, our_first_kb)} |")
    print(f"| vramscope's peak RSS over the whole run (the analyses after the first frame, the "
          f"screenshot's PNG) | {cell(our_kb, 1024)} | | {ratio(viz_total, our_kb)} (whole browser) |")

if __name__ == "__main__":
    main()
