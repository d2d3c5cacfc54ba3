"""Names people can read: demangled kernel names cut to what tells them apart, long paths cut
from the left.

Contract: pure functions of strings; the renderers show what they return and keep the whole name
where there is room for it (a tooltip, the JSON output).

A demangled CUDA/HIP kernel name is a C++ signature: ``void at::native::(anonymous
namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 8, bool>(at::cuda::
detail::TensorInfo<...>, ...)``. What tells two kernels apart is the function and its template
arguments; the return type (always ``void`` for a kernel), the namespaces, the argument list (the
same types as the template arguments, spelled out), the lambdas' enclosing signatures and ROCm's
``.kd`` / ``[clone .kd]`` suffixes only make the name long. :func:`short_kernel_name` keeps
``fused_dropout_kernel_vec<BFloat16, float, unsigned int, 1, 8, bool>``;
:func:`short_kernel_names` falls back to a longer form for names that would otherwise collide.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_ANONYMOUS = re.compile(r"\(anonymous namespace\)::")
_ROCM_SUFFIX = re.compile(r"(\s*\[clone [^\]]*\])+$|\.kd$")
_NAMESPACE = re.compile(r"\b[A-Za-z_]\w*::(?!\{|operator)")
_LAMBDA = re.compile(r"::\{lambda\([^()]*\)#\d+\}")
_OPERATOR_CALL = re.compile(r"::operator\(\)\(\)( const)?")
_SPACES = re.compile(r"\s+")


def short_kernel_name(name: str) -> str:
    """The function and its template arguments, without return type, namespaces or arguments."""
    return _shorten(name, drop_details=True)


def short_kernel_names(names: Iterable[str]) -> dict[str, str]:
    """Each name's short form, kept distinct: names whose short forms collide keep their lambdas
    and namespaces, and when even those collide, their whole name."""
    unique = list(dict.fromkeys(names))
    short = {n: _shorten(n, drop_details=True) for n in unique}
    for level in (False, None):
        seen: dict[str, int] = {}
        for n in unique:
            seen[short[n]] = seen.get(short[n], 0) + 1
        clashing = [n for n in unique if seen[short[n]] > 1]
        if not clashing:
            break
        for n in clashing:
            short[n] = n if level is None else _shorten(n, drop_details=False)
    return short


def _shorten(name: str, *, drop_details: bool) -> str:
    text = _ANONYMOUS.sub("", name.strip())
    text = _ROCM_SUFFIX.sub("", text).strip()
    if "(" not in text and "<" not in text:
        return text  # a plain symbol (ncclKernel_AllReduce_RING_LL_Sum_float, triton_poi_0)
    head = _strip_return_type(text)
    head = _strip_arguments(head)
    if drop_details:
        head = _LAMBDA.sub("", head)
        head = _OPERATOR_CALL.sub("", head)
        head = _strip_inner_arguments(head).replace("::operator", "")
        head = _NAMESPACE.sub("", head)
    while "> >" in head:  # C++03's spaced closing brackets
        head = head.replace("> >", ">>")
    return _SPACES.sub(" ", head).strip() or name


def _depth_zero(text: str) -> list[int]:
    """The nesting depth (of <>, () and {}) before each character."""
    depth, out = 0, []
    for char in text:
        if char in ")>}":
            depth = max(depth - 1, 0)
        out.append(depth)
        if char in "(<{":
            depth += 1
    return out


def _strip_return_type(text: str) -> str:
    """``void ns::f<T>(args)`` -> ``ns::f<T>(args)``: drop what precedes the last top-level space
    before the name's first bracket (a return type, ``static``, ``__global__``)."""
    depth = _depth_zero(text)
    first = next((i for i, c in enumerate(text) if c in "<(" and depth[i] == 0), len(text))
    space = max((i for i in range(first) if text[i] == " " and depth[i] == 0), default=-1)
    return text[space + 1 :]


def _strip_arguments(text: str) -> str:
    """``f<T>(int, float) const`` -> ``f<T>``: cut at the argument list, the first top-level ``(``
    after the name (a ``(`` inside template arguments is nested, so kept here)."""
    depth = _depth_zero(text)
    for i, char in enumerate(text):
        if char == "(" and depth[i] == 0 and i > 0:
            return text[:i]
    return text


def _strip_inner_arguments(text: str) -> str:
    """Argument lists inside template arguments (a functor's enclosing signature:
    ``bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)``) -> ``bfloat16_copy_kernel_cuda``."""
    out: list[str] = []
    skip = 0
    for char in text:
        if char == "(":
            skip += 1
            continue
        if char == ")" and skip:
            skip -= 1
            continue
        if not skip:
            out.append(char)
    return "".join(out)


def short_path(location: str, limit: int) -> str:
    """A path (or ``path:line (function)``) of at most ``limit`` characters, cut from the left at
    a folder boundary: the file name, line and function stay, the leading folders go first."""
    if len(location) <= limit:
        return location
    cut = len(location) - (limit - 2)  # room for "…/"
    slash = location.find("/", cut)
    if slash < 0:
        # No folder boundary leaves room: keep the file name and what follows, cut in the middle.
        last = location.rfind("/")
        tail = location[last + 1 :] if last >= 0 else location
        return tail if len(tail) <= limit else "…" + tail[len(tail) - limit + 1 :]
    return "…" + location[slash:]


def short_location(location: str, limit: int = 72) -> str:
    """A finding's location for a narrow column: a code location (``file.py:12 (fn)``) cut from
    the left, anything else (a collective kernel that issued the work) as a short kernel name."""
    if ".py:" in location or location.startswith(("/", "<")) or "(" not in location:
        return short_path(location, limit)
    return short_path(short_kernel_name(location), limit)


def plural(count: int, noun: str) -> str:
    """``1 GPU``, ``2 GPUs``, ``1,024 steps``: a count and its noun, in the number it takes."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def listed(words: Sequence[str]) -> str:
    """Words as a sentence lists them: "a", "a and b", "a, b and c"."""
    if len(words) < 2:
        return "".join(words)
    return f"{', '.join(words[:-1])} and {words[-1]}"


def percentage_change(points: float, relative_pct: float | None) -> str:
    """The change of a percentage, saying what kind: busy 40% -> 50% is ``+10.0 percentage
    points (+25.0% relative)``, never a bare ``+25.0%`` that reads as points."""
    text = f"{points:+.1f} percentage points"
    return text if relative_pct is None else f"{text} ({relative_pct:+.1f}% relative)"


_STABLE = (
    (re.compile(r"#\d+"), "#"),
    (re.compile(r"\b(seq|op_id|sequenceNr|id)\s*=\s*\d+"), r"\1=N"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x"),
)


def stable_name(name: str) -> str:
    """``name`` without its unique ids: ``ProfilerStep#123`` -> ``ProfilerStep#``."""
    for pattern, replacement in _STABLE:
        name = pattern.sub(replacement, name)
    return name
