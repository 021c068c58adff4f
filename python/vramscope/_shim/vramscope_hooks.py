"""Where torch calls the shim: global module forward hooks, optimizer step hooks, a wrapper of
`torch.autograd.backward` (the phases, `vramscope_phases`), and a wrapper of the DataLoader's
iterator (what it yields is input, `vramscope_tags`). Each is taken out again by what `install`
returns, for recording inside the program (`vramscope.record()`), which goes on after it.

Imported once the program has imported torch (by `vramscope_recorder`).
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

if TYPE_CHECKING:
    from .vramscope_log import Log
    from .vramscope_phases import Phases
    from .vramscope_tags import Tagger

if TYPE_CHECKING or "." in __name__:  # vramscope._shim, imported by vramscope.record()
    from .vramscope_patches import is_marked, mark, restore, wraps
else:  # written into a recording's folder by `vramscope record`, outside the package
    from vramscope_patches import is_marked, mark, restore, wraps

Undo = Callable[[], None]


def install(log: Log, phases: Phases, tagger: Tagger) -> list[Undo]:
    """Installs the hooks; returns what takes each out again."""
    # torch.compile warns that global module hooks fire once more for its wrapper: ours are
    # global on purpose and count the wrapper as the outermost module.
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")

    handles = [register_module_forward_pre_hook(_guard(log, phases.forward_pre))]
    try:
        handles.append(register_module_forward_hook(_guard(log, phases.forward_post), always_call=True))
    except TypeError:  # torch before 2.1
        handles.append(register_module_forward_hook(_guard(log, phases.forward_post)))
    handles.append(register_optimizer_step_pre_hook(_guard(log, phases.step_pre)))
    handles.append(register_optimizer_step_post_hook(_guard(log, phases.step_post)))
    undo: list[Undo] = [handle.remove for handle in handles]
    undo.append(_wrap_backward(log, phases))
    loader = _wrap_loader(log, tagger)
    if loader is not None:
        undo.append(loader)
    return undo


def _guard(log: Log, function: Callable[..., None]) -> Callable[..., None]:
    """`function` as a hook: it does nothing inside a torch.compile'd region (traced, it would
    break the graph or force recompiles; the compiled module's own, outer, call is still seen),
    in a forked child, or once recording has ended; and its errors are said once."""
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def hook(*args: object) -> None:
        if compiling() or log.closed or os.getpid() != log.pid:
            return
        log.safe(function, *args)

    return hook


def _wrap_backward(log: Log, phases: Phases) -> Undo:
    """Wraps `torch.autograd.backward`: where backward begins and ends."""
    real_backward = torch.autograd.backward

    def backward(*args: Any, **kwargs: Any) -> None:
        log.safe(phases.backward_begin)
        try:
            real_backward(*args, **kwargs)
        finally:
            log.safe(phases.backward_end)

    wraps(backward, real_backward)
    backward.__doc__ = real_backward.__doc__
    torch.autograd.backward = backward
    return lambda: restore(torch.autograd, "backward", backward, real_backward)


def _wrap_loader(log: Log, tagger: Tagger) -> Undo | None:
    """Tags what a DataLoader yields as the input it is: both halves of a batch (the targets
    too, which the model never sees), and the batch a trainer fetches ahead (Lightning,
    accelerate) before the model does."""
    try:
        base = importlib.import_module("torch.utils.data.dataloader")._BaseDataLoaderIter
    except (ImportError, AttributeError):
        return None
    real_next = base.__next__
    if is_marked(real_next):
        return None

    def __next__(iterator: object) -> object:
        # When it was asked for: what it allocates (collating, copying from workers) comes after.
        asked = log.now()
        batch = real_next(iterator)
        if not log.closed and os.getpid() == log.pid:
            # The dataset first: a batch that is a view of it is the dataset's memory.
            log.safe(tagger.tag_dataset, getattr(iterator, "_dataset", None))
            log.safe(tagger.tag_batch, batch)
            log.safe(tagger.note_padding, batch, asked)
        return batch

    mark(__next__)
    wraps(__next__, real_next)
    base.__next__ = __next__
    return lambda: restore(base, "__next__", __next__, real_next)
