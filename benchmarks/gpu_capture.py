"""Capture small real files with a known cause on a CUDA GPU, for tests and fixtures.

``python benchmarks/gpu_capture.py --out DIR`` on a machine with a CUDA GPU and PyTorch writes:

- ``sync_train.json.gz``: the PyTorch profiler (Kineto) trace of a small MLP training loop that
  reads its loss with ``.item()`` every step (planted: the host waits for the GPU at that line),
  with shapes, stacks and memory events (``profile_memory=True``: Kineto ``[memory]`` events);
- ``sync_train.pftrace``: the same profiling session exported as PyTorch's native Perfetto trace,
  when this PyTorch has such an export (the script says which method it used, or that none exists);
- ``oom_snapshot.pickle.gz``: a CUDA memory snapshot dumped by the out-of-memory observer after
  a loop of 16 GiB allocations (planted: the allocations at one line fill the device);
- ``capture.json``: what was captured, with the PyTorch and driver versions and the GPU's name.

Nothing here runs without a GPU; the files it makes are diagnosed by gpuscope like any other.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from pathlib import Path
from typing import Any


def _train_step(model: Any, x: Any, opt: Any) -> float:
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.item())  # planted: host_sync (the host waits for the GPU every step)


def profile_training(out: Path, facts: dict[str, Any]) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    layers = [torch.nn.Linear(2048, 2048) for _ in range(8)]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 2048, device="cuda")
    for _ in range(3):
        _train_step(model, x, opt)
    torch.cuda.synchronize()
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
        schedule=schedule(wait=1, warmup=1, active=4),
    ) as prof:
        for _ in range(6):
            _train_step(model, x, opt)
            prof.step()
    raw = out / "sync_train.json"
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(out / "sync_train.json.gz", "wb", 9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    facts["kineto"] = "sync_train.json.gz"
    names = sorted(n for n in dir(prof) if "perfetto" in n.lower() or "pftrace" in n.lower())
    facts["pftrace_methods"] = names
    for name in names:
        try:
            getattr(prof, name)(str(out / "sync_train.pftrace"))
            facts["pftrace"] = f"sync_train.pftrace (profile.{name})"
            break
        except Exception as e:  # a capture script reports and goes on
            facts[f"pftrace_{name}_error"] = repr(e)[:300]
    else:
        facts.setdefault("pftrace", "none: this PyTorch has no Perfetto export")


def oom_snapshot(out: Path, facts: dict[str, Any]) -> None:
    import torch

    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=20000)
    path = out / "oom_snapshot.pickle"

    def observer(device: int, alloc: int, device_alloc: int, device_free: int) -> None:
        torch.cuda.memory._dump_snapshot(str(path))
        facts["oom"] = {"device": device, "alloc": alloc, "device_free": device_free}

    torch._C._cuda_attach_out_of_memory_observer(observer)
    held = []
    try:
        while True:
            held.append(torch.empty(16 * 2**30, dtype=torch.uint8, device="cuda"))  # planted: oom
    except torch.OutOfMemoryError as e:
        facts["oom_message"] = str(e).splitlines()[0][:300]
    facts["held_gib"] = 16 * len(held)
    del held
    torch.cuda.memory._record_memory_history(enabled=None)
    if path.exists():
        with path.open("rb") as src, gzip.open(out / "oom_snapshot.pickle.gz", "wb", 9) as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        facts["snapshot"] = "oom_snapshot.pickle.gz"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("gpu_capture: no CUDA GPU here: nothing captured", file=sys.stderr)
        return 1
    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
    }
    for step in (profile_training, oom_snapshot):
        try:
            step(out, facts)
        except Exception as e:  # record what failed, capture the rest
            facts[f"{step.__name__}_error"] = repr(e)[:500]
    (out / "capture.json").write_text(json.dumps(facts, indent=1))
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
