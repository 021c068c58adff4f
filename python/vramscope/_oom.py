"""``vramscope.capture_oom(DIR)``: a CUDA out-of-memory error leaves what led to it."""

from __future__ import annotations

import os

__all__ = ["capture_oom"]


def capture_oom(directory: str | os.PathLike[str] = "vramscope-oom") -> str:
    """From now on, a CUDA out-of-memory error in this process leaves a snapshot of what led to
    it in ``directory`` and prints the post-mortem's first lines on stderr, before the exception
    goes on as it would.

    Costs nothing until CUDA is initialised; from then on the caching allocator keeps a ring of
    its most recent events with their Python stacks (100,000 by default,
    ``VRAMSCOPE_OOM_HISTORY`` sets it), so memory stays bounded over any length of run. Each
    error writes ``oom-<host>-<pid>-<n>.pickle`` (at most 3 per process), a PyTorch memory
    snapshot that ``vramscope FILE --view oom`` (or ``vramscope info --oom FILE``) explains.
    Without a line of code: ``vramscope run -- python train.py``, ``python -m vramscope
    train.py``, or ``VRAMSCOPE_CAPTURE_OOM=DIR`` in the environment of a launcher.

    Args:
        directory: where the snapshots go (made when the first one is written).

    Returns:
        The directory armed, absolute. Arming again in the same process changes nothing.

    Example::

        import vramscope
        vramscope.capture_oom("oom-reports")
        train()   # a torch.OutOfMemoryError now leaves oom-reports/oom-<host>-<pid>-1.pickle
    """
    from ._shim import vramscope_oom

    return vramscope_oom.arm(os.fspath(directory))
