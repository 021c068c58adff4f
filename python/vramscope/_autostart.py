"""Read at every Python start in an environment where the wheel is installed (through
``vramscope-autostart.pth``): with ``VRAMSCOPE_CAPTURE_OOM=DIR`` set, out-of-memory errors are
caught as by :func:`vramscope.capture_oom`, for launchers that only pass the environment through
(SLURM scripts, torchrun, trainers). Without it, this does nothing (one environment lookup)."""

import os


def start() -> None:
    directory = os.environ.get("VRAMSCOPE_CAPTURE_OOM")
    if not directory:
        return
    try:
        from vramscope._shim import vramscope_oom

        vramscope_oom.arm(directory)
    except Exception as error:  # never break the interpreter's start
        import sys

        print(f"vramscope: out-of-memory capture is off: {error!r}", file=sys.stderr)
