# vramscope record's Python start-up hook: `vramscope record` puts this directory first on
# PYTHONPATH, so Python imports this file at start-up (the `site` module imports `sitecustomize`).
# It arms vramscope_torch (which waits for the program to import torch and does nothing
# otherwise) and, under `vramscope run`, the out-of-memory capture (vramscope_oom), then runs the
# program's own sitecustomize, if there is one further down the path.


def _vramscope_start() -> None:
    import os
    import sys

    # Not `typing.TYPE_CHECKING`: this runs at every interpreter start, which need not import typing.
    TYPE_CHECKING = False

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        if TYPE_CHECKING or "." in __name__:  # only ever top-level here; the other is for the checker
            from . import vramscope_torch
        else:
            import vramscope_torch

        vramscope_torch.arm()
    except Exception as error:  # never break the program: say why and go on without tags
        print(f"vramscope: the PyTorch shim is off: {error!r}", file=sys.stderr)
    # `vramscope run`: out-of-memory errors caught (vramscope_oom.py).
    if os.environ.get("VRAMSCOPE_CAPTURE_OOM"):
        try:
            if TYPE_CHECKING or "." in __name__:
                from . import vramscope_oom
            else:
                import vramscope_oom

            vramscope_oom.arm(os.environ["VRAMSCOPE_CAPTURE_OOM"])
        except Exception as error:
            print(f"vramscope: out-of-memory capture is off: {error!r}", file=sys.stderr)

    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_vramscope_start()
del _vramscope_start
