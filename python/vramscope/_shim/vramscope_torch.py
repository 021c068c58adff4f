"""vramscope's PyTorch shim, loaded by `vramscope record` (see sitecustomize.py beside it).

When the program imports torch, this records into the recording directory
(`VRAMSCOPE_RECORD_DIR`), as JSON lines in `torch.<pid>.jsonl`:

- tensor-level allocations and frees: on CUDA from the caching allocator's own history
  (`torch.cuda.memory._record_memory_history`, drained often, at exit and on OOM), on the CPU from
  the profiler's memory events (`torch.profiler` with `profile_memory=True`; `vramscope_cpu.py`,
  which restarts it only where that is safe for the program);
- tags: parameters by storage with their qualified names, their gradients, optimizer state
  tensors (`exp_avg`, ...), the model's inputs;
- phases: forward, backward, optimizer step, iterations, and each module's forward.

Every time is CLOCK_MONOTONIC in ns, the clock of the driver-level hook. `VRAMSCOPE_TORCH` picks
the source: `auto` (CUDA when available, else the CPU), `cuda`, `cpu` or `off`. Nothing here may
break the program: every hook catches its own errors, reports the first one on stderr and goes on.

Line types (field `t`): `meta`, `frame` (id, file, line, name), `alloc` / `free_requested` /
`free` / `segment_alloc` / `segment_free` / `segment_map` / `segment_unmap` (time, dev, addr,
size, stream, stack: frame ids innermost first), `oom` (time, dev, size, free), `tag` (time, dev,
addr, cat, name), `span` (kind: forward, backward, optimizer_step, iteration, module; name, begin,
end), `autocast` (device_type, dtype: forward ran under autocast), `allocator_conf` (conf: the
allocator's configuration string, from the environment when torch is imported and from each
`torch.cuda.memory._set_allocator_settings` call), `dtypes` (parameters: the model's parameter
bytes by dtype, when they change), `gap` (dev, begin, end, why, detail: a stretch whose CPU
allocations were not seen, the profiler being off).
"""

import atexit
import contextlib
import json
import os
import sys
import threading
import time
import weakref

_DIR = os.environ.get("VRAMSCOPE_RECORD_DIR")
_MODE = os.environ.get("VRAMSCOPE_TORCH", "auto")
# Drain the allocator's history (or restart the CPU profiler) at most this often, at the end of an
# optimizer step; and always at exit.
_DRAIN_EVERY_S = float(os.environ.get("VRAMSCOPE_TORCH_DRAIN_S", "1.0"))
# And on a timer (CUDA), for programs without optimizer steps.
_DRAIN_TIMER_S = float(os.environ.get("VRAMSCOPE_TORCH_DRAIN_TIMER_S", "2.0"))
# The CUDA history's ring buffer: entries between two drains must fit.
_HISTORY_ENTRIES = int(os.environ.get("VRAMSCOPE_TORCH_HISTORY", "1000000"))


def _has_cuda_device(torch):
    """Whether a CUDA device is there, asked without initialising CUDA (through NVML, as
    PyTorch's own fork-safe check does)."""
    if torch.version.cuda is None:
        return False
    count = getattr(torch.cuda, "_device_count_nvml", None)
    if count is not None:
        try:
            found = count()
            if found >= 0:
                return found > 0
        except Exception:
            pass
    return any(os.path.exists(f"/dev/nvidia{i}") for i in range(16))


def _multiprocessing_child():
    """Whether this process was started by multiprocessing (spawn or forkserver)."""
    process = sys.modules.get("multiprocessing.process")
    if process is None:
        return False
    # While a spawned child unpickles its task (when it imports torch) it is "inheriting" and
    # already has its name; its parent is known only afterwards.
    current = process.current_process()
    return (getattr(process, "_parent_process", None) is not None or getattr(current, "_inheriting", False)
            or current.name != "MainProcess")


def _unwrapped(module):
    """The model inside the wrappers that only distribute or compile it (their parameters' names
    would otherwise start with `module.` or `_orig_mod.`)."""
    for _ in range(8):
        if type(module).__name__ in ("DistributedDataParallel", "DataParallel") and hasattr(module, "module"):
            module = module.module
        elif hasattr(module, "_orig_mod"):
            module = module._orig_mod
        else:
            break
    return module


def _clean(name):
    """A qualified name without the wrappers' own levels (torch.compile's `_orig_mod`, DDP's and
    FSDP's `module`... only `_orig_mod` here: the others are real attribute names too)."""
    name = name.replace("_orig_mod.", "")
    return name[len("_orig_mod"):] if name.startswith("_orig_mod") else name


def _clock_offset_ns():
    """Epoch ns minus CLOCK_MONOTONIC ns, from the tightest of a few paired readings."""
    best = None
    for _ in range(5):
        m0 = time.monotonic_ns()
        e = time.time_ns()
        m1 = time.monotonic_ns()
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, e - (m0 + m1) // 2)
    return best[1]



@contextlib.contextmanager
def _profiler_quiet():
    """While the shim's own profiler starts or stops, what the profiler's library prints to
    stderr (kineto's `USDT: ... profiler_start` lines, and its `ERROR: ... gpuGetDeviceCount`
    on a machine without a GPU) goes nowhere: the workload's output stays as it is without
    vramscope. A user who set KINETO_LOG_LEVEL asked for those lines and gets them. Only the
    file descriptor is redirected, for the few milliseconds of the call, after Python's own
    buffers are flushed."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    try:
        sys.stderr.flush()
    except Exception:
        pass
    saved = None
    try:
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
        finally:
            os.close(null)
    except OSError:
        saved = None
    try:
        yield
    finally:
        if saved is not None:
            try:
                os.dup2(saved, 2)
            finally:
                os.close(saved)

class _Recorder:
    def __init__(self, torch, directory=None, in_process=False):
        self.torch = torch
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.drain_lock = threading.Lock()
        # In process (vramscope.record()): started and stopped by the program, inside it; what
        # it installed is taken out again when it stops.
        self.in_process = in_process
        self.undo = []
        self.started_history = False
        self.file = open(os.path.join(directory or _DIR, f"torch.{self.pid}.jsonl"), "a", encoding="utf-8")
        self.offset_ns = _clock_offset_ns()
        self.warned = False
        self.frames = {}
        # Qualified names: of modules by id, of parameters by id.
        self.module_names = {}
        self.param_names = {}
        self.roots = []
        # Last tag written per (device, address): (category, name).
        self.tagged = {}
        # When each parameter's gradient was last tagged (by the parameter's id): the backward
        # and the iteration then. A gradient is tagged at the end of every backward, and at an
        # optimizer step's start unless that backward's end did already.
        self.grad_tagged = {}
        self.backwards = 0
        # When an evaluation began (forwards without gradients after training started: a
        # trainer's validation or evaluation loop), while one runs.
        self.evaluation_start = None
        # Datasets (by id) whose tensors are tagged.
        self.datasets_seen = set()
        self.parameter_dtypes = {}
        self.depth = threading.local()
        self.module_starts = threading.local()
        self.forward_start = None
        self.backward_depth = 0
        self.backward_start = None
        self.step_start = None
        self.iteration_start = None
        self.iteration = 0
        self.last_drain = time.monotonic()
        self.source = None
        # The CPU source (vramscope_cpu.CpuAllocations), when allocations come from the profiler.
        self.cpu = None
        self.autocast_noted = False
        self.seen_history = set()
        self.history_mark = -1
        # Held by a thread while it takes a snapshot (see _WithoutLazyInductor).
        self.taking_snapshot = _WithoutLazyInductor()
        self.closed = False

    # -- output ---------------------------------------------------------------------------------

    def write(self, record):
        with self.lock:
            if not self.closed:
                self.file.write(json.dumps(record, separators=(",", ":")))
                self.file.write("\n")

    def flush(self):
        with self.lock:
            if not self.closed:
                self.file.flush()

    def warn(self, what, error):
        if not self.warned:
            self.warned = True
            print(f"vramscope: PyTorch shim: {what} failed ({error!r}); recording goes on", file=sys.stderr)

    def now(self):
        return time.monotonic_ns()

    # -- sources of allocations ------------------------------------------------------------------

    def start(self, mode=None):
        torch = self.torch
        mode = mode or _MODE
        if mode == "auto":
            mode = "cuda" if _has_cuda_device(torch) else "cpu"
        if mode == "cpu" and _multiprocessing_child():
            # A DataLoader worker or another multiprocessing child: its CPU allocations are not
            # the training's, and the profiler is not safe to stop in a process torn down that
            # way. (On CUDA, children such as mp.spawn'd ranks are recorded.)
            self.closed = True
            self.file.close()
            os.remove(self.file.name)
            return
        self.source = mode
        def number(name):
            value = os.environ.get(name)
            return int(value) if value is not None and value.isdigit() else None

        import socket

        # Where the process runs in a (multi-node) run, as torchrun tells it: its global rank,
        # its node (GROUP_RANK) and its rank on the node.
        self.write({"t": "meta", "pid": self.pid, "torch": torch.__version__, "source": mode,
                    "argv": sys.argv, "time": self.now(),
                    "rank": number("RANK"), "world_size": number("WORLD_SIZE"),
                    "node": number("GROUP_RANK"), "local_rank": number("LOCAL_RANK"),
                    "host": socket.gethostname(), "in_process": self.in_process})
        if mode == "cuda":
            self.note_allocator_conf()
            # Not now: starting the history initialises CUDA, which a program may not want yet
            # (it may fork first, or set CUDA_VISIBLE_DEVICES). PyTorch runs this when it
            # initialises CUDA itself (at once if it already has).
            lazy = getattr(torch.cuda, "_lazy_call", None)
            if lazy is not None:
                lazy(lambda: self.safe(self.start_history))
            else:
                self.start_history()
        elif mode == "cpu":
            try:
                from . import vramscope_cpu
            except ImportError:  # written into a recording's folder, outside the package
                import vramscope_cpu

            self.cpu = vramscope_cpu.CpuAllocations(self, _profiler_quiet)
            self.cpu.start()
        atexit.register(self.close)
        os.register_at_fork(after_in_child=self.forked)
        self.install_hooks()

    def start_history(self):
        torch = self.torch
        if self.closed or os.getpid() != self.pid:
            return
        try:
            torch.cuda.memory._record_memory_history(
                max_entries=_HISTORY_ENTRIES, context="all", stacks="python")
            self.started_history = True
        except RuntimeError as error:
            # backend:cudaMallocAsync keeps no history; its tensors are driver-level allocations
            # one for one, which the hook records and the tags still name.
            self.source = "driver"
            self.write({"t": "meta", "pid": self.pid, "torch": torch.__version__, "source": "driver",
                        "why": str(error), "time": self.now()})
            return
        self.undo.append(self.taking_snapshot.install(torch))
        if self.in_process:
            self.safe(self.note_alive_at_start)
        observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observer is not None:
            observer(self.on_oom)
        # Also drained on a timer, for programs without an optimizer step to drain at.
        threading.Thread(target=self.drain_every, name="vramscope-drain", daemon=True).start()

    def snapshot(self):
        """The allocator's snapshot, taken without importing torch._inductor."""
        with self.taking_snapshot:
            return self.torch.cuda.memory._snapshot()

    def note_alive_at_start(self):
        """In process, recording begins with memory already held: the allocator's segments and
        the blocks alive in them now are written as allocated at the start (their history was
        not recorded, so their stacks are not known)."""
        now = self.now()
        snapshot = self.snapshot()
        self.history_mark = max(self.history_mark, max(
            (e.get("time_us", 0) for t in snapshot.get("device_traces", []) for e in t), default=-1))
        for segment in snapshot.get("segments", []):
            device = segment.get("device", 0)
            address = segment.get("address", 0)
            stream = segment.get("stream", 0)
            self.write({"t": "segment_alloc", "time": now, "dev": device, "addr": address,
                        "size": segment.get("total_size", 0), "stream": stream, "stack": []})
            offset = address
            for block in segment.get("blocks", []):
                size = block.get("size", 0)
                state = block.get("state")
                if state in ("active_allocated", "active_pending_free"):
                    record = {"t": "alloc", "time": now, "dev": device, "addr": block.get("address", offset),
                              "size": size, "stream": stream, "stack": []}
                    self.write(record)
                    # Freed by the program already, waiting for its streams: not allocated.
                    if state == "active_pending_free":
                        self.write(dict(record, t="free_requested"))
                offset += size

    def frame_ids(self, frames):
        ids = []
        for frame in frames or ():
            key = (frame.get("filename", ""), frame.get("line", 0), frame.get("name", ""))
            fid = self.frames.get(key)
            if fid is None:
                fid = len(self.frames)
                self.frames[key] = fid
                self.write({"t": "frame", "id": fid, "file": key[0], "line": key[1], "name": key[2]})
            ids.append(fid)
        return ids

    def drain_history(self):
        """Writes the CUDA allocator's history entries not written yet."""
        snapshot = self.snapshot()
        newest = self.history_mark
        for device, entries in enumerate(snapshot.get("device_traces", [])):
            for entry in entries:
                time_us = entry.get("time_us", 0)
                if time_us < self.history_mark:
                    continue
                key = (device, time_us, entry.get("action"), entry.get("addr"), entry.get("size"))
                if time_us == self.history_mark and key in self.seen_history:
                    continue
                if time_us > newest:
                    newest = time_us
                    self.seen_history = set()
                if time_us == newest:
                    self.seen_history.add(key)
                action = entry.get("action")
                if action == "oom":
                    self.write({"t": "oom", "time": time_us * 1000 - self.offset_ns, "dev": device,
                                "size": entry.get("size", 0), "free": entry.get("device_free", 0)})
                    continue
                kind = {"alloc": "alloc", "free_requested": "free_requested", "free_completed": "free",
                        "segment_alloc": "segment_alloc", "segment_free": "segment_free",
                        "segment_map": "segment_map", "segment_unmap": "segment_unmap"}.get(action)
                if kind is None:
                    continue
                self.write({"t": kind, "time": time_us * 1000 - self.offset_ns, "dev": device,
                            "addr": entry.get("addr", 0), "size": entry.get("size", 0),
                            "stream": entry.get("stream", 0), "stack": self.frame_ids(entry.get("frames"))})
        self.history_mark = newest

    def drain_every(self):
        while not self.closed:
            time.sleep(_DRAIN_TIMER_S)
            if time.monotonic() - self.last_drain >= _DRAIN_TIMER_S:
                self.drain()

    def drain(self, restart=True):
        with self.drain_lock:
            if not self.closed:
                self.drain_locked(restart)

    def drain_locked(self, restart):
        try:
            if self.source == "cuda":
                self.drain_history()
            elif self.source == "cpu":
                self.cpu.drain(restart)
        except Exception as error:
            self.warn("reading allocations", error)
        self.flush()
        self.last_drain = time.monotonic()

    def on_oom(self, device, requested, device_allocated, device_free):
        self.safe(self.drain)

    # -- tags ------------------------------------------------------------------------------------

    def tag(self, tensor, category, name):
        torch = self.torch
        if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
            return
        if category == "input" and tensor.grad_fn is not None:
            return
        # A DTensor (FSDP2's sharded parameters, their gradients and optimizer state): the
        # memory is its local shard's.
        to_local = getattr(tensor, "to_local", None)
        if to_local is not None and type(tensor).__name__ == "DTensor":
            try:
                tensor = to_local()
            except Exception:
                return
        try:
            storage = tensor.untyped_storage()
            address = storage.data_ptr()
        except Exception:
            return
        if address == 0:
            return
        device = tensor.device.index if tensor.device.type == "cuda" else -1
        if device is None:
            device = 0
        # Long-lived tensors are tagged once; gradients and inputs are new tensors each step
        # (often at the same address) and are tagged each time.
        if category in ("parameter", "optimizer_state"):
            key = (device, address)
            if self.tagged.get(key) == (category, name):
                return
            self.tagged[key] = (category, name)
        self.write({"t": "tag", "time": self.now(), "dev": device, "addr": address, "cat": category,
                    "name": name, "size": storage.nbytes()})

    def learn_root(self, module):
        # Weak references: the recorder must never keep the program's model alive (freed at
        # interpreter exit, its tensors would outlive the profiler).
        self.roots = [root for root in self.roots if root() is not None]
        if any(root() is module for root in self.roots):
            return
        self.roots.append(weakref.ref(module))
        model = _unwrapped(module)
        for name, sub in model.named_modules(remove_duplicate=False):
            self.module_names.setdefault(id(sub), _clean(name) or type(model).__name__)
        for name, param in model.named_parameters(remove_duplicate=False):
            self.param_names.setdefault(id(param), _clean(name))

    def tag_parameters(self):
        dtypes = {}
        for reference in self.roots:
            root = reference()
            if root is None:
                continue
            root = _unwrapped(root)
            for name, param in root.named_parameters():
                self.tag(param, "parameter", _clean(name))
                try:
                    local = param.to_local() if type(param).__name__ == "DTensor" else param
                    dtype = str(local.dtype).replace("torch.", "")
                    dtypes[dtype] = dtypes.get(dtype, 0) + local.numel() * local.element_size()
                except Exception:
                    pass
            # Buffers (running statistics, masks) are model state too; the name says which.
            for name, buffer in root.named_buffers():
                self.tag(buffer, "parameter", f"{_clean(name)} (buffer)")
        # What the parameters are stored in: the advisor proposes 16-bit weights only for a
        # model it knows holds 32-bit ones.
        if dtypes and dtypes != self.parameter_dtypes:
            self.parameter_dtypes = dtypes
            self.write({"t": "dtypes", "parameters": dtypes})

    def param_name(self, param):
        return self.param_names.get(id(param), f"param@{id(param):x}")

    # -- hooks -----------------------------------------------------------------------------------

    def install_hooks(self):
        torch = self.torch
        import importlib
        import warnings

        # torch.compile warns that global module hooks fire once more for its wrapper: ours are
        # global on purpose and count the wrapper as the outermost module.
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")

        modules = importlib.import_module("torch.nn.modules.module")
        handles = [modules.register_module_forward_pre_hook(self.guard(self.forward_pre))]
        try:
            handles.append(modules.register_module_forward_hook(self.guard(self.forward_post), always_call=True))
        except TypeError:  # torch before 2.1
            handles.append(modules.register_module_forward_hook(self.guard(self.forward_post)))
        optimizer = importlib.import_module("torch.optim.optimizer")
        handles.append(optimizer.register_optimizer_step_pre_hook(self.guard(self.step_pre)))
        handles.append(optimizer.register_optimizer_step_post_hook(self.guard(self.step_post)))
        self.undo.extend(handle.remove for handle in handles)
        real_backward = torch.autograd.backward
        recorder = self

        def backward(*args, **kwargs):
            recorder.safe(recorder.backward_begin)
            try:
                return real_backward(*args, **kwargs)
            finally:
                recorder.safe(recorder.backward_end)

        backward.__wrapped__ = real_backward
        backward.__doc__ = real_backward.__doc__
        torch.autograd.backward = backward
        self.undo.append(lambda: _restore(torch.autograd, "backward", backward, real_backward))
        self.install_loader_hook(importlib)

    def install_loader_hook(self, importlib):
        """Tags what a DataLoader yields as the input it is: both halves of a batch (the targets
        too, which the model never sees), and the batch a trainer fetches ahead (Lightning,
        accelerate) before the model does."""
        try:
            base = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
        except (ImportError, AttributeError):
            return
        real_next = base.__next__
        if getattr(real_next, "_vramscope", False):
            return
        recorder = self

        def __next__(iterator):
            batch = real_next(iterator)
            if not recorder.closed and os.getpid() == recorder.pid:
                # The dataset first: a batch that is a view of it is the dataset's memory.
                recorder.safe(recorder.tag_dataset, getattr(iterator, "_dataset", None))
                recorder.safe(recorder.tag_batch, batch)
            return batch

        __next__._vramscope = True
        __next__.__wrapped__ = real_next
        base.__next__ = __next__
        self.undo.append(lambda: _restore(base, "__next__", __next__, real_next))

    def tag_dataset(self, dataset):
        """Tags the tensors a DataLoader's dataset holds whole (a `TensorDataset`'s, through
        `Subset` and `ConcatDataset`, and the tensor attributes of a dataset class of the
        program's) as the input data they are, once per dataset."""
        if dataset is None or id(dataset) in self.datasets_seen:
            return
        self.datasets_seen.add(id(dataset))
        self.tag_data(dataset, "dataset", 0)

    def tag_data(self, value, name, depth):
        """Tags the tensors in `value` as input: a tensor, those in tuples, lists and dicts, and
        a dataset's (its attributes, and what its __getitem__ closes over), three deep."""
        torch = self.torch
        if depth > 3:
            return
        if isinstance(value, torch.Tensor):
            self.tag(value, "input", name)
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value[:64]):
                self.tag_data(item, f"{name}[{index}]", depth + 1)
        elif isinstance(value, dict):
            for index, (key, item) in enumerate(value.items()):
                if index >= 64:
                    break
                self.tag_data(item, f"{name}[{key!r}]", depth + 1)
        elif isinstance(value, torch.utils.data.Dataset):
            # Subset and ConcatDataset hold theirs in `dataset` and `datasets`; a dataset class
            # holds its tensors in its attributes.
            for key, item in list(vars(value).items())[:64]:
                if key.startswith("__"):
                    continue
                label = "tensors" if key == "tensors" else key
                self.tag_data(item, name if key in ("dataset", "datasets") else f"{name}.{label}", depth + 1)
            # A dataset class defined where its data is (a closure over a TensorDataset or a
            # tensor) reads it from its __getitem__'s closure.
            getitem = getattr(type(value), "__getitem__", None)
            for cell in (getattr(getitem, "__closure__", None) or ())[:16]:
                try:
                    item = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(item, (torch.Tensor, torch.utils.data.Dataset, list, tuple)) and item is not value:
                    self.tag_data(item, name, depth + 1)

    def tag_batch(self, batch, name="batch"):
        """Tags the tensors of a batch (in tuples, lists and dicts, three deep) as input."""
        self.tag_data(batch, name, 0)

    def safe(self, function, *args):
        try:
            return function(*args)
        except Exception as error:
            self.warn(getattr(function, "__name__", "a hook"), error)
            return None

    def guard(self, function):
        compiling = getattr(getattr(self.torch, "compiler", None), "is_compiling", lambda: False)

        def hook(*args):
            # Inside a torch.compile'd region the hooks do nothing: traced, they would break the
            # graph or force recompiles; the compiled module's own (outer) call is still seen.
            # Nor in a forked child, or once recording has ended.
            if compiling() or self.closed or os.getpid() != self.pid:
                return
            self.safe(function, *args)

        return hook

    def forward_pre(self, module, args):
        depth = getattr(self.depth, "value", 0)
        self.depth.value = depth + 1
        starts = getattr(self.module_starts, "value", None)
        if starts is None:
            starts = self.module_starts.value = []
        starts.append(self.now())
        if depth == 0 and self.backward_depth == 0 and next(module.parameters(), None) is not None:
            self.learn_root(module)
            if self.iteration_start is None:
                self.iteration_start = self.now()
            self.forward_start = self.now()
            self.note_autocast()
            self.tag_parameters()
            for index, value in enumerate(args if isinstance(args, tuple) else (args,)):
                for j, tensor in enumerate(value if isinstance(value, (list, tuple)) else (value,)):
                    self.tag(tensor, "input", f"input[{index}]" + (f"[{j}]" if isinstance(value, (list, tuple)) else ""))
            self.safe(self.note_evaluation)

    def note_allocator_conf(self):
        """Records the caching allocator's configuration as the program has it (the environment
        when torch is imported, then each change it makes at run time)."""
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
        if conf:
            self.write({"t": "allocator_conf", "conf": conf})
        memory = getattr(self.torch.cuda, "memory", None)
        real = getattr(memory, "_set_allocator_settings", None)
        if real is None or getattr(real, "_vramscope", False):
            return
        recorder = self

        def set_allocator_settings(settings, *args, **kwargs):
            result = real(settings, *args, **kwargs)
            if isinstance(settings, str) and not recorder.closed:
                recorder.safe(recorder.write, {"t": "allocator_conf", "conf": settings})
            return result

        set_allocator_settings._vramscope = True
        memory._set_allocator_settings = set_allocator_settings
        self.undo.append(lambda: _restore(memory, "_set_allocator_settings", set_allocator_settings, real))

    def note_autocast(self):
        """Records once whether forward runs under autocast, and in which type."""
        if self.autocast_noted:
            return
        self.autocast_noted = True
        torch = self.torch
        for device_type in ("cuda", "cpu"):
            try:
                if torch.is_autocast_enabled(device_type):
                    dtype = str(torch.get_autocast_dtype(device_type)).replace("torch.", "")
                    self.write({"t": "autocast", "device_type": device_type, "dtype": dtype})
                    return
            except (TypeError, AttributeError, RuntimeError):
                return

    def forward_post(self, module, args, output):
        depth = max(getattr(self.depth, "value", 1) - 1, 0)
        self.depth.value = depth
        starts = getattr(self.module_starts, "value", None) or [self.now()]
        begin = starts.pop()
        end = self.now()
        name = self.module_names.get(id(module), type(module).__name__)
        self.write({"t": "span", "kind": "module", "name": name, "begin": begin, "end": end})
        if depth == 0 and self.forward_start is not None and self.backward_depth == 0:
            self.write({"t": "span", "kind": "forward", "name": "forward", "begin": self.forward_start, "end": end})
            self.forward_start = None
            if self.cpu is not None:
                # Programs without an optimizer step (inference) drain here.
                self.drain_if_due()

    def note_evaluation(self):
        """At a model's call: an evaluation begins at a call without gradients once training has
        run a backward (validation, a trainer's evaluation loop), and ends at the next call with
        them, a backward or an optimizer step. Its span lets what it gathers and drops (the
        predictions of every batch) be told as its temporaries."""
        grad = self.torch.is_grad_enabled() and not self.torch.is_inference_mode_enabled()
        if not grad and self.evaluation_start is None and self.backwards > 0:
            self.evaluation_start = self.now()
        elif grad:
            self.end_evaluation()

    def end_evaluation(self):
        if self.evaluation_start is not None:
            self.write({"t": "span", "kind": "evaluation", "name": "evaluation", "begin": self.evaluation_start,
                        "end": self.now()})
            self.evaluation_start = None

    def backward_begin(self):
        self.end_evaluation()
        self.backward_depth += 1
        if self.backward_depth == 1:
            self.backward_start = self.now()

    def backward_end(self):
        self.backward_depth = max(self.backward_depth - 1, 0)
        if self.backward_depth == 0:
            # The gradients backward made, tagged as it ends: an optimizer stepping with a
            # closure (LBFGS, Lightning) runs backward after its step's start, and a run's last
            # gradients may be freed before any step sees them.
            self.backwards += 1
            self.safe(self.tag_root_gradients)
        if self.backward_depth == 0 and self.backward_start is not None:
            self.write({"t": "span", "kind": "backward", "name": "backward", "begin": self.backward_start,
                        "end": self.now()})
            self.backward_start = None
        if self.backward_depth == 0 and self.cpu is not None:
            self.cpu.at_safe_point()

    def step_pre(self, optimizer, args, kwargs):
        self.end_evaluation()
        self.step_start = self.now()
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.tag_gradient(param)

    def tag_gradient(self, param):
        """Tags `param`'s gradient, unless it was tagged since the last backward in this
        iteration (a new gradient often takes the freed one's place, so its address says
        nothing)."""
        grad = param.grad
        if grad is None:
            return
        when = (self.backwards, self.iteration)
        if self.grad_tagged.get(id(param)) == when:
            return
        self.grad_tagged[id(param)] = when
        self.tag(grad, "gradient", self.param_name(param) + ".grad")

    def tag_root_gradients(self):
        for reference in self.roots:
            root = reference()
            if root is not None:
                for param in _unwrapped(root).parameters():
                    self.tag_gradient(param)

    def step_post(self, optimizer, args, kwargs):
        end = self.now()
        for param, state in optimizer.state.items():
            name = self.param_name(param)
            for key, value in state.items():
                self.tag_state(value, f"{name}.{key}")
        begin = self.step_start if self.step_start is not None else end
        self.write({"t": "span", "kind": "optimizer_step", "name": type(optimizer).__name__, "begin": begin,
                    "end": end})
        self.step_start = None
        start = self.iteration_start if self.iteration_start is not None else begin
        self.write({"t": "span", "kind": "iteration", "name": f"iteration {self.iteration}", "begin": start,
                    "end": end})
        self.iteration += 1
        self.iteration_start = end
        self.drain_if_due()

    def tag_state(self, value, name, depth=0):
        """Tags optimizer state: a tensor, or the tensors of a list or tuple of them (LBFGS keeps
        its history of directions and steps in lists), two deep."""
        if isinstance(value, self.torch.Tensor):
            self.tag(value, "optimizer_state", name)
        elif isinstance(value, (list, tuple)) and depth < 2:
            for index, item in enumerate(value[:1024]):
                self.tag_state(item, f"{name}[{index}]", depth + 1)

    def drain_if_due(self):
        if time.monotonic() - self.last_drain < _DRAIN_EVERY_S:
            return
        if self.cpu is not None:
            # Inside the step's own range: the profiler is restarted where that is safe.
            self.cpu.request()
        else:
            self.drain()

    # -- end -------------------------------------------------------------------------------------

    def close(self):
        if self.closed:
            return
        self.safe(self.end_evaluation)
        self.drain(restart=False)
        if self.cpu is not None:
            self.safe(self.cpu.close)
        if self.in_process:
            # The program goes on: everything installed comes out again, and the allocator's
            # history stops if this recording started it.
            for undo in reversed(self.undo):
                self.safe(undo)
            self.undo = []
            if self.started_history:
                self.safe(self.torch.cuda.memory._record_memory_history, None)
        with self.lock:
            self.closed = True
            self.file.close()
            # On the CPU, a process that never ran a model (a launcher such as torchrun's agent, a
            # helper) is not the training: its allocations would only blur the picture. Inside
            # the program (vramscope.record()) the block is what was asked for, model or not.
            if self.source == "cpu" and not self.roots and not self.in_process:
                os.remove(self.file.name)

    def forked(self):
        # A forked child (a DataLoader worker, say) records nothing of its own: its copy of the
        # profiler and of this file are the parent's. Its locks may have been held by a thread
        # that does not exist in it: they are replaced.
        self.lock = threading.RLock()
        self.drain_lock = threading.Lock()
        self.closed = True


_recorder = None


def _restore(owner, name, ours, original):
    """Puts `original` back as `owner.name` if what is there is still `ours` (something
    installed after us stays, with ours under it, doing nothing once closed)."""
    if getattr(owner, name, None) is ours:
        setattr(owner, name, original)


class _WithoutLazyInductor:
    """Inside `with` on a thread, once installed, `torch._inductor` is not imported there by
    looking it up.

    To name the frames of code that inductor generated, a snapshot looks up `torch._inductor`,
    and that lookup imports it, and torch._dynamo with it, when the program has not. From the
    timer thread, while the program imports torch._dynamo itself (its first optimizer does), the
    two imports wait on each other and Python breaks the program's with an ImportError (PyTorch
    2.11 on an H200, and without vramscope too: a thread taking snapshots while the main thread
    imports torch._dynamo). Taken on the main thread as CUDA starts, the import failed quietly
    there and the program's own import of torch._dynamo failed after it. Not importing it loses
    nothing: until the program imports inductor, no frame is inductor's."""

    def __init__(self):
        self.local = threading.local()

    def __enter__(self):
        self.local.on = True

    def __exit__(self, *exc):
        self.local.on = False

    def install(self, torch):
        """Wraps `torch.__getattr__`; returns what undoes that."""
        real = torch.__dict__.get("__getattr__")
        if real is None:  # before PyTorch's lazy submodules, looking one up never imported it
            return lambda: None
        local = self.local

        def __getattr__(name):
            if name == "_inductor" and getattr(local, "on", False):
                raise AttributeError(f"module 'torch' has no attribute {name!r} (not imported)")
            return real(name)

        torch.__getattr__ = __getattr__
        return lambda: _restore(torch, "__getattr__", __getattr__, real)


def record_in_process(torch, directory, mode="auto"):
    """Starts recording this process's PyTorch memory into `directory` (vramscope.record());
    returns the recorder, whose close() stops it and takes its hooks out again."""
    recorder = _Recorder(torch, directory, in_process=True)
    try:
        recorder.start(mode)
    except BaseException:
        recorder.close()
        raise
    return recorder


def _on_torch_imported(torch):
    global _recorder
    if _recorder is not None or _MODE == "off":
        return
    try:
        _recorder = _Recorder(torch)
        _recorder.start()
    except Exception as error:
        print(f"vramscope: the PyTorch shim could not start ({error!r}); "
              "only driver-level memory is recorded", file=sys.stderr)


class _TorchWatcher:
    """Finds `torch` for the import system and calls `on_import(torch)` once it has been
    imported (the recorder here; the out-of-memory capture in vramscope_oom.py). `mark` names
    the attribute that says a loader is wrapped already for that caller; `done()` says there is
    nothing left to wait for.

    It stays in place until then: libraries ask `importlib.util.find_spec("torch")` before they
    import it, and each answer gets the wrapped loader."""

    def __init__(self, on_import, mark, done=lambda: False):
        self.on_import = on_import
        self.mark = mark
        self.done = done

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.done():
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or getattr(spec.loader, self.mark, False):
            return spec
        loader = spec.loader
        real_exec = loader.exec_module
        watcher = self

        def exec_module(module):
            real_exec(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            watcher.on_import(module)

        loader.exec_module = exec_module
        setattr(loader, self.mark, True)
        return spec


def arm():
    """Waits for the program to import torch (at once if it already has)."""
    if not _DIR or _MODE == "off":
        return
    if "torch" in sys.modules:
        _on_torch_imported(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatcher(_on_torch_imported, "_vramscope_wrapped", lambda: _recorder is not None))
