"""The test workers' schedule: tests/durations.json (seconds per test file, read by conftest.py to hand out the
longest files first) is summed from the JUnit XML report pytest itself writes, and names only files that exist."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from test_durations import file_seconds  # noqa: E402


def test_a_junit_report_from_pytest_sums_to_seconds_per_file(tmp_path):
    """A real report: pytest run on two files in a folder of their own (their classnames `tests.test_one` and
    `tests.test_two.TestGroup`); every test case is counted under its file, a class's too."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_one.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    (tests / "test_two.py").write_text("class TestGroup:\n    def test_c(self):\n        pass\n")
    report = tmp_path / "report.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", f"--junitxml={report}", "tests"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(file_seconds(report)) == {"tests/test_one.py", "tests/test_two.py"}
    assert all(isinstance(v, int) and v >= 0 for v in file_seconds(report).values())


def test_the_schedule_names_only_test_files_that_exist():
    named = json.loads((ROOT / "tests" / "durations.json").read_text())
    assert named and [name for name in named if not (ROOT / name).is_file()] == []
