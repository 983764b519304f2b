"""scripts/output_digest.py: the refactoring proof ignores only run timings, versions and code hash."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "output_digest.py"


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_record_then_compare(tmp_path):
    out = tmp_path / "demo"
    (out / "bench").mkdir(parents=True)
    manifest = {"benchmark": "x", "params": {"a": 1}, "run": {"build_seconds": 1.0}, "versions": {"numpy": "1"},
                "code_version": "abc"}
    (out / "bench" / "manifest.json").write_text(json.dumps(manifest))
    (out / "bench" / "data.parquet").write_bytes(b"rows")
    record = _run("record", out)
    assert record.returncode == 0, record.stderr
    (tmp_path / "d.json").write_text(record.stdout)
    manifest.update(run={"build_seconds": 9.0}, versions={"numpy": "2"}, code_version="def")
    (out / "bench" / "manifest.json").write_text(json.dumps(manifest))
    assert _run("compare", out, tmp_path / "d.json").returncode == 0
    manifest["params"]["a"] = 2
    (out / "bench" / "manifest.json").write_text(json.dumps(manifest))
    (out / "bench" / "extra.md").write_text("new")
    done = _run("compare", out, tmp_path / "d.json")
    assert done.returncode == 1
    assert "differs: bench/manifest.json" in done.stdout and "extra: bench/extra.md" in done.stdout


def test_a_suite_key_record_counts_its_file_digest_not_its_reuse_key(tmp_path):
    """A `*.key.json` (the suite's record of a kept file) whose reuse key changed, as it does when the demo
    writes its tiny model again (the key covers the folder's file times), compares equal; a changed SHA-256
    of the kept file does not."""
    out = tmp_path / "demo"
    (out / "card" / "predictions").mkdir(parents=True)
    key = out / "card" / "predictions" / "vqa-v2.key.json"
    key.write_text(json.dumps({"key": "a" * 64, "sha256": "b" * 64}))
    (tmp_path / "d.json").write_text(_run("record", out).stdout)
    key.write_text(json.dumps({"key": "c" * 64, "sha256": "b" * 64}))
    assert _run("compare", out, tmp_path / "d.json").returncode == 0
    key.write_text(json.dumps({"key": "c" * 64, "sha256": "d" * 64}))
    done = _run("compare", out, tmp_path / "d.json")
    assert done.returncode == 1 and "differs: card/predictions/vqa-v2.key.json" in done.stdout
