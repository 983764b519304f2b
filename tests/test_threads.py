"""The threads vlbench's numeric libraries run on (core/threads.py): chosen for the user from the cores the process
may use (its affinity mask within its cgroup's CPU quota), a user's own setting kept, and said in the record.
Goldens: hand-written cgroup files (v2 `cpu.max`, v1 `cpu.cfs_quota_us`), this process's affinity mask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from core.threads import CHOSEN_BY_VLBENCH, THREAD_VARIABLES, choose_threads, limit_to, usable_cores

ROOT = Path(__file__).resolve().parents[1]


def test_the_usable_cores_are_the_affinity_mask_within_the_cgroup_quota(tmp_path):
    mask = len(os.sched_getaffinity(0))
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("max 100000\n")
    assert usable_cores(v2) == mask
    (v2 / "cpu.max").write_text("50000 100000\n")  # half a core: one thread
    assert usable_cores(v2) == 1
    (v2 / "cpu.max").write_text(f"{mask * 300000} 100000\n")  # a quota above the mask: the mask
    assert usable_cores(v2) == mask
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    assert usable_cores(tmp_path / "v1") == 1
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert usable_cores(tmp_path / "v1") == mask
    assert usable_cores(tmp_path / "nothing") == mask


def test_a_users_own_setting_is_kept_whole():
    environ = {"MKL_NUM_THREADS": "3"}
    choose_threads(environ)
    assert environ == {"MKL_NUM_THREADS": "3"}
    waiting = {"OMP_WAIT_POLICY": "ACTIVE"}  # a wait policy of the user's: no spin count over it
    choose_threads(waiting)
    assert "GOMP_SPINCOUNT" not in waiting and waiting["OMP_WAIT_POLICY"] == "ACTIVE"
    limit_to(1, environ)  # a Ray task's CPUs do not override the user's either
    assert environ == {"MKL_NUM_THREADS": "3"}
    environ = {}
    choose_threads(environ)
    count = str(usable_cores())
    assert [environ[name] for name in THREAD_VARIABLES] == [count] * 3 and environ["GOMP_SPINCOUNT"] == "1000"
    limit_to(1, environ)  # vlbench's own choice gives way to the task's CPUs
    assert [environ[name] for name in THREAD_VARIABLES] == ["1"] * 3


def test_the_console_script_chooses_them_and_the_record_says_so(built, tmp_path):
    """`vlbench predict` as a user runs it, with no thread variable set: its record names vlbench's rule (the same
    words on any machine); with OMP_NUM_THREADS=1, the user's setting."""
    plain = {k: v for k, v in os.environ.items() if k not in (*THREAD_VARIABLES, "OMP_WAIT_POLICY")
             and not k.startswith("VLBENCH_THREADS")}
    records = []
    for extra in ({}, {"OMP_NUM_THREADS": "1"}):
        out = tmp_path / f"run{len(records)}" / "p.json"
        done = subprocess.run([sys.executable, "-m", "pipelines.cli", "predict", "vqa-v2", "--data", built("vqa-v2"),
                               "--model", "baseline:prior", "--out", out], cwd=ROOT, env={**plain, **extra},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        records.append(json.loads(out.with_suffix(".meta.json").read_text())["threads"])
    assert records == [CHOSEN_BY_VLBENCH, "the user: OMP_NUM_THREADS=1"]
