"""Table 7 of the VCR-Visor paper (Appendix C) next to vlbench's builds: COSIM-Q and COSIM-C from a CoSIm
val.json, built with the recipe's own Sentence-BERT (all-mpnet-base-v2, fetched offline by
fetch_mpnet.py and hash-checked) and, offline, without the MNLI filter.

    python scripts/table7_counts.py [--cosim ../shared/reference/cosim/val.json] [--sbert PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE_7 = {"cosim-q": 154, "cosim-c": 182}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cosim", type=Path, default=ROOT.parent / "shared" / "reference" / "cosim" / "val.json")
    parser.add_argument("--sbert", default=None, help="Sentence-BERT folder (default: all-mpnet-base-v2, fetched)")
    parser.add_argument("--nli", default="none", help="MNLI model (default: none, offline)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    from fetch_mpnet import model_folder

    from pipelines.build import run_build

    sbert = args.sbert or str(model_folder())
    print(f"Sentence-BERT {sbert}; NLI {args.nli}; source {args.cosim}")
    print("| Dataset | Table 7 | pairs built | sub-questions built | candidates | after NLI |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for bench, paper in TABLE_7.items():
            out = Path(tmp) / bench
            run_build(bench, args.cosim, out, assignments=[f"sbert_model={sbert}", f"nli_model={args.nli}"],
                      use_cache=False)
            stats = json.loads((out / "manifest.json").read_text())["statistics"]
            mining = stats["mining"]
            print(f"| {bench.upper()} | {paper:,} | {stats['pairs']:,} | {stats['sub_questions']:,} | "
                  f"{mining['candidates']:,} | {mining['kept']:,} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
