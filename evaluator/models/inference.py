"""Batched inference: under `torch.inference_mode`, on `--device auto` (this process's GPU
under a distributed launch, else CUDA when present, else CPU), optionally in bf16 autocast, with a
DataLoader whose workers decode images and run the processors."""

from __future__ import annotations

from typing import Callable

from core.torch_runtime import torch_device
from evaluator.models.distributed import local_device
from evaluator.models.options import ModelOptions


class _Items:
    def __init__(self, items: list, load: Callable):
        self.items, self.load = items, load

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        return self.load(self.items[i])


class Runner:
    def __init__(self, options: ModelOptions):
        self.device = torch_device(local_device(options.device))
        self.batch_size, self.workers, self.bf16 = options.batch_size, options.workers, options.bf16

    def place(self, model):
        """The model on this runner's device, in eval mode."""
        return model.to(self.device).eval()

    def map(self, items: list, load: Callable, collate: Callable, forward: Callable) -> list:
        """forward(collate([load(item) ...])) over batches, in order; loading and collating run in the
        DataLoader's workers. Returns forward's per-batch outputs."""
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(_Items(items, load), batch_size=self.batch_size, shuffle=False,
                            num_workers=self.workers, collate_fn=collate,
                            persistent_workers=False, pin_memory=self.device.type == "cuda")
        from core.progress import progress

        out = []
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            for batch in progress(loader, desc="model batches", unit="batch"):
                out.append(forward(batch))
        return out

    def to_device(self, batch: dict) -> dict:
        return {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
