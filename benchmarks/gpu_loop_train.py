"""A small training loop with four planted pathologies, each switchable, for ``gpu_loop.py``.

Every pathology is on by default; ``--fix NAME`` (repeatable) turns one off the way gpuscope's
advice says to. The lines ``gpu_loop.py`` expects gpuscope to point at carry a ``# planted:``
comment, so the check finds them by reading this file, not by line numbers kept elsewhere.

- ``data_loader``: ``num_workers=0``, so each batch's slow read (``--read-ms`` of waiting, as on a
  remote file system or object store, the study's "remote reads") happens in the training process
  and the GPU waits for every batch. Fix: worker processes (``num_workers``,
  ``persistent_workers``), which read ahead so that a batch is ready when the step asks.
  A read, not a CPU transform: workers hide a wait whatever the number of cores, so the fixed run
  is not left bound by the CPU's speed at augmenting (the first H200 run was, 200 ms a batch).
- ``host_sync``: ``loss.item()`` every step drains the GPU's queue. Fix: keep the running loss
  on the GPU and read it once at the end.
- ``h2d_copy``: the batch is copied from pageable memory with a blocking ``.to()``. Fix: pinned
  batches (``pin_memory=True``) copied with ``non_blocking=True``.
- ``fp32_gemm``: the matmuls run in full FP32, off the tensor cores. Fix: TF32 matmuls (from
  Ampere; bf16 autocast would do as well).

Runs on the CPU too (``--device cpu``): the same loop, for ``gpu_loop.py --dry``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FIXES = ("data_loader", "host_sync", "h2d_copy", "fp32_gemm")


class SlowBatches(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Whole batches of 8-bit samples (as images arrive), each after ``read_ms`` of waiting for
    storage; made once and copied per batch, so the CPU does little. A batch is a quarter of the
    bytes of its float32 form: workers, shared memory and pinning move it well within a step."""

    def __init__(self, batches: int, batch: int, width: int, read_ms: float) -> None:
        self.batches, self.read_s = batches, read_ms / 1000
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (batch, width), generator=generator, dtype=torch.uint8)
        self.y = torch.randint(0, 256, (batch, width), generator=generator, dtype=torch.uint8)

    def __len__(self) -> int:
        return self.batches

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.read_s)  # the slow read
        return self.x.clone(), self.y.clone()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="append", choices=FIXES, default=[])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--read-ms", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    fixed = set(args.fix)
    device = torch.device(args.device)
    torch.manual_seed(0)

    torch.backends.cuda.matmul.allow_tf32 = "fp32_gemm" in fixed
    torch.backends.cudnn.allow_tf32 = "fp32_gemm" in fixed

    data = SlowBatches(args.steps, args.batch, args.width, args.read_ms)
    workers = args.workers if "data_loader" in fixed else 0
    loader = DataLoader(
        data,
        batch_size=None,  # the dataset yields whole batches
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory="h2d_copy" in fixed and device.type == "cuda",
    )
    model = nn.Sequential(
        *(nn.Sequential(nn.Linear(args.width, args.width), nn.GELU()) for _ in range(args.layers))
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    non_blocking = "h2d_copy" in fixed
    running = torch.zeros((), device=device)
    for batch, target in loader:  # planted: data_loader
        x = batch.to(device, non_blocking=non_blocking)  # planted: h2d_copy
        y = target.to(device, non_blocking=non_blocking)
        x, y = x.float() / 255, y.float() / 255  # decoded on the GPU
        loss = nn.functional.mse_loss(model(x), y)  # planted: fp32_gemm
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if "host_sync" in fixed:
            running += loss.detach()
        else:
            running += loss.item()  # planted: host_sync
    print(f"mean loss {float(running) / max(args.steps, 1):.4f}")


if __name__ == "__main__":
    main()
