"""Record and compare the sha256 of every file `vlbench demo` writes (datasets, cards, figures,
reports, predictions), to prove that a refactoring changes no output.

    python scripts/output_digest.py record DEMO_OUT > digests.json
    python scripts/output_digest.py compare DEMO_OUT digests.json

Manifests are compared without what legitimately differs between runs, machines and code edits: the
"run" section (timings, cache hits), "versions" (library versions) and "code_version" (the hash of
the builders' source, which any edit changes by design); the suite's `*.key.json` records without their
reuse key (it covers the tiny models' file times). Every other file must be byte-identical. `compare`
exits 1 and lists the differing, missing and extra files.

Parquet files and PNG plots carry the writing library's version, and reports name the demo folder's
absolute path: record and compare with the same libraries and the same DEMO_OUT path (the record
keeps both under "_meta", and `compare` says when they differ).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

VOLATILE_MANIFEST_KEYS = ("run", "versions", "code_version")
SKIPPED_PARTS = ("models",)  # the tiny random checkpoints the demo writes for CounterBias (safetensors metadata)


def file_digest(path: Path) -> str:
    data = path.read_bytes()
    if path.name == "manifest.json":
        manifest = json.loads(data)
        for key in VOLATILE_MANIFEST_KEYS:
            manifest.pop(key, None)
        data = json.dumps(manifest, sort_keys=True).encode()
    elif path.name.endswith(".key.json"):
        # a suite's record of what it kept: the SHA-256 of the kept file counts; the reuse key does not (it
        # covers the model folder's file times, which the demo writes anew each run)
        data = json.dumps({k: v for k, v in json.loads(data).items() if k != "key"}, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): file_digest(p) for p in sorted(root.rglob("*"))
            if p.is_file() and not set(p.relative_to(root).parts) & set(SKIPPED_PARTS)}


def environment(root: Path) -> dict:
    from importlib import metadata

    return {"root": str(root.resolve()),
            **{name: metadata.version(name) for name in ("pyarrow", "matplotlib", "pillow", "numpy", "torch")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record")
    record.add_argument("root", type=Path)
    compare = sub.add_parser("compare")
    compare.add_argument("root", type=Path)
    compare.add_argument("digests", type=Path)
    args = parser.parse_args()
    now = digests(args.root)
    if args.command == "record":
        print(json.dumps({"_meta": environment(args.root), **now}, indent=1, sort_keys=True))
        return 0
    before = json.loads(args.digests.read_text())
    meta = before.pop("_meta", {})
    for key, value in environment(args.root).items():
        if meta.get(key) != value:
            print(f"note: {key} is {value}, the record was made with {meta.get(key)}")
    changed = sorted(k for k in before.keys() & now.keys() if before[k] != now[k])
    missing, extra = sorted(before.keys() - now.keys()), sorted(now.keys() - before.keys())
    for label, items in (("differs", changed), ("missing", missing), ("extra", extra)):
        for item in items:
            print(f"{label}: {item}")
    same = len(before.keys() & now.keys()) - len(changed)
    print(f"{same} of {len(before)} files identical; {len(changed)} differ, {len(missing)} missing, "
          f"{len(extra)} extra")
    return 1 if changed or missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
