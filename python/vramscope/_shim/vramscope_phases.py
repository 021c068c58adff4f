"""When the program is in which phase, written to the log as `span` lines: each module's forward,
the model's forward, backward, the optimizer step, the iteration it ends, and an evaluation (calls
of the model without gradients once training has run a backward); and whether forward runs under
autocast. Torch calls these through the hooks `vramscope_hooks` installs; they say the tags to
write when (`vramscope_tags`), and the recorder when a phase ends (`PhaseEnds`).

Imported once the program has imported torch (by `vramscope_recorder`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from .vramscope_log import Log
    from .vramscope_tags import Tagger


class PhaseEnds(Protocol):
    """What is told when a phase ends: the recorder, which reads allocations at such points."""

    def forward_ended(self) -> None: ...

    def backward_ended(self) -> None: ...

    def step_ended(self) -> None: ...


class Phases:
    """The phase the program is in, on its way through forward, backward and the optimizer step."""

    def __init__(self, log: Log, tagger: Tagger, ends: PhaseEnds) -> None:
        self.log = log
        self.tagger = tagger
        self.ends = ends
        # Modules' forwards open on this thread, and when each began.
        self.depth = threading.local()
        self.module_starts = threading.local()
        self.forward_start: int | None = None
        self.backward_depth = 0
        self.backward_start: int | None = None
        self.backwards = 0
        self.step_start: int | None = None
        self.iteration_start: int | None = None
        self.iteration = 0
        # When an evaluation began (forwards without gradients after training started: a
        # trainer's validation or evaluation loop), while one runs.
        self.evaluation_start: int | None = None
        self.autocast_noted = False
        self.grad_noted = False

    def when(self) -> tuple[int, int]:
        """The backwards and the iterations so far (when a gradient was tagged)."""
        return (self.backwards, self.iteration)

    # -- forward -----------------------------------------------------------------------------------

    def forward_pre(self, module: torch.nn.Module, args: object) -> None:
        depth = getattr(self.depth, "value", 0)
        self.depth.value = depth + 1
        starts = getattr(self.module_starts, "value", None)
        if starts is None:
            starts = self.module_starts.value = []
        starts.append(self.log.now())
        if depth == 0 and self.backward_depth == 0 and next(module.parameters(), None) is not None:
            self.tagger.learn_root(module)
            if self.iteration_start is None:
                self.iteration_start = self.log.now()
            self.forward_start = self.log.now()
            self.note_autocast()
            self.note_grad_mode()
            self.tagger.tag_parameters()
            self.tagger.tag_inputs(args)
            self.log.safe(self.note_evaluation)

    def forward_post(self, module: torch.nn.Module, args: object, output: object) -> None:
        depth = max(getattr(self.depth, "value", 1) - 1, 0)
        self.depth.value = depth
        starts = getattr(self.module_starts, "value", None) or [self.log.now()]
        begin = starts.pop()
        end = self.log.now()
        name = self.tagger.module_name(module)
        self.log.write({"t": "span", "kind": "module", "name": name, "begin": begin, "end": end})
        if depth == 0 and self.forward_start is not None and self.backward_depth == 0:
            if torch.is_grad_enabled() and not torch.is_inference_mode_enabled():
                self.log.safe(self.tagger.tag_output, output)
            self.log.write({"t": "span", "kind": "forward", "name": "forward", "begin": self.forward_start, "end": end})
            self.forward_start = None
            self.ends.forward_ended()

    def note_autocast(self) -> None:
        """Records once whether forward runs under autocast, and in which type."""
        if self.autocast_noted:
            return
        self.autocast_noted = True
        for device_type in ("cuda", "cpu"):
            try:
                if torch.is_autocast_enabled(device_type):
                    dtype = str(torch.get_autocast_dtype(device_type)).replace("torch.", "")
                    self.log.write({"t": "autocast", "device_type": device_type, "dtype": dtype})
                    return
            except (TypeError, AttributeError, RuntimeError):
                return

    def note_grad_mode(self) -> None:
        """Records once that a model's forward ran with autograd recording its graph (not under
        `no_grad` or `inference_mode`): a run that never goes backward keeps, for nothing, what
        that graph saves."""
        if self.grad_noted or not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
            return
        self.grad_noted = True
        self.log.write({"t": "grad_mode", "enabled": True})

    # -- evaluation --------------------------------------------------------------------------------

    def note_evaluation(self) -> None:
        """At a model's call: an evaluation begins at a call without gradients once training has
        run a backward (validation, a trainer's evaluation loop), and ends at the next call with
        them, a backward or an optimizer step. Its span lets what it gathers and drops (the
        predictions of every batch) be told as its temporaries."""
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if not grad and self.evaluation_start is None and self.backwards > 0:
            self.evaluation_start = self.log.now()
        elif grad:
            self.end_evaluation()

    def end_evaluation(self) -> None:
        if self.evaluation_start is not None:
            self.log.write(
                {
                    "t": "span",
                    "kind": "evaluation",
                    "name": "evaluation",
                    "begin": self.evaluation_start,
                    "end": self.log.now(),
                }
            )
            self.evaluation_start = None

    # -- backward ----------------------------------------------------------------------------------

    def backward_begin(self) -> None:
        self.end_evaluation()
        self.backward_depth += 1
        if self.backward_depth == 1:
            self.backward_start = self.log.now()

    def backward_end(self) -> None:
        self.backward_depth = max(self.backward_depth - 1, 0)
        if self.backward_depth == 0:
            # The gradients backward made, tagged as it ends: an optimizer stepping with a
            # closure (LBFGS, Lightning) runs backward after its step's start, and a run's last
            # gradients may be freed before any step sees them.
            self.backwards += 1
            self.log.safe(self.tagger.tag_root_gradients, self.when())
        if self.backward_depth == 0 and self.backward_start is not None:
            self.log.write(
                {
                    "t": "span",
                    "kind": "backward",
                    "name": "backward",
                    "begin": self.backward_start,
                    "end": self.log.now(),
                }
            )
            self.backward_start = None
        if self.backward_depth == 0:
            self.ends.backward_ended()

    # -- the optimizer step ------------------------------------------------------------------------

    def step_pre(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self.end_evaluation()
        self.step_start = self.log.now()
        self.tagger.tag_optimizer_gradients(optimizer, self.when())

    def step_post(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        end = self.log.now()
        self.tagger.tag_optimizer_state(optimizer)
        begin = self.step_start if self.step_start is not None else end
        self.log.write(
            {"t": "span", "kind": "optimizer_step", "name": type(optimizer).__name__, "begin": begin, "end": end}
        )
        self.step_start = None
        start = self.iteration_start if self.iteration_start is not None else begin
        self.log.write(
            {"t": "span", "kind": "iteration", "name": f"iteration {self.iteration}", "begin": start, "end": end}
        )
        self.iteration += 1
        self.iteration_start = end
        self.ends.step_ended()
