"""The table `make bench` ends with: every measure the benchmark scripts printed (benchlib.verdict
appends them to the JSON-lines file named here), with its target and whether it was met.

    python scripts/summarise_benches.py RESULTS.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def table(lines: list[str]) -> str:
    rows = [json.loads(line) for line in lines if line.strip()]
    out = ["| bench | measure | value | target | met |", "|---|---|---|---|---|"]
    for r in rows:
        detail = f" ({r['detail']})" if r["detail"] else ""
        out.append(f"| {r['bench']} | {r['measure']}{detail} | {r['value']:.3g}{r['unit']} | {r['target']} | "
                   f"{'-' if r['passed'] is None else 'yes' if r['passed'] else 'NO'} |")
    return "\n".join(out)


def main() -> int:
    path = Path(sys.argv[1])
    print(table(path.read_text(encoding="utf-8").splitlines() if path.is_file() else []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
