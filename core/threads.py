"""The threads vlbench's numeric libraries (torch's OpenMP pool, MKL, OpenBLAS) run on, chosen for the user.

torch starts one OpenMP thread per core of the machine, whatever the process may use: in a container given two of
a machine's 64 cores (a CPU quota, not an affinity mask) it runs 64 threads on two cores, and beside other work its
waiting threads spin for cores that are busy. Measured on this project's 2-core machine beside one busy process
(a stack of small linear layers, the shape of a tiny model's forward): 2 spinning threads took 2.91 s where 1 took
0.78 s; a suite on a busy machine ran 13 times slower than with one thread per process. So, unless the user set
them, `vlbench` sets before torch is imported (scripts/bench_threads.py measures it):

- `OMP_NUM_THREADS` (and MKL's, OpenBLAS's) to the cores this process may use: its affinity mask, within its
  cgroup's CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), at least 1;
- `GOMP_SPINCOUNT=1000`: a thread waiting for work spins 1,000 times, not 300,000, before it sleeps (torch's
  OpenMP is GNU's). Measured on a small Llama's forwards (hidden size 512, 4 layers), 2 threads on 2 cores: beside
  a busy process 6.0 s against 10.2 s spinning (one thread: 5.6 s), idle 3.5 s against 3.2 s; a passive wait
  (`OMP_WAIT_POLICY=PASSIVE`) gave 6.2 s busy but 4.1 s idle. The count is not chosen by the machine's load: an
  `hf:` model's last bits depend on it, and a run must be the same on a machine whatever else it is doing.

A Ray task runs on the CPUs it asked for (`limit_to`, from evaluator/ray_shards.py). Outputs do not depend on the
thread count (tests/test_byte_identical.py); a run's record says who chose them (`recorded`), a build's manifest
also how many (its `run` section, which differs from machine to machine).
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SPIN_COUNT = "1000"  # GOMP_SPINCOUNT: a waiting thread's spins before it sleeps (GNU OpenMP's default: 300,000)
_CHOSEN = "VLBENCH_THREADS_CHOSEN"  # "1" where vlbench set them (inherited by the processes it starts)


def _quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup's CPU quota in cores (None: no quota, or none readable)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cores(root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its affinity mask, within its cgroup's CPU quota (rounded up), at least
    one."""
    cores = len(os.sched_getaffinity(0))
    quota = _quota(root)
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


CHOSEN_BY_VLBENCH = "vlbench: the cores each process may use (a Ray task: the CPUs it asked for)"


def _user_set(environ) -> bool:
    return any(environ.get(name) for name in THREAD_VARIABLES) and not environ.get(_CHOSEN)


def choose_threads(environ=os.environ) -> None:
    """Set the thread variables to `usable_cores()` and OpenMP's spin count to SPIN_COUNT, where the user set none
    of the thread variables (a user's own setting is kept, whole; a wait policy or spin count of theirs too)."""
    if not _user_set(environ):
        _set(environ, usable_cores())


def limit_to(count: int, environ=os.environ) -> None:
    """Run on COUNT threads from now on (a Ray task on the CPUs it asked for), unless the user chose them: the
    variables for what is loaded later, torch's pool if it is loaded already."""
    if _user_set(environ):
        return
    _set(environ, max(1, count))
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(max(1, count))


def _set(environ, count: int) -> None:
    for name in THREAD_VARIABLES:
        environ[name] = str(count)
    if not environ.get("OMP_WAIT_POLICY"):
        environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)
    environ[_CHOSEN] = "1"


def recorded(environ=os.environ) -> str:
    """Who chose a run's threads, as its record says: vlbench (by the rule above, the same words on every
    machine and in every shard, so that a record does not depend on the machine's cores), the user (their
    OMP_NUM_THREADS), or torch's default (a library caller's process)."""
    if environ.get(_CHOSEN):
        return CHOSEN_BY_VLBENCH
    if _user_set(environ):
        return "the user: " + ", ".join(f"{n}={environ[n]}" for n in THREAD_VARIABLES if environ.get(n))
    return "torch's default: one per core of the machine"


def torch_threads() -> int | None:
    """The threads torch runs on, where this process has loaded it (None: not loaded)."""
    torch = sys.modules.get("torch")
    return None if torch is None else torch.get_num_threads()
