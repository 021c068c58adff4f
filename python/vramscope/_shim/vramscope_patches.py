"""What the PyTorch shim puts into other code, and how it takes it out again.

The shim works by replacing a few attributes of others' objects: torch's loader (to hear when the
program imports torch: `TorchWatcher`), torch's lazy-submodule lookup (so that a thread taking a
snapshot does not import `torch._inductor`: `WithoutLazyInductor`), and the hooks the recorder
installs (`vramscope_hooks.py`, `vramscope_cuda.py`, `vramscope_cpu.py`). Each replacement can be
undone with `restore`, and the shim's own functions carry a mark (`mark`, `is_marked`) so that
nothing is wrapped twice.

Torch-free: `vramscope_torch` imports this at interpreter start, before the program imports torch.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading

# Not `typing.TYPE_CHECKING`: this runs at every interpreter start, which need not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType, TracebackType
    from typing import Any, Callable

#: The attribute that marks a function, class or object as the shim's own.
_MARK = "_vramscope"


def mark(owner: object) -> None:
    """Marks `owner` (a function the shim made, a class it patched, a profiler it started)."""
    setattr(owner, _MARK, True)


def is_marked(owner: object) -> bool:
    """Whether `owner` carries the shim's mark."""
    return bool(getattr(owner, _MARK, False))


def wraps(ours: Callable[..., Any], real: Callable[..., Any]) -> None:
    """Says that `ours` wraps `real` (`__wrapped__`, as `functools.wraps` does, without taking
    over the rest of `real`'s attributes)."""
    ours.__dict__["__wrapped__"] = real


def restore(owner: object, name: str, ours: object, original: object) -> None:
    """Puts `original` back as `owner.name` if what is there is still `ours` (something
    installed after us stays, with ours under it, doing nothing once closed)."""
    if getattr(owner, name, None) is ours:
        setattr(owner, name, original)


class TorchWatcher:
    """Finds `torch` for the import system and calls `on_import()` once it has been imported
    (the recorder; the out-of-memory capture in vramscope_oom.py). `mark` names the attribute
    that says a loader is wrapped already for that caller; `done()` says there is nothing left
    to wait for.

    It stays in place until then: libraries ask `importlib.util.find_spec("torch")` before they
    import it, and each answer gets the wrapped loader."""

    def __init__(self, on_import: Callable[[], None], mark: str, done: Callable[[], bool] = lambda: False) -> None:
        self.on_import = on_import
        self.mark = mark
        self.done = done

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "torch" or self.done():
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or getattr(spec.loader, self.mark, False):
            return spec
        loader = spec.loader
        real_exec = loader.exec_module
        watcher = self

        def exec_module(module: ModuleType) -> None:
            real_exec(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            watcher.on_import()

        # The loader is torch's own, found for this import only: replacing its method is how the
        # watcher hears that the import ended.
        loader.exec_module = exec_module  # type: ignore[method-assign]
        setattr(loader, self.mark, True)
        return spec


class WithoutLazyInductor:
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

    def __init__(self) -> None:
        self.local = threading.local()

    def __enter__(self) -> None:
        self.local.on = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.local.on = False

    def install(self, torch: ModuleType) -> Callable[[], None]:
        """Wraps `torch.__getattr__`; returns what undoes that."""
        real = torch.__dict__.get("__getattr__")
        if real is None:  # before PyTorch's lazy submodules, looking one up never imported it
            return lambda: None
        local = self.local

        def __getattr__(name: str) -> Any:
            if name == "_inductor" and getattr(local, "on", False):
                raise AttributeError(f"module 'torch' has no attribute {name!r} (not imported)")
            return real(name)

        torch.__dict__["__getattr__"] = __getattr__
        return lambda: restore(torch, "__getattr__", __getattr__, real)
