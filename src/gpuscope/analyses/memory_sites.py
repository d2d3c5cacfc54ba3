"""Who holds a GPU's memory: each allocation stack's user frames, the phase it shows (optimizer
step, backward, forward, set-up) and how sure that is, and the top sites of the blocks alive at a
moment, each with its category. Used by :mod:`gpuscope.analyses.memory` (the report), a pure
function of a :class:`~gpuscope.model.MemoryRecord`'s frames and stacks.

A site is the innermost frame of a block's stack that is the user's code (library frames: torch,
other framework packages, the interpreter, C++ frames are skipped), sites on nearby lines of one
function grouped; a block's category follows from the phase its stack shows (an annotation's
when the stack shows none), whether it lives to the end of recording, its pool, and, for a stack
that shows no phase, whether its C++ frames show a tensor factory called from Python with no
autograd operator (:meth:`StackFacts.user_factory`) (``docs/memory.md`` says the same with its
limits).
"""

from __future__ import annotations

import os
import re
import sys

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.model import MemoryAnnotation, MemoryFrame

#: Categories of memory, in the order reports list them. Appended, never inserted: saved
#: diagnoses list a timeline point's bytes in this order (``diagnosis.saved`` pads the new ones).
CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer state",
    "activations",
    "temporaries",
    "CUDA-graph pool",
    "communication buffers",
    "other",
    "user tensors",
)
#: Python-callable tensor factories: the ``torch.*`` functions and ``Tensor`` methods that make a
#: tensor from sizes, values or another device's data rather than computing it from tensors. In a
#: snapshot's C++ frames the call from Python is the binding ``torch::autograd::THPVariable_<name>``
#: (``python_torch_functions*.cpp``, ``python_variable_methods.cpp``).
TENSOR_FACTORIES = frozenset(
    {
        *("empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like"),
        *("ones", "ones_like", "full", "full_like", "rand", "rand_like", "randn", "randn_like"),
        *("randint", "randint_like", "randperm", "arange", "range", "linspace", "logspace"),
        *("eye", "tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "scalar_tensor"),
        *("tril_indices", "triu_indices", "to", "cuda", "new_empty", "new_empty_strided"),
        *("new_zeros", "new_ones", "new_full", "new_tensor"),
    }
)
_BINDING = re.compile(r"\bTHPVariable_(\w+)\(")
#: C++ frames of an operator autograd records (its ``VariableType`` kernel) or of a custom
#: ``autograd.Function`` running its forward: the tensor is computed, not made.
_AUTOGRAD_OP = re.compile(r"VariableType::|THPFunction_apply|torch::autograd::Engine")
#: Packages whose frames are never the user's line: the framework and its helpers. Other
#: installed packages (``transformers``) hold the model code, so they count as the user's.
_FRAMEWORKS = frozenset(
    {"torch", "torchvision", "torchaudio", "functorch", "triton", "einops", "numpy", "_pytest"}
)
_PACKAGES = re.compile(r"/(?:site|dist)-packages/([^/]+)/")
_STDLIB_PATH = re.compile(r"/lib/python3[^/]*/[^/]+$|/lib/python3[^/]*/(?!site-packages)")
_STDLIB = frozenset(sys.stdlib_module_names)
TEMPORARIES = CATEGORIES.index("temporaries")
ACTIVATIONS = CATEGORIES.index("activations")
#: Lines of one function at most this far apart are one site (``nn_utils.py:5-7``).
SITE_LINES = 5
TOP_SITES = 8


class MemorySite(msgspec.Struct, frozen=True):
    location: str  # "model.py:39" or "optimizer.py:74-78": the user's file and line(s)
    function: str
    chain: list[str]  # the user's frames, innermost first: "model.py:39 forward"
    bytes: int
    blocks: int
    category: str
    confidence: str  # high | medium | low
    phase: str  # the phase its allocations were made in
    operator: str = ""  # the operator that allocated (traces), "" when not recorded
    largest_block_bytes: int = 0


class Live(msgspec.Struct, frozen=True):
    size: NDArray[np.int64]
    stack: NDArray[np.int64]
    category: NDArray[np.int64]
    confidence: NDArray[np.int64]  # 0 low, 1 medium, 2 high
    recorded: NDArray[np.bool_]
    kept: NDArray[np.bool_]  # never freed while recording


_CONFIDENCE = ("low", "medium", "high")
PHASE_OF = {
    "activations": "forward",
    "gradients": "backward",
    "optimizer state": "optimizer step",
    "parameters": "setup",
}


class StackFacts:
    """Per stack, computed once: its user frames, phase and how sure the phase is."""

    def __init__(self, frames: list[MemoryFrame], stacks: list[list[int]]) -> None:
        self.frames = frames
        self.stacks = stacks
        self._user = [_is_user(f) for f in frames]
        self._bits = [_frame_bits(f) for f in frames]
        self._phases: dict[int, tuple[str, int]] = {}
        self._stack_bits: dict[int, int] = {}

    def user_frames(self, stack: int) -> list[MemoryFrame]:
        if stack < 0:
            return []
        return [self.frames[f] for f in self.stacks[stack] if self._user[f]]

    def phase(self, stack: int) -> str:
        return self._phase(stack)[0]

    def operator(self, stack: int) -> str:
        """The innermost operator frame (traces' stacks: file ``<op>``)."""
        if stack < 0:
            return ""
        ops = (self.frames[f] for f in self.stacks[stack] if self.frames[f].file == "<op>")
        return next((f.function for f in ops), "")

    def confidence(self, stack: int) -> int:
        return 2 if self.user_factory(stack) else self._phase(stack)[1]

    def user_factory(self, stack: int) -> bool:
        """The stack made a tensor by a factory called from Python (``torch.empty``,
        ``torch.zeros``, ``torch.tensor``, ``.to(device)``: :data:`TENSOR_FACTORIES`'s bindings
        in its C++ frames), with no other Python-to-C++ call, no autograd operator and no
        phase (forward, backward, optimizer step, set-up, communication) in its frames.
        Activations are what a forward computes inside a module's ``forward`` or an autograd
        operator; a factory called straight from the user's loop makes the user's own tensor
        (an input batch, a buffer, a cache), which autograd never keeps. Only stacks that
        record C++ frames can show it: Python-only stacks and traces' operators say nothing."""
        bits = self._bits_of(stack)
        return bool(bits & _FACTORY) and not bits & _OPERATOR and self.phase(stack) == "unknown"

    def _bits_of(self, stack: int) -> int:
        known = self._stack_bits.get(stack)
        if known is None:
            known = 0
            for f in self.stacks[stack] if stack >= 0 else ():
                known |= self._bits[f]
            self._stack_bits[stack] = known
        return known

    def _phase(self, stack: int) -> tuple[str, int]:
        known = self._phases.get(stack)
        if known is None:
            known = self._phases[stack] = _stack_phase(self._bits_of(stack))
        return known


def _is_user(frame: MemoryFrame) -> bool:
    """A frame of the user's code (or of a model library such as transformers): not the
    framework, not the standard library, not C++ (paths compared with ``\\`` read as ``/``)."""
    path = frame.file.replace("\\", "/")
    lower = path.lower()
    if not lower.endswith(".py") or "<frozen" in lower or "torchinductor" in lower:
        return False
    package = _PACKAGES.search(lower)
    if package is not None:
        return package.group(1) not in _FRAMEWORKS
    if _STDLIB_PATH.search(lower):
        return False
    top = lower.lstrip("/").split("/", 1)[0].removesuffix(".py")
    return top not in _FRAMEWORKS and top not in _STDLIB


# What one frame says about the phase, as bits: a stack's phase is the OR of its frames'.
_COMM, _OPT_FILE, _OPT_FUNCTION, _BACKWARD, _FORWARD, _SETUP, _WEIGHT, _FACTORY, _OPERATOR = (
    1 << i for i in range(9)
)


def _frame_bits(frame: MemoryFrame) -> int:
    function, path = frame.function, frame.file.replace("\\", "/").lower()
    bits = 0
    if "distributed" in path or "c10d" in path or "nccl" in function.lower():
        bits |= _COMM
    if "ProcessGroup" in function:
        bits |= _COMM
    if "optim" in os.path.basename(path) or "/optim/" in path:
        bits |= _OPT_FILE
    if function in ("step", "_init_group", "wrapper"):
        bits |= _OPT_FUNCTION
    if "backward" in function.lower() or (path.endswith(".py") and "/autograd/" in path):
        bits |= _BACKWARD
    if function in ("forward", "_call_impl"):
        bits |= _FORWARD
    if function in ("__init__", "reset_parameters", "_apply", "load_state_dict", "to", "cuda") or (
        function.startswith(("init_weight", "load_weight", "from_pretrained"))
    ):
        bits |= _SETUP
    if "weight" in function or function == "_apply":
        bits |= _WEIGHT
    binding = _BINDING.search(function) if "THPVariable_" in function else None
    if binding is not None:
        bits |= _FACTORY if binding.group(1) in TENSOR_FACTORIES else _OPERATOR
    if _AUTOGRAD_OP.search(function):
        bits |= _OPERATOR
    return bits


def _stack_phase(bits: int) -> tuple[str, int]:
    """The phase a stack shows (the OR of its frames' bits), and how sure (2 high, 1 medium, 0
    low). Optimizer first: its stacks also pass through the training loop; backward before
    forward: a checkpointed backward re-runs forward."""
    if bits & _COMM:
        return "communication", 1
    if bits & _OPT_FILE and bits & _OPT_FUNCTION:
        return "optimizer step", 2
    if bits & _BACKWARD:
        return "backward", 2
    if bits & _FORWARD:
        return "forward", 1
    if bits & _SETUP:
        return "setup", 2 if bits & _WEIGHT else 1
    return "unknown", 0


def annotated_phases(
    annotations: list[MemoryAnnotation], times: NDArray[np.int64]
) -> list[str | None]:
    """:func:`_annotated_phase` at each time (-1: none), the annotations checked one by one."""
    found: list[str | None] = [None] * times.size
    if not annotations:
        return found
    for a in reversed(annotations):  # the first annotation covering a time wins, as below
        phase = annotated_phase([a], a.start_ns)
        if phase is None:
            continue
        end = a.end_ns if a.end_ns >= 0 else np.iinfo(np.int64).max
        for i in np.flatnonzero((times >= 0) & (times >= a.start_ns) & (times <= end)).tolist():
            found[i] = phase
    return found


def covers(a: MemoryAnnotation, time_ns: int) -> bool:
    return a.start_ns <= time_ns and (a.end_ns < 0 or time_ns <= a.end_ns)


def annotated_phase(annotations: list[MemoryAnnotation], time_ns: int) -> str | None:
    for a in annotations:
        if covers(a, time_ns):
            name = a.name.lower()
            if name.startswith("optimizer.") or "optimizer" in name:
                return "optimizer step"
            if "backward" in name:
                return "backward"
            if "forward" in name:
                return "forward"
    return None


def top_sites(live: Live, stacks: StackFacts, *, rise: bool) -> list[MemorySite]:
    """The top sites of the live blocks (those allocated while recording, with ``rise``)."""
    rows = np.flatnonzero(live.recorded) if rise else np.arange(live.size.size)
    if not rows.size:
        return []
    # The rows of each stack, stacks in the order their first row comes.
    of_row = live.stack[rows]
    order = np.argsort(of_row, kind="stable")
    ordered = of_row[order]
    first = np.ones(order.size, dtype=np.bool_)
    first[1:] = ordered[1:] != ordered[:-1]
    begins = np.flatnonzero(first)
    ends = np.append(begins[1:], order.size)
    groups = sorted(zip(begins.tolist(), ends.tolist(), strict=True), key=lambda g: order[g[0]])
    per_stack = {int(ordered[b]): rows[order[b:e]] for b, e in groups}
    # (file, function) -> line -> [bytes, blocks, per-category bytes, best stack, confidence]
    grouped: dict[tuple[str, str], dict[int, list[int]]] = {}
    chains: dict[tuple[str, str, int], tuple[int, int]] = {}
    for stack, members in per_stack.items():
        user = stacks.user_frames(stack)
        if user:
            key, line = (user[0].file, user[0].function), user[0].line
        else:  # a trace without Python stacks: the operator that allocated
            key, line = (stacks.operator(stack) or "(no user frame)", ""), 0
        sizes = live.size[members]
        total = int(sizes.sum())
        cell = grouped.setdefault(key, {}).setdefault(line, [0, 0, *([0] * len(CATEGORIES)), 0, 0])
        cell[0] += total
        cell[1] += len(members)
        per_category = np.zeros(len(CATEGORIES), dtype=np.int64)
        np.add.at(per_category, live.category[members], sizes)
        for c, b in enumerate(per_category.tolist()):
            cell[2 + c] += b
        cell[-1] = max(cell[-1], int(live.confidence[members].max()))
        cell[-2] = max(cell[-2], int(sizes.max()))
        best = chains.get((*key, line))
        if best is None or total > best[1]:
            chains[(*key, line)] = (stack, total)
    found: list[MemorySite] = []
    for (file, function), lines in grouped.items():
        for cluster in _clusters(sorted(lines)):
            cells = [lines[x] for x in cluster]
            size = sum(c[0] for c in cells)
            per_cat = [sum(c[2 + i] for c in cells) for i in range(len(CATEGORIES))]
            category = int(np.argmax(per_cat))
            lasting = list(per_cat)
            lasting[TEMPORARIES] = 0
            if max(lasting) >= 0.3 * size:  # a line that keeps state is named by the state
                category = int(np.argmax(lasting))
            biggest = max(cluster, key=lambda x: lines[x][0])
            stack = chains[(file, function, biggest)][0]
            name = _basename(file)
            where = (
                f"{name}:{cluster[0]}"
                if len(cluster) == 1
                else f"{name}:{cluster[0]}-{cluster[-1]}"
            )
            share = per_cat[category] / size if size else 0
            sure = max(c[-1] for c in cells)
            sure = sure if share > 0.8 else max(sure - 1, 0)
            found.append(
                MemorySite(
                    location=where if file.endswith(".py") else file,
                    function=function,
                    chain=[
                        f"{_basename(f.file)}:{f.line} {f.function}"
                        for f in stacks.user_frames(stack)[:3]
                    ],
                    bytes=size,
                    blocks=sum(c[1] for c in cells),
                    category=CATEGORIES[category],
                    confidence=_CONFIDENCE[sure],
                    phase=stacks.phase(stack),
                    operator=stacks.operator(stack),
                    largest_block_bytes=max(c[-2] for c in cells),
                )
            )
    found.sort(key=lambda s: -s.bytes)
    return found[:TOP_SITES]


def _clusters(lines: list[int]) -> list[list[int]]:
    groups: list[list[int]] = []
    for line in lines:
        if groups and line - groups[-1][-1] <= SITE_LINES:
            groups[-1].append(line)
        else:
            groups.append([line])
    return groups


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]
