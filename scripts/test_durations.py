"""Seconds each test file takes, summed from a pytest JUnit XML report (`pytest --junitxml FILE`, setup and
teardown included), written as tests/durations.json. tests/conftest.py hands the test workers the longest files
first, so that no long file starts last and runs alone at the end (`make durations` measures and writes it)."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def file_seconds(report: Path) -> dict[str, int]:
    """{tests/test_x.py: whole seconds} from the report's test cases (classname tests.test_x[.Class])."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        parts = module[:next((i + 1 for i, p in enumerate(module) if p.startswith("test_")), len(module))]
        seconds["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return {name: round(value) for name, value in sorted(seconds.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("report", type=Path, help="pytest's JUnit XML report")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests" / "durations.json")
    args = parser.parse_args()
    args.out.write_text(json.dumps(file_seconds(args.report), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
