"""Row sharding under `torchrun` / `accelerate launch`: rank r takes rows r, r + W, ...;
per-row results are gathered so that every rank holds them in row order, identical to one process."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, n: int) -> np.ndarray:
        return np.arange(self.rank, n, self.size)

    def all_rows(self, values, shard: np.ndarray, n: int):
        """This rank's per-row values (numpy or torch, rows first) -> every row's, in row order."""
        if self.size == 1:
            return values
        import torch
        import torch.distributed as dist

        local = values.detach().cpu() if isinstance(values, torch.Tensor) else np.asarray(values)
        parts: list = [None] * self.size
        dist.all_gather_object(parts, (shard, local))
        first = parts[0][1]
        if isinstance(first, torch.Tensor):
            out = first.new_empty((n, *first.shape[1:]))
            for idx, part in parts:
                out[torch.as_tensor(idx)] = part
            return out.to(values.device)
        out = np.empty((n, *first.shape[1:]), dtype=first.dtype)
        for idx, part in parts:
            out[idx] = part
        return out

    def close(self) -> None:
        """Wait for every rank, then leave the process group. Exiting with the group still up lets
        gloo's threads outlive the interpreter (a rank can then abort with std::terminate)."""
        if self.size == 1:
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
            global _left_group
            _left_group = True


_left_group = False  # set once World.close has taken this process out of its process group


def exit_after_group(code: int) -> None:
    """End a process that has left its process group without the interpreter's finalization.

    Gloo's threads can still be tearing down when the interpreter finalizes, and an abort there
    ("terminate called without an active exception", a PyTorch teardown race that barrier +
    destroy_process_group does not always prevent) turns a finished rank's exit status into a
    failure for the launcher. The command's files are closed and renamed into place by then; the
    standard streams are flushed here. A process that never joined a group returns."""
    if not _left_group:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def single_process() -> World:
    return World()


def world_from_env() -> World:
    """The launcher's process group (RANK / WORLD_SIZE set by torchrun and accelerate launch), joined
    with NCCL when CUDA is present, else gloo; a plain run is a world of one."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = os.environ.get("VLBENCH_DIST_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend=backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return World(rank=dist.get_rank(), size=dist.get_world_size())


def local_device(name: str) -> str:
    """`auto` under a multi-process launch is this process's GPU (LOCAL_RANK)."""
    if name == "auto" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch

        if torch.cuda.is_available():
            return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return name
