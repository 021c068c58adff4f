"""The PyTorch shim: what tags tensors and marks phases in a recording. `vramscope record`
writes these modules into the recording's folder and puts them first on the workload's
PYTHONPATH (the command carries them: `SHIM_FILES` in collector/src/torch.rs lists every file);
`vramscope.record()` imports them from here.

So each module runs under two names: `vramscope._shim.vramscope_log` here, `vramscope_log` in a
recording's folder. They import each other with

    if TYPE_CHECKING or "." in __name__:  # vramscope._shim
        from .vramscope_log import Log
    else:  # a recording's folder
        from vramscope_log import Log

(a module's `__name__` has a dot only in the package), which the type checker reads as the
package's. `vramscope_torch` (armed by `sitecustomize` at interpreter start), `vramscope_patches`
and `vramscope_oom` import nothing of torch's until the program has imported torch; the rest
(the recorder, `vramscope_recorder`, and what it runs) is imported only then.
"""
