"""The PyTorch shim: what tags tensors and marks phases in a recording. `vramscope record`
writes these modules into the recording's folder and puts them first on the workload's
PYTHONPATH (the command carries them); `vramscope.record()` imports them from here."""
