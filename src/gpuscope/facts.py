"""Peak figures and prices of GPU models, looked up by the device name a trace reports.

Contract:

* The table is data: ``data/gpu_facts.csv``, one row per GPU model, read once. Each row carries a
  case-insensitive regex (``match``) tried with :func:`re.search` against the device name as
  Kineto / nvidia-smi / rocm-smi report it; rows are tried in file order and the first match wins.
* Figures are vendor peaks, DENSE (no structured sparsity), in SI units with the unit in the name:
  FLOP/s, bytes/s, bytes. ``None`` means "this GPU has no such figure" (no FP8 on a V100), never 0.
* ``bf16_flops_per_s`` is the 16-bit tensor-core peak: BF16, or FP16 on GPUs without BF16 (V100,
  T4, RTX 2080 Ti). GeForce figures use FP32 accumulation. ``fp32_flops_per_s`` is the non-tensor
  (NVIDIA CUDA core / AMD vector) FP32 peak.
* ``memory_bytes`` is the vendor's nominal capacity read as GiB (the driver reports a little less).
* ``interconnect_bytes_per_s`` is the GPU-to-GPU link's total (bidirectional) bandwidth as vendors
  quote it: NVLink / Infinity Fabric, or the PCIe x16 slot for PCIe-only cards.
* An MI250 / MI250X appears to software as two devices (GCDs); its rows give one GCD's figures.
* ``host_link_bytes_per_s`` is the link to the host's memory (total, both directions): the PCIe
  x16 slot of the GPU's generation, or NVLink-C2C on a Grace superchip; host copies cross it.
* ``architecture`` (``volta``, ``ampere``, ``hopper``, ``cdna3``...) says which precisions the
  tensor / matrix cores take: the fixes are fitted to it.
* ``usd_per_gpu_hour`` is a typical public on-demand price (``source`` names it); a user's own
  price always wins.

:func:`match_device` never guesses. It returns ``None`` for a missing, empty or unknown name, for an
nvidia-smi MIG name, and when ``num_sms`` (the SM / CU count the trace reports; ``None``, 0 or -1
for "not recorded") contradicts the matched row: a MIG slice or an MI300X partition reports its
parent's name but fewer SMs, and full-chip peaks would be wrong for it. A generic or empty AMD
name ("AMD Radeon Graphics", "") is unknown too: a CU count alone does not name a GPU (304 CUs is
an MI300X or an MI325X, with different memory and bandwidth).

:func:`device_facts` is what the diagnosis uses: the exact row when there is one, else the
family's (``data/gpu_families.csv``: a name pattern, the architecture and, where the variants of a
chip share its peaks, a stand-in row) marked ``estimated`` and "estimated from family" in its
name, else None. A family whose models differ too much to share peaks (GeForce series) gives the
architecture alone, with no peaks and no price; so does a MIG slice or a partition of a known chip.
``gpu=`` (the ``--gpu NAME`` option) names the device when the trace does not.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from functools import cache

import msgspec

from gpuscope.classify import DATA

_COLUMNS = (
    "key",
    "display_name",
    "vendor",
    "architecture",
    "match",
    "sm_count",
    "memory_gib",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp8_tflops",
    "memory_bandwidth_gb_s",
    "interconnect",
    "interconnect_gb_s",
    "host_link_gb_s",
    "usd_per_gpu_hour",
    "source",
)

#: Device names that say "some AMD GPU" without saying which.
_GENERIC_AMD_NAME = re.compile(r"^(AMD\b)?\s*(Radeon(\s+Graphics)?|Instinct)?$", re.IGNORECASE)
#: nvidia-smi names of MIG instances, e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
_MIG_NAME = re.compile(r"\bMIG\s+\d+g\.\d+gb\b", re.IGNORECASE)


#: Architectures by what their tensor (matrix) cores take: none at all, or FP16 and not BF16.
#: On these the 16-bit peak (``bf16_flops_per_s``) is an FP16 figure.
NO_TENSOR_CORES = frozenset({"pascal", "maxwell"})
FP16_ONLY = frozenset({"volta", "turing"})


#: Pinned host-to-device copies reach about this share of the host link's peak in one direction
#: (PCIe 4.0 x16: ~25 of 32 GB/s; 5.0 x16: ~50 of 64 GB/s, as bandwidthTest reports them; an H200
#: measured 55 of 64): TLP headers and DMA set-up take the rest.
PINNED_LINK_EFFICIENCY = 0.8


class GpuFacts(msgspec.Struct, frozen=True):
    """One GPU model's dense peak figures; ``None`` where the figure does not exist."""

    key: str
    display_name: str
    vendor: str
    sm_count: int | None  # NVIDIA SMs, AMD CUs (per GCD for MI250/MI250X)
    memory_bytes: int | None
    fp32_flops_per_s: float | None
    tf32_flops_per_s: float | None
    bf16_flops_per_s: float | None
    fp8_flops_per_s: float | None
    memory_bandwidth_bytes_per_s: float | None
    interconnect: str | None
    interconnect_bytes_per_s: float | None
    usd_per_gpu_hour: float | None
    source: str
    architecture: str | None = None
    host_link_bytes_per_s: float | None = None
    estimated: bool = False  # from the GPU's family, not its own row

    @property
    def pinned_copy_bytes_per_s(self) -> float | None:
        """What a pinned host-to-device copy reaches: one direction of the host link at
        :data:`PINNED_LINK_EFFICIENCY`; None when the link is unknown."""
        if not self.host_link_bytes_per_s:
            return None
        return self.host_link_bytes_per_s / 2.0 * PINNED_LINK_EFFICIENCY

    @property
    def sixteen_bit(self) -> str:
        """What the 16-bit peak is a peak of: ``"FP16"`` on GPUs without BF16, else ``"BF16"``."""
        return "FP16" if self.architecture in NO_TENSOR_CORES | FP16_ONLY else "BF16"


def _float(text: str, scale: float) -> float | None:
    text = text.strip()
    return None if not text else float(text) * scale


def _int(text: str) -> int | None:
    text = text.strip()
    return None if not text else int(text)


def _row_facts(row: dict[str, str]) -> GpuFacts:
    memory_gib = _float(row["memory_gib"], 1.0)
    return GpuFacts(
        key=row["key"].strip(),
        display_name=row["display_name"].strip(),
        vendor=row["vendor"].strip(),
        sm_count=_int(row["sm_count"]),
        memory_bytes=None if memory_gib is None else round(memory_gib * 2**30),
        fp32_flops_per_s=_float(row["fp32_tflops"], 1e12),
        tf32_flops_per_s=_float(row["tf32_tflops"], 1e12),
        bf16_flops_per_s=_float(row["bf16_tflops"], 1e12),
        fp8_flops_per_s=_float(row["fp8_tflops"], 1e12),
        memory_bandwidth_bytes_per_s=_float(row["memory_bandwidth_gb_s"], 1e9),
        interconnect=row["interconnect"].strip() or None,
        interconnect_bytes_per_s=_float(row["interconnect_gb_s"], 1e9),
        usd_per_gpu_hour=_float(row["usd_per_gpu_hour"], 1.0),
        source=row["source"].strip(),
        architecture=row["architecture"].strip() or None,
        host_link_bytes_per_s=_float(row["host_link_gb_s"], 1e9),
    )


@cache
def _table() -> tuple[tuple[re.Pattern[str], GpuFacts], ...]:
    """The CSV, parsed and checked once: (compiled ``match``, facts) in file order."""
    text = (DATA / "gpu_facts.csv").read_text("utf-8")
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != _COLUMNS:
        raise ValueError(f"gpu_facts.csv: expected columns {_COLUMNS}, got {reader.fieldnames}")
    rows: list[tuple[re.Pattern[str], GpuFacts]] = []
    keys: set[str] = set()
    for line, row in enumerate(reader, start=2):
        try:
            facts = _row_facts(row)
            pattern = re.compile(row["match"].strip(), re.IGNORECASE)
        except (ValueError, re.error, AttributeError) as exc:
            raise ValueError(f"gpu_facts.csv line {line}: {exc}") from exc
        if facts.key in keys:
            raise ValueError(f"gpu_facts.csv line {line}: duplicate key {facts.key!r}")
        keys.add(facts.key)
        rows.append((pattern, facts))
    return tuple(rows)


def all_facts() -> list[GpuFacts]:
    """Every row of the table, in file (match) order."""
    return [facts for _, facts in _table()]


#: The part of a device name matched against the table.
MAX_DEVICE_NAME_CHARS = 256


def match_device(name: str | None, *, num_sms: int | None = None) -> GpuFacts | None:
    """The facts for a device name as a trace reports it, or ``None`` when not known for sure.

    ``num_sms`` is the SM (NVIDIA) / CU (AMD) count the trace reports, if any; see the module
    docstring for how it confirms a name match and how it identifies generically named AMD GPUs.
    """
    sms = num_sms if num_sms is not None and num_sms > 0 else None
    # A bounded prefix: device names are tens of characters, and a corrupt trace's name of
    # megabytes would take each of the table's patterns minutes to search.
    text = (name or "")[:MAX_DEVICE_NAME_CHARS].strip()
    if not text or _GENERIC_AMD_NAME.match(text) or _MIG_NAME.search(text):
        return None
    for pattern, facts in _table():
        if pattern.search(text):
            if sms is not None and facts.sm_count is not None and sms != facts.sm_count:
                return None
            return facts
    return None


def gpu_hour_price(
    devices: Iterable[GpuFacts | None], override: float | None, *, purpose: str = "price the waste"
) -> tuple[float | None, str]:
    """The price per GPU-hour to use and where it comes from: ``--gpu-hour-usd`` when given,
    else the facts table's price of the first known device, else None and how to give one (a
    device the table knows without a public on-demand price is named as such, never priced $0)."""
    if override is not None:
        return override, "--gpu-hour-usd"
    unpriced: str | None = None
    for facts in devices:
        if facts is not None and facts.usd_per_gpu_hour:
            return facts.usd_per_gpu_hour, f"typical on-demand price of {facts.display_name}"
        if facts is not None and unpriced is None:
            unpriced = facts.display_name
    if unpriced is not None:
        return None, f"no price known for {unpriced}: pass --gpu-hour-usd to {purpose}"
    return None, f"unknown device: pass --gpu-hour-usd to {purpose}"


_FAMILY_COLUMNS = ("match", "vendor", "architecture", "stand_in", "why")


class _Family(msgspec.Struct, frozen=True):
    pattern: re.Pattern[str]
    vendor: str
    architecture: str
    stand_in: GpuFacts | None
    why: str


@cache
def _families() -> tuple[_Family, ...]:
    text = (DATA / "gpu_families.csv").read_text("utf-8")
    reader = csv.DictReader(text.splitlines())
    if tuple(reader.fieldnames or ()) != _FAMILY_COLUMNS:
        raise ValueError(f"gpu_families.csv: expected columns {_FAMILY_COLUMNS}")
    by_key = {f.key: f for f in all_facts()}
    families: list[_Family] = []
    for line, row in enumerate(reader, start=2):
        key = row["stand_in"].strip()
        if key and key not in by_key:
            raise ValueError(f"gpu_families.csv line {line}: unknown stand-in {key!r}")
        families.append(
            _Family(
                re.compile(row["match"].strip(), re.IGNORECASE),
                row["vendor"].strip(),
                row["architecture"].strip(),
                by_key.get(key),
                row["why"].strip(),
            )
        )
    return tuple(families)


def family_facts(name: str | None, *, num_sms: int | None = None) -> GpuFacts | None:
    """The facts of the GPU's family, marked estimated; None when no family matches. Peaks come
    from the stand-in row only when the SM count (if recorded) agrees and the name is not a MIG
    slice; otherwise only the architecture is known."""
    text = (name or "").strip()
    if not text or _GENERIC_AMD_NAME.match(text):
        return None
    sms = num_sms if num_sms is not None and num_sms > 0 else None
    for family in _families():
        if not family.pattern.search(text):
            continue
        base = family.stand_in
        whole_chip = not _MIG_NAME.search(text) and (
            sms is None or base is None or base.sm_count is None or sms == base.sm_count
        )
        if base is not None and whole_chip:
            return msgspec.structs.replace(
                base,
                display_name=f"{base.display_name} (estimated from family)",
                source=f"estimated from family: {family.why}; peaks of {base.key}: {base.source}",
                sm_count=sms or base.sm_count,
                estimated=True,
            )
        return GpuFacts(
            key=f"family_{family.architecture}",
            display_name=f"{text} ({family.architecture.title()}, estimated from family: no peaks)",
            vendor=family.vendor,
            sm_count=sms,
            memory_bytes=None,
            fp32_flops_per_s=None,
            tf32_flops_per_s=None,
            bf16_flops_per_s=None,
            fp8_flops_per_s=None,
            memory_bandwidth_bytes_per_s=None,
            interconnect=None,
            interconnect_bytes_per_s=None,
            usd_per_gpu_hour=None,
            source=f"estimated from family: {family.why}",
            architecture=family.architecture,
            estimated=True,
        )
    return None


def device_facts(
    name: str | None, *, num_sms: int | None = None, gpu: str | None = None
) -> GpuFacts | None:
    """The facts to diagnose a device with: its own row, else the row ``gpu`` (``--gpu NAME``)
    names, else the family of either (estimated). ``gpu`` never overrides a row the trace's own
    name finds: it names the device when the trace does not."""
    return (
        match_device(name, num_sms=num_sms)
        or match_device(gpu)
        or family_facts(name, num_sms=num_sms)
        or family_facts(gpu)
    )
