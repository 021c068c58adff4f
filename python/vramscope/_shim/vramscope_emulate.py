"""The emulated GPU of `vramscope estimate`: the program runs unchanged, as on the GPU it names,
on a machine without one.

- Tensors have no storage: PyTorch's `FakeTensorMode` runs every operator for its shapes, dtypes
  and devices only, on the CPU side too (a model built there and moved costs nothing).
- `torch.cuda` says there is the named GPU: the vramscope library preloaded with the program
  answers the CUDA runtime's device count, device and stream calls (so PyTorch's own CUDA paths,
  the autograd engine's device threads among them, run as on a GPU), and the functions that
  would ask the device itself (its properties, synchronising, seeding its generators) are
  answered here.
- Every tensor made on the device is allocated in the caching allocator's model
  (`vramscope_allocator`), with the program's stack; its storage's end frees it. The program's
  memory calls read that model, and so does the shim's CUDA source, as on a GPU.
- What the GPU's kernels take beside their outputs is added where PyTorch takes it: cuBLAS's
  workspace for each thread and stream that runs a matrix product, and cuBLASLt's.
- `scaled_dot_product_attention` runs the backend PyTorch would pick on that GPU
  (`vramscope_attention`).
- Where the program reads a value (`.item()`, `if loss < x`, printing), it gets a stand-in
  (0, or False), and an operator whose output's size depends on values (`nonzero`,
  `masked_select`, a boolean index) gets the largest size it can have; the place is written to
  the log (`standin` lines).

Installed by `vramscope_torch` when `VRAMSCOPE_EMULATE` holds the device (JSON: name,
total_memory, major, minor, multi_processor_count, count), before the recorder starts.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import re
import sys
import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from . import vramscope_attention, vramscope_tags
    from .vramscope_allocator import Allocator, Settings
else:  # written into a recording's folder by `vramscope record`, outside the package
    import vramscope_attention
    import vramscope_tags
    from vramscope_allocator import Allocator, Settings

_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(torch.__file__)
# Where the frames of dispatching an operator to the fake mode are (innermost ones skipped).
_DISPATCH_DIRS = (
    _HERE,
    os.path.join(_TORCH, "_subclasses") + os.sep,
    os.path.join(_TORCH, "_dynamo") + os.sep,
    os.path.join(_TORCH, "utils", "_stats.py"),
    os.path.join(_TORCH, "utils", "_python_dispatch.py"),
    os.path.join(_TORCH, "_compile.py"),
    os.path.join(_TORCH, "_ops.py"),
)
# Tensors the program makes on the host of up to this many bytes are real: counters, scalars,
# index tables (a device mesh's ranks), whose values the program reads. Larger ones (weights built
# on the host before they move) have no storage.
_HOST_REAL_BYTES = 64 << 10

# Operators whose CUDA kernels take a cuBLAS handle (and so its workspace).
_BLAS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "_addmm_activation"})


def _workspace_bytes(major: int, minor: int) -> int:
    """cuBLAS's workspace (`getChosenWorkspaceSize` in ATen's CublasHandlePool.cpp):
    `CUBLAS_WORKSPACE_CONFIG` (`:SIZE_KIB:COUNT`, summed), else 32 MiB on compute capability 9.0
    and 4096 KiB x 2 + 16 KiB x 8 elsewhere."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if config:
        found = re.findall(r":([0-9]+):([0-9]+)", config)
        if found:
            return sum(int(size) * 1024 * int(count) for size, count in found)
        return 4096 * 1024
    if (major, minor) == (9, 0):
        return 4096 * 8 * 1024
    return 4096 * 1024 * 2 + 16 * 1024 * 8


def _lt_workspace_bytes() -> int | None:
    """cuBLASLt's own workspace (`CUBLASLT_WORKSPACE_SIZE` KiB, 1024 by default), or None where it
    shares cuBLAS's (`TORCH_CUBLASLT_UNIFIED_WORKSPACE=1`)."""
    if os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").lower() in ("1", "true", "on", "yes"):
        return None
    value = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return (int(value) if value.isdigit() else 1024) * 1024


class DeviceProperties:
    """What `torch.cuda.get_device_properties` gives, for the emulated GPU."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name = str(spec.get("name", "NVIDIA GPU"))
        self.total_memory = int(spec.get("total_memory", 0))
        self.major = int(spec.get("major", 9))
        self.minor = int(spec.get("minor", 0))
        self.multi_processor_count = int(spec.get("multi_processor_count", 132))
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.L2_cache_size = int(spec.get("l2_cache_bytes", 50 << 20))
        self.warp_size = 32
        self.max_threads_per_multi_processor = 2048
        self.gcnArchName = ""
        self.uuid = "00000000-0000-0000-0000-000000000000"

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory >> 20}MB, multi_processor_count={self.multi_processor_count}) "
            "[emulated by vramscope estimate]"
        )


class Emulation:
    """The emulated devices of this process, their allocators and what the program was given."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.count = max(int(spec.get("count", 1)), 1)
        self.properties = DeviceProperties(spec)
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or ""
        self.settings = Settings(conf)
        self.allocators = [Allocator(i, self.settings) for i in range(self.count)]
        self.lock = threading.RLock()
        # StorageImpl pointer -> (device, address, bytes)
        self.storages: dict[int, tuple[int, int, int]] = {}
        # (thread, device, stream) that have a cuBLAS (and cuBLASLt) workspace.
        self.blas: set[tuple[int, int, int]] = set()
        self.blas_lt: set[tuple[int, int, int]] = set()
        self.workspace = _workspace_bytes(self.properties.major, self.properties.minor)
        self.lt_workspace = _lt_workspace_bytes()
        # Where the program read values it could not have had: (file, line, function) -> count.
        self.standins: dict[tuple[str, int, str], int] = {}
        self.memory_fraction = [1.0] * self.count
        self.log: Callable[[dict[str, Any]], None] | None = None
        # The attention backends scaled_dot_product_attention chose: backend -> calls.
        self.attention: dict[str, int] = {}

    # -- allocation ------------------------------------------------------------------------------

    def allocator(self, device: int | None) -> Allocator:
        index = 0 if device is None else device
        return self.allocators[index if 0 <= index < self.count else 0]

    def track(self, tensor: torch.Tensor) -> None:
        """Allocates `tensor`'s storage if it is new (and on the device); frees it when it goes."""
        device = tensor.device
        if device.type != "cuda":
            return
        storage = tensor.untyped_storage()
        key = storage._cdata
        nbytes = storage.nbytes()
        held = self.storages.get(key)
        if held is not None:
            if held[2] == nbytes:
                return
            # Resized in place: a new block, the old one freed.
            self.release(key)
        index = device.index or 0
        frames = _frames()
        with self.lock:
            address = self.allocator(index).malloc(nbytes, 0, frames)
            self.storages[key] = (index, address, nbytes)
        weakref.finalize(storage, self.release, key)

    def release(self, key: int) -> None:
        with self.lock:
            held = self.storages.pop(key, None)
            if held is not None:
                self.allocator(held[0]).release(held[1], 0, [])

    def resized(self, storage: Any, device: int) -> None:
        """A storage of the device was resized in place (`untyped_storage().resize_()`, as FSDP
        frees and refills its unsharded parameters): its block goes, and a new one of the new
        size comes, as the caching allocator does."""
        key = storage._cdata
        nbytes = storage.nbytes()
        held = self.storages.get(key)
        if held is not None and held[2] == nbytes:
            return
        frames = _frames()
        with self.lock:
            if held is not None:
                self.storages.pop(key, None)
                self.allocator(held[0]).release(held[1], 0, [])
            if nbytes > 0:
                address = self.allocator(device).malloc(nbytes, 0, frames)
                self.storages[key] = (device, address, nbytes)
                if held is None:
                    weakref.finalize(storage, self.release, key)

    def address_of(self, storage: Any) -> int:
        """A storage's address on the emulated device (0 if it is not there)."""
        held = self.storages.get(storage._cdata)
        return held[1] if held is not None else 0

    def kernel_memory(self, name: str, args: tuple[Any, ...], device: int) -> None:
        """The workspaces the operator's CUDA kernel takes for the first time on this thread."""
        if name not in _BLAS:
            return
        key = (threading.get_ident(), device, 0)
        if key in self.blas and (self.lt_workspace is None or key in self.blas_lt or not _uses_lt(name, args)):
            return
        frames = _frames()
        with self.lock:
            if key not in self.blas:
                self.blas.add(key)
                self.allocator(device).malloc(self.workspace, 0, _named(frames, "cuBLAS workspace"))
            if self.lt_workspace is not None and key not in self.blas_lt and _uses_lt(name, args):
                self.blas_lt.add(key)
                self.allocator(device).malloc(self.lt_workspace, 0, _named(frames, "cuBLASLt workspace"))

    def attended(self, backend: str, query: torch.Tensor) -> None:
        """scaled_dot_product_attention chose `backend` (vramscope_attention)."""
        self.attention[backend] = self.attention.get(backend, 0) + 1

    def standin(self, value_type: str) -> Any:
        """A value the program reads, which an emulated device cannot give: 0 (False)."""
        frame = _user_frame()
        if frame is not None:
            self.standins[frame] = self.standins.get(frame, 0) + 1
            if self.standins[frame] == 1 and self.log is not None:
                self.log({"t": "standin", "file": frame[0], "line": frame[1], "name": frame[2]})
        return {"bool": False, "int": 0, "size": None}.get(value_type, 0.0)


def _named(frames: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
    """The stack of memory a kernel takes, with what it is as its innermost frame."""
    return [{"filename": "<cuda>", "line": 0, "name": what}, *frames]


def _uses_lt(name: str, args: tuple[Any, ...]) -> bool:
    """Whether ATen's addmm takes the cuBLASLt path (`gemm_and_bias`): a 1-D bias, matrices of
    floating point."""
    if name not in ("addmm", "_addmm_activation") or not args:
        return False
    bias = args[0]
    return isinstance(bias, torch.Tensor) and bias.dim() == 1 and bias.dtype.is_floating_point


def _frames() -> list[dict[str, Any]]:
    """The Python stack, innermost first, from the frame that called the operator (PyTorch's
    history's `stacks="python"` form): the fake mode's own frames and this module's are not the
    program's, and a GPU's history would not have them."""
    frames = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_DISPATCH_DIRS):
        frame = frame.f_back
    while frame is not None:
        frames.append({"filename": frame.f_code.co_filename, "line": frame.f_lineno, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


def _user_frame() -> tuple[str, int, str] | None:
    """The innermost frame outside torch and this shim: where the program asked."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith((_HERE, _TORCH, "<frozen")):
            return (filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None


_emulation: Emulation | None = None


def current() -> Emulation | None:
    """This process's emulation, if it runs on one."""
    return _emulation


def install(spec_json: str) -> Emulation:
    """Makes this process run on the emulated device(s) `spec_json` describes."""
    global _emulation
    if _emulation is not None:
        return _emulation
    emulation = Emulation(json.loads(spec_json))
    # Imported before torch.cuda is patched: importing it imports dynamo, which reads torch.cuda's
    # functions by name into its rules.
    import torch._subclasses.fake_tensor  # noqa: F401

    _patch_cuda(emulation)
    _enter_fake_mode(emulation)
    vramscope_tags.address_of = emulation.address_of
    properties = emulation.properties
    vramscope_attention.install((properties.major, properties.minor), emulation.attended)
    _explain_failures()
    _fake_process_groups()
    # Registered first, so it runs after the program's own exit handlers.
    atexit.register(_let_autograd_threads_finish)
    _emulation = emulation
    return emulation


def _autograd_threads_busy() -> bool | None:
    """Whether one of the autograd engine's device threads is doing anything but waiting for
    work (None where the kernel does not say). A thread waiting for work waits without a
    timeout on its queue; one waiting for the GIL waits with one."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if not comm.read().startswith("pt_autograd_"):
                    continue
            with open(f"/proc/self/task/{task}/syscall") as syscall:
                fields = syscall.read().split()
        except OSError:
            continue
        # futex(2) is 202 on x86-64, 98 on arm64; its fourth argument is the timeout.
        if len(fields) < 5 or fields[0] not in ("202", "98") or fields[4] != "0x0":
            return True
    return False


def _let_autograd_threads_finish() -> None:
    """Waits, with the GIL released, for the autograd engine's device threads to drop what
    they hold of the last backward pass.

    The emulated device runs backward on those threads, as a GPU does, and the fake mode is in
    every backward's saved thread-local state: the thread that finishes a backward releases
    that state after the caller has returned, taking the GIL to do it. Were the interpreter
    already finalizing, the thread would be made to exit there, inside a destructor, and the
    C++ runtime would abort the program (\"terminate called without an active exception\")."""
    import time

    quiet = 0
    deadline = time.monotonic() + 2.0
    while quiet < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
        busy = _autograd_threads_busy()
        if busy is None:
            time.sleep(0.05)
            return
        quiet = 0 if busy else quiet + 1


def _value_sized(func: Any, args: Any) -> tuple[tuple[int, ...], torch.dtype] | None:
    """For an operator whose output's size depends on tensor values: the largest shape it can
    have, and its dtype (`nonzero`: every element; `masked_select`: every element selected)."""
    aten = torch.ops.aten
    if func is aten.nonzero.default:
        x = args[0]
        return (x.numel(), x.dim()), torch.int64
    if func is aten.masked_select.default:
        x, mask = args[0], args[1]
        return (torch.broadcast_shapes(x.shape, mask.shape).numel(),), x.dtype  # type: ignore[no-untyped-call]
    return None


def _no_context(device: torch.device) -> None:
    """The emulated device has no CUDA context to create."""


def _enter_fake_mode(emulation: Emulation) -> None:
    import torch.utils
    from torch._subclasses import fake_tensor
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._pytree import tree_flatten

    # PyTorch creates a real tensor on the device once, so that backward finds a CUDA context:
    # the emulated device has no context to create, and the preloaded library answers for it.
    fake_tensor.init_gpu_context = _no_context  # type: ignore[assignment]
    local_scalar = torch.ops.aten._local_scalar_dense.default
    nesting = threading.local()

    class EmulatedDevice(FakeTensorMode):  # type: ignore[no-untyped-call]
        @property
        def avoid_device_init(self) -> bool:
            # The device is not to be touched: a real tensor moved to it (a small one PyTorch
            # would compute for real) is moved as a fake one.
            return True

        def dispatch(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            flat_args, _ = tree_flatten((args, kwargs))
            if _on_host(flat_args, kwargs):
                # The host's own work on the host's own tensors (a step counter, a batch from a
                # data loader): done for real, so the values the program reads are its own.
                return func(*args, **kwargs)
            if func is local_scalar:
                dtype = args[0].dtype
                kind = "bool" if dtype == torch.bool else ("float" if dtype.is_floating_point else "int")
                return emulation.standin(kind)
            # What PyTorch's fake mode does inside one operator (a decomposition into others) is
            # not memory the GPU's kernel takes: only the outermost operator's outputs are.
            depth = getattr(nesting, "depth", 0)
            nesting.depth = depth + 1
            try:
                sized = _value_sized(func, args)
                if sized is not None:
                    # Its size depends on values the emulated GPU does not have: the largest it
                    # can be, and the place said as a stand-in.
                    shape, dtype = sized
                    emulation.standin("size")
                    empty_args = (list(shape),)
                    empty_kwargs = {"dtype": dtype, "device": args[0].device}
                    out = super().dispatch(torch.ops.aten.empty.memory_format, types, empty_args, empty_kwargs)
                else:
                    out = super().dispatch(func, types, args, kwargs)
            finally:
                nesting.depth = depth
            if depth:
                return out
            flat, _ = tree_flatten(out)
            device = None
            for tensor in flat:
                if isinstance(tensor, FakeTensor) and tensor.fake_device.type == "cuda":
                    emulation.track(tensor)
                    device = tensor.fake_device.index or 0
            if device is not None:
                emulation.kernel_memory(func._opname, tuple(args), device)
            elif (
                isinstance(out, FakeTensor)
                and not any(isinstance(a, torch.Tensor) for a in flat_args)
                and out.fake_device.type == "cpu"
                and out.numel() * out.element_size() <= _HOST_REAL_BYTES
            ):
                # A small tensor made on the host (a counter, a scalar): made for real, so that
                # its value is there when the program reads it.
                return func(*args, **kwargs)
            return out

    def _on_host(flat_args: list[Any], kwargs: dict[str, Any]) -> bool:
        """Whether an operator's tensors are all real host tensors and it makes none on the device."""
        tensors = [a for a in flat_args if isinstance(a, torch.Tensor)]
        if not tensors or any(isinstance(t, FakeTensor) or t.device.type != "cpu" for t in tensors):
            return False
        device = kwargs.get("device")
        return device is None or torch.device(device).type == "cpu"

    # No fallback to an operator's real kernel (an extension's own CUDA code): it would need the
    # GPU; an operator without a shape-only implementation is an error the program is told of.
    mode = EmulatedDevice(allow_non_fake_inputs=True, allow_fallback_kernels=False)
    real_swap = torch.utils.swap_tensors

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        # `Module.to()` swaps a fake parameter for its copy on the device; the fake mode's memo
        # holds weak references to both, which a swap refuses. They are forgotten first.
        memo = mode.fake_tensor_converter.tensor_memo
        for key, value in list(memo.items()):
            if value is t1 or value is t2:
                del memo[key]
        real_swap(t1, t2)  # type: ignore[no-untyped-call]

    torch.utils.swap_tensors = swap_tensors
    real_resize = torch.UntypedStorage.resize_

    def resize_(storage: Any, size: int) -> Any:
        result = real_resize(storage, size)
        device = storage.device
        if device.type == "cuda":
            emulation.resized(storage, device.index or 0)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
    # The optimizers' and grad clipping's multi-tensor paths take the types they know: fake tensors
    # are the program's parameters here, and take the path they would on the GPU.
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for supported in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if FakeTensor not in supported:
            supported.append(FakeTensor)
    mode.__enter__()


def _fake_process_groups() -> None:
    """A process group needs no devices here: `init_process_group` makes PyTorch's fake one
    (`torch.testing._internal.distributed.fake_pg`: collectives return at once, with the shapes
    they would have), whatever backend the program names, with the rank and world size it gives
    (or torchrun's)."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    from torch.distributed import distributed_c10d

    real = distributed_c10d.init_process_group

    def init_process_group(
        backend: Any = None,
        init_method: Any = None,
        timeout: Any = None,
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        group_name: str = "",
        pg_options: Any = None,
        device_id: Any = None,
        **kwargs: Any,
    ) -> Any:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if world_size < 0:
            world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if rank < 0:
            rank = int(os.environ.get("RANK", "0"))
        if timeout is not None:
            kwargs["timeout"] = timeout
        # The backend's own options (NCCL's) are not the fake group's.
        return real(
            "fake",
            store=FakeStore(),
            rank=rank,
            world_size=world_size,
            group_name=group_name,
            device_id=device_id,
            **kwargs,
        )

    init_process_group.__doc__ = real.__doc__
    # Replacing torch's function is the point: programs call it by its name.
    distributed_c10d.init_process_group = init_process_group  # type: ignore[assignment]
    dist.init_process_group = init_process_group  # type: ignore[assignment]

    # DDP checks that every rank has the same parameters by gathering their shapes as data: a
    # fake group gathers none, and every rank here runs the same program.
    def same_everywhere(*args: Any, **kwargs: Any) -> None:
        return None

    from torch.distributed import utils as dist_utils
    from torch.nn.parallel import distributed as ddp

    for module in (dist_utils, ddp):
        if hasattr(module, "_verify_param_shape_across_processes"):
            setattr(module, "_verify_param_shape_across_processes", same_everywhere)  # noqa: B010
    _ddp_gradients_in_place(ddp.DistributedDataParallel)


class _KeptBuckets:
    """DDP's reducer, which keeps its first buckets: rebuilding them in the order gradients came
    broadcasts the order as data, which a fake group does not carry. (The buckets' sizes are the
    same either way; only which gradients share one differs.)"""

    def __init__(self, reducer: Any) -> None:
        self._reducer = reducer

    def _rebuild_buckets(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)


def _ddp_gradients_in_place(cls: Any) -> None:
    """DDP reduces each bucket of gradients in place: on the fake group, whose work gives no
    result, a bucket's reduction is its own buffer, given back at once (a hook the program
    registers itself is left as it is)."""
    real_forward = cls.forward
    real_register = cls.register_comm_hook

    def reduced(state: object, bucket: Any) -> Any:
        done: Any = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    # DDP checks a hook's annotations as objects (this module's are strings).
    reduced.__annotations__ = {
        "state": object,
        "bucket": torch.distributed.GradBucket,  # type: ignore[attr-defined]
        "return": torch.futures.Future[torch.Tensor],
    }

    def register_comm_hook(self: Any, state: object, hook: Any) -> Any:
        self._vramscope_hooked = True
        return real_register(self, state, hook)

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(self, "_vramscope_hooked", False):
            self._vramscope_hooked = True
            real_register(self, None, reduced)
        if not isinstance(self.reducer, _KeptBuckets):
            self.reducer = _KeptBuckets(self.reducer)
        return real_forward(self, *args, **kwargs)

    cls.register_comm_hook = register_comm_hook
    cls.forward = forward


def why_it_failed(error: BaseException) -> str | None:
    """What an error the program died of means on the emulated GPU, when it comes of it."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    text = str(error)
    if isinstance(error, DynamicOutputShapeException):
        return (
            f"the operator {text or type(error).__name__} makes a tensor whose size depends on tensor values "
            "(nonzero, unique, masked_select), which the emulated GPU does not have"
        )
    if isinstance(error, DataDependentOutputException):
        return f"the operator {text} needs tensor values, which the emulated GPU does not have"
    name = type(error).__name__
    if name == "UnsupportedOperatorException" or "no fake impl" in text or "meta kernel" in text:
        return (
            f"{text}: an operator with CUDA code of its own (an extension's) and no shape-only implementation; "
            "give it one with torch.library.register_fake, and the estimate can run it"
        )
    if "tensor subclass" in text or "data pointer" in text or "data_ptr" in text:
        return (
            "the program read a tensor's data (.numpy(), a data pointer, a kernel of its own): tensors on the "
            "emulated GPU have shapes and dtypes, not data"
        )
    return None


def _explain_failures() -> None:
    """When the program dies of something the emulation cannot do, says so beside its error."""
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], error: BaseException, traceback: Any) -> None:
        previous(kind, error, traceback)
        why = why_it_failed(error)
        if why is not None:
            print(f"vramscope estimate: {why}", file=sys.stderr)

    sys.excepthook = excepthook


def _alias(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` under another name, as a function of its own: dynamo keeps its rules by
    function, and two names of torch.cuda with different rules must not be one."""

    def alias(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    return alias


def _patch_cuda(emulation: Emulation) -> None:
    cuda = torch.cuda
    memory = torch.cuda.memory
    props = emulation.properties

    def index(device: Any = None) -> int:
        if device is None:
            return cuda.current_device()
        return int(torch.cuda._utils._get_device_index(device, optional=True))

    def alloc(device: Any = None) -> Allocator:
        return emulation.allocator(index(device))

    def get_device_properties(device: Any = None) -> DeviceProperties:
        return props

    def get_device_name(device: Any = None) -> str:
        return props.name

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return (props.major, props.minor)

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return props.major >= 8

    def nothing() -> Callable[..., None]:
        # A function of its own for each name: dynamo's rules are kept by function.
        def does_nothing(*args: Any, **kwargs: Any) -> None:
            return None

        return does_nothing

    def memory_allocated(device: Any = None) -> int:
        return alloc(device).allocated

    def max_memory_allocated(device: Any = None) -> int:
        return alloc(device).peak_allocated

    def memory_reserved(device: Any = None) -> int:
        return alloc(device).reserved

    def max_memory_reserved(device: Any = None) -> int:
        return alloc(device).peak_reserved

    def reset_peak_memory_stats(device: Any = None) -> None:
        with emulation.lock:
            alloc(device).reset_peaks()

    def memory_stats(device: Any = None) -> dict[str, int]:
        with emulation.lock:
            return alloc(device).stats()

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        a = alloc(device)
        return (
            f"vramscope estimate: emulated {props.name}\n"
            f"allocated {a.allocated} B (peak {a.peak_allocated} B), "
            f"reserved {a.reserved} B (peak {a.peak_reserved} B)\n"
        )

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        total = props.total_memory
        return (max(total - alloc(device).reserved, 0), total)

    def empty_cache() -> None:
        with emulation.lock:
            for a in emulation.allocators:
                a.empty_cache()

    def get_allocator_backend() -> str:
        return emulation.settings.backend

    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        emulation.memory_fraction[index(device)] = fraction

    def record_memory_history(
        enabled: Any = "all", context: Any = "all", stacks: Any = "all", max_entries: int = 1_000_000, **kwargs: Any
    ) -> None:
        from collections import deque

        with emulation.lock:
            for a in emulation.allocators:
                if enabled in (None, False):
                    a.history = None
                    continue
                if a.history is not None and a.program_history_from is None:
                    # The shim started the history first; the program's snapshots begin here,
                    # as they would without the shim.
                    a.program_history_from = a.history_total
                a.history = deque(a.history or (), maxlen=max(int(max_entries), 1))
                a.history_frames = stacks != "none" if isinstance(stacks, str) else True

    def snapshot_of(history: Any) -> dict[str, Any]:
        with emulation.lock:
            return {
                "segments": [s for a in emulation.allocators for s in a.snapshot_segments()],
                "device_traces": [history(a) for a in emulation.allocators],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
            }

    def snapshot(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return snapshot_of(lambda a: a.program_history())

    def whole_snapshot() -> dict[str, Any]:
        return snapshot_of(lambda a: list(a.history or ()))

    # The shim's own reading: the whole history, whenever the program started its own.
    snapshot.vramscope_whole = whole_snapshot  # type: ignore[attr-defined]

    def dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
        with open(filename, "wb") as f:
            pickle.dump(snapshot(), f)

    def memory_snapshot(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return list(snapshot()["segments"])

    def set_allocator_settings(settings: str) -> None:
        emulation.settings.update(settings)

    def change_current_allocator(allocator: Any) -> None:
        raise RuntimeError(
            "vramscope estimate: the program installs an allocator of its own "
            "(torch.cuda.memory.change_current_allocator), whose code needs the GPU; the estimate models "
            "PyTorch's caching allocator only"
        )

    # A CUDA generator's state is its seed and offset, 16 bytes; activation checkpointing saves
    # and restores it around each recomputed block.
    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return torch.zeros(16, dtype=torch.uint8)

    def get_rng_state_all() -> list[torch.Tensor]:
        return [get_rng_state() for _ in range(emulation.count)]

    patches: dict[str, Any] = {
        "get_rng_state": get_rng_state,
        "get_rng_state_all": get_rng_state_all,
        "set_rng_state": nothing(),
        "set_rng_state_all": nothing(),
        "get_device_properties": get_device_properties,
        "get_device_name": get_device_name,
        "get_device_capability": get_device_capability,
        "is_bf16_supported": is_bf16_supported,
        "synchronize": nothing(),
        "manual_seed": nothing(),
        "manual_seed_all": nothing(),
        "seed": nothing(),
        "seed_all": nothing(),
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved,
        "max_memory_reserved": max_memory_reserved,
        "memory_cached": _alias(memory_reserved),
        "max_memory_cached": _alias(max_memory_reserved),
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": _alias(reset_peak_memory_stats),
        "reset_max_memory_cached": _alias(reset_peak_memory_stats),
        "reset_accumulated_memory_stats": nothing(),
        "memory_stats": memory_stats,
        "memory_summary": memory_summary,
        "mem_get_info": mem_get_info,
        "empty_cache": empty_cache,
        "get_allocator_backend": get_allocator_backend,
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "_record_memory_history": record_memory_history,
        "_snapshot": snapshot,
        "_dump_snapshot": dump_snapshot,
        "memory_snapshot": memory_snapshot,
        "_set_allocator_settings": set_allocator_settings,
        "change_current_allocator": change_current_allocator,
    }
    random = getattr(cuda, "random", None)
    for name, function in patches.items():
        for module in (cuda, memory, random):
            if module is not None and hasattr(module, name):
                setattr(module, name, function)
    # An out-of-memory observer would start the real allocator: the emulated one has none to call.
    if hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        torch._C._cuda_attach_out_of_memory_observer = lambda observer: None
    # CUDA counts as initialised: PyTorch's own initialisation would ask the device for what
    # the functions above answer. What it queued (seeds) has nothing to act on.
    cuda._initialized = True
    cuda._queued_calls.clear()
