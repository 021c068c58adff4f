"""What the program's tensors are, written to the log as `tag` lines: parameters (and buffers) by
storage with their qualified names, their gradients, optimizer state (`exp_avg`, ...), and input:
what the model is given, what a DataLoader yields, and the dataset it reads.

Imported once the program has imported torch (by `vramscope_recorder`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from .vramscope_log import Log


def _unwrapped(module: torch.nn.Module) -> torch.nn.Module:
    """The model inside the wrappers that only distribute or compile it (their parameters' names
    would otherwise start with `module.` or `_orig_mod.`)."""
    for _ in range(8):
        if type(module).__name__ in ("DistributedDataParallel", "DataParallel") and hasattr(module, "module"):
            inner = module.module
        elif hasattr(module, "_orig_mod"):
            inner = module._orig_mod
        else:
            break
        if not isinstance(inner, torch.nn.Module):
            break
        module = inner
    return module


def _clean(name: str) -> str:
    """A qualified name without the wrappers' own levels (torch.compile's `_orig_mod`, DDP's and
    FSDP's `module`... only `_orig_mod` here: the others are real attribute names too)."""
    name = name.replace("_orig_mod.", "")
    return name[len("_orig_mod") :] if name.startswith("_orig_mod") else name


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2's sharded parameters, their gradients and optimizer state):
    the memory is the shard's. Any other tensor is itself."""
    to_local = getattr(tensor, "to_local", None)
    if to_local is not None and type(tensor).__name__ == "DTensor":
        local: torch.Tensor = to_local()
        return local
    return tensor


def _data_ptr(storage: Any) -> int:
    return int(storage.data_ptr())


# Where a storage is on its device: its data pointer, or, on the emulated GPU of `vramscope
# estimate` (whose tensors have no storage), the address its allocator model gave it.
address_of: Callable[[Any], int] = _data_ptr


# The most linear and embedding layers written for a model (a 70B decoder has about 560).
MAX_LAYERS = 20_000


class Tagger:
    """The model's names, and the tags of its tensors."""

    def __init__(self, log: Log) -> None:
        self.log = log
        # The models seen (weak references: the recorder must never keep the program's model
        # alive; freed at interpreter exit, its tensors would outlive the profiler).
        self.roots: list[weakref.ref[torch.nn.Module]] = []
        # Qualified names: of modules by id, of parameters by id.
        self.module_names: dict[int, str] = {}
        self.param_names: dict[int, str] = {}
        # Last tag written per (device, address): (category, name).
        self.tagged: dict[tuple[int, int], tuple[str, str]] = {}
        # When each parameter's gradient was last tagged (by the parameter's id): the backward
        # and the iteration then. A gradient is tagged at the end of every backward, and at an
        # optimizer step's start unless that backward's end did already.
        self.grad_tagged: dict[int, tuple[int, int]] = {}
        # Datasets (by id) whose tensors are tagged.
        self.datasets_seen: set[int] = set()
        self.parameter_dtypes: dict[str, int] = {}
        self.layers: list[list[object]] = []

    def tag(self, tensor: object, category: str, name: str) -> None:
        """Writes that `tensor`'s storage is `category` (`name` says which)."""
        if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
            return
        if category == "input" and tensor.grad_fn is not None:
            return
        try:
            tensor = _local(tensor)
        except Exception:
            return
        try:
            storage = tensor.untyped_storage()
            address = address_of(storage)
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
        self.log.write(
            {
                "t": "tag",
                "time": self.log.now(),
                "dev": device,
                "addr": address,
                "cat": category,
                "name": name,
                "size": storage.nbytes(),
            }
        )

    # -- the model ---------------------------------------------------------------------------------

    def learn_root(self, module: torch.nn.Module) -> None:
        """Learns the names of a model called from outside any other (a root)."""
        self.roots = [root for root in self.roots if root() is not None]
        if any(root() is module for root in self.roots):
            return
        self.roots.append(weakref.ref(module))
        model = _unwrapped(module)
        for name, sub in model.named_modules(remove_duplicate=False):
            self.module_names.setdefault(id(sub), _clean(name) or type(model).__name__)
        for name, param in model.named_parameters(remove_duplicate=False):
            self.param_names.setdefault(id(param), _clean(name))

    def module_name(self, module: torch.nn.Module) -> str:
        return self.module_names.get(id(module), type(module).__name__)

    def param_name(self, param: torch.Tensor) -> str:
        return self.param_names.get(id(param), f"param@{id(param):x}")

    def tag_parameters(self) -> None:
        """Tags the models' parameters and buffers, and writes what the parameters are stored in
        when that changes."""
        dtypes: dict[str, int] = {}
        for reference in self.roots:
            root = reference()
            if root is None:
                continue
            root = _unwrapped(root)
            for name, param in root.named_parameters():
                self.tag(param, "parameter", _clean(name))
                try:
                    local = _local(param)
                    dtype = str(local.dtype).replace("torch.", "")
                    dtypes[dtype] = dtypes.get(dtype, 0) + local.numel() * local.element_size()
                except Exception:
                    pass
            # Buffers (running statistics, masks) are model state too; the name says which.
            for name, buffer in root.named_buffers():
                self.tag(buffer, "parameter", f"{_clean(name)} (buffer)")
        # What the parameters are stored in: the advisor proposes 16-bit weights only for a
        # model it knows holds 32-bit ones. Its linear and embedding layers: what LoRA would adapt,
        # and an output head that could share the embedding's weight.
        layers = self.model_layers()
        if dtypes and (dtypes != self.parameter_dtypes or layers != self.layers):
            self.parameter_dtypes = dtypes
            self.layers = layers
            line: dict[str, object] = {"t": "dtypes", "parameters": dtypes, "layers": layers}
            pretrained = self.pretrained()
            if pretrained:
                line["pretrained"] = pretrained
            self.log.write(line)

    def pretrained(self) -> str:
        """Where a model was loaded from (`from_pretrained`'s name or directory, as
        transformers keeps it in the model's config), empty for a model made in the program: the
        run fine-tunes a checkpoint when it is not."""
        for reference in self.roots:
            root = reference()
            if root is None:
                continue
            try:
                name = getattr(getattr(_unwrapped(root), "config", None), "_name_or_path", "")
            except Exception:
                continue
            if isinstance(name, str) and name:
                return name[-200:]
        return ""

    def model_layers(self) -> list[list[object]]:
        """The models' linear and embedding layers, each `[kind, module, weight, rows, columns,
        trainable]`: `linear` (rows: in_features, columns: out_features) or `embedding` (rows:
        entries, columns: their width); `weight` is the parameter's name, the first module's
        name for a weight two modules share (tied). At most `MAX_LAYERS`."""
        layers: list[list[object]] = []
        for reference in self.roots:
            root = reference()
            if root is None:
                continue
            for name, module in _unwrapped(root).named_modules():
                if len(layers) >= MAX_LAYERS:
                    return layers
                weight = getattr(module, "weight", None)
                if not isinstance(weight, torch.Tensor):
                    continue
                if isinstance(module, torch.nn.Linear):
                    kind, rows, columns = "linear", module.in_features, module.out_features
                elif type(module).__name__ == "Conv1D" and weight.dim() == 2:
                    # transformers' GPT-2 projections: a linear layer with its weight (in, out).
                    kind, rows, columns = "linear", int(weight.shape[0]), int(weight.shape[1])
                elif isinstance(module, torch.nn.Embedding):
                    kind, rows, columns = "embedding", module.num_embeddings, module.embedding_dim
                else:
                    continue
                trainable = bool(weight.requires_grad)
                layers.append([kind, _clean(name), self.param_name(weight), rows, columns, trainable])
        return layers

    # -- gradients and optimizer state -------------------------------------------------------------

    def tag_gradient(self, param: torch.Tensor, when: tuple[int, int]) -> None:
        """Tags `param`'s gradient, unless it was tagged since the last backward in this
        iteration (`when`: the backwards and the iterations so far; a new gradient often takes
        the freed one's place, so its address says nothing)."""
        grad = param.grad
        if grad is None:
            return
        if self.grad_tagged.get(id(param)) == when:
            return
        self.grad_tagged[id(param)] = when
        self.tag(grad, "gradient", self.param_name(param) + ".grad")

    def tag_root_gradients(self, when: tuple[int, int]) -> None:
        """Tags the gradients of the models' parameters (as a backward ends)."""
        for reference in self.roots:
            root = reference()
            if root is not None:
                for param in _unwrapped(root).parameters():
                    self.tag_gradient(param, when)

    def tag_optimizer_gradients(self, optimizer: torch.optim.Optimizer, when: tuple[int, int]) -> None:
        """Tags the gradients an optimizer is about to step with."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                self.tag_gradient(param, when)

    def tag_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Tags what an optimizer keeps per parameter (after its step made it)."""
        for param, state in optimizer.state.items():
            name = self.param_name(param)
            for key, value in state.items():
                self.tag_state(value, f"{name}.{key}")

    def tag_state(self, value: object, name: str, depth: int = 0) -> None:
        """Tags optimizer state: a tensor, or the tensors of a list or tuple of them (LBFGS keeps
        its history of directions and steps in lists), two deep."""
        if isinstance(value, torch.Tensor):
            self.tag(value, "optimizer_state", name)
        elif isinstance(value, (list, tuple)) and depth < 2:
            for index, item in enumerate(value[:1024]):
                self.tag_state(item, f"{name}[{index}]", depth + 1)

    # -- input ---------------------------------------------------------------------------------------

    def tag_inputs(self, args: object) -> None:
        """Tags what a model's call is given (its positional arguments, and lists of them)."""
        for index, value in enumerate(args if isinstance(args, tuple) else (args,)):
            nested = isinstance(value, (list, tuple))
            for j, tensor in enumerate(value if isinstance(value, (list, tuple)) else (value,)):
                self.tag(tensor, "input", f"input[{index}]" + (f"[{j}]" if nested else ""))

    def tag_output(self, output: object) -> None:
        """Tags what a model's call returned, with autograd recording (its logits, a cache of keys
        and values in a `ModelOutput`, through lists, dicts and objects' attributes, four deep):
        what the program holds after the call lives as long as it does, however the call's
        graph is kept."""
        seen: set[int] = set()
        count = [0]

        def walk(value: object, name: str, depth: int) -> None:
            if depth > 4 or count[0] >= 512 or id(value) in seen:
                return
            seen.add(id(value))
            if isinstance(value, torch.Tensor):
                count[0] += 1
                self.tag(value, "activation", name)
            elif isinstance(value, (list, tuple)):
                for index, item in enumerate(value[:256]):
                    walk(item, f"{name}[{index}]", depth + 1)
            elif isinstance(value, dict):
                for index, (key, item) in enumerate(value.items()):
                    if index >= 64:
                        break
                    walk(item, f"{name}.{key}", depth + 1)
            elif depth > 0 and not isinstance(value, (str, bytes, int, float, bool, type(None), torch.nn.Module)):
                # A cache object's tensors, in its attributes (`layers[i].keys`).
                for key, item in list(getattr(value, "__dict__", {}).items())[:64]:
                    if not key.startswith("_"):
                        walk(item, f"{name}.{key}", depth + 1)

        walk(output, "output", 0)

    def note_padding(self, batch: object, asked: int) -> None:
        """Writes how a batch is padded, where it says so (an `attention_mask` of ones and zeros
        in a dict, as collate functions and tokenizers make it): its length and its longest row
        without the padding, at `asked` (when the DataLoader was asked for it). Read on the host
        only, through numpy where it is installed (no tensor is made, nothing waits for a
        device)."""
        get = getattr(batch, "get", None)
        mask = get("attention_mask") if callable(get) and not isinstance(batch, torch.Tensor) else None
        if type(mask) is not torch.Tensor or mask.dim() != 2 or mask.device.type != "cpu" or mask.numel() == 0:
            return
        if mask.numel() > 1 << 24 or mask.dtype not in (torch.bool, torch.int32, torch.int64, torch.uint8):
            return
        try:
            import numpy  # noqa: F401  (torch reads tensors into numpy only where it is installed)

            longest = int((mask.numpy() != 0).sum(axis=1).max())
        except (ImportError, RuntimeError):
            if mask.numel() > 1 << 16:
                return
            longest = max(sum(1 for v in row if v) for row in mask.tolist())
        self.log.write({"t": "padding", "time": asked, "padded": int(mask.shape[1]), "longest": longest})

    def tag_dataset(self, dataset: object) -> None:
        """Tags the tensors a DataLoader's dataset holds whole (a `TensorDataset`'s, through
        `Subset` and `ConcatDataset`, and the tensor attributes of a dataset class of the
        program's) as the input data they are, once per dataset."""
        if dataset is None or id(dataset) in self.datasets_seen:
            return
        self.datasets_seen.add(id(dataset))
        self.tag_data(dataset, "dataset", 0)

    def tag_batch(self, batch: object, name: str = "batch") -> None:
        """Tags the tensors of a batch (in tuples, lists and dicts, three deep) as input."""
        self.tag_data(batch, name, 0)

    def tag_data(self, value: object, name: str, depth: int) -> None:
        """Tags the tensors in `value` as input: a tensor, those in tuples, lists and dicts, and
        a dataset's (its attributes, and what its __getitem__ closes over), three deep."""
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
