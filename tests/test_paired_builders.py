"""The paired benchmarks (COSIM-Q/C, PMR-P, VCR-Visor) share one build, `builders.pairing.PairedBuilder`.
Golden: the SHA-256 of each sample build's parquet file, recorded from the builders as they were before
that base existed (each then wrote the flow itself), with the locked pyarrow; the base writes the same
bytes. A lock update that moves pyarrow changes the files' writer tag: record the goldens again from a
build of the previous commit, never from the code under test."""

from __future__ import annotations

import hashlib

import pytest
from helpers import offline_flags

GOLDEN = {
    "cosim-q": "0b7504b31213fef086b9d679d5ec11e5153c33f6a768f75fce53cdb00365f91f",
    "cosim-c": "6632e4ba64ad13d0833df8ac9fce74e2a687d19f9275844f70f86424cf1fe1d5",
    "pmr-p": "b6a0ec09b85ff1d6ec685f2767c09f0ad3f6b1105d0eea44c4f6c96c59cbf55a",
    "vcr-visor": "a3c35213855bc1cce3ad5cff9da3123f1e0ea666039248275bc9d0b9b15576e0",
}
VCR_VISOR_WITH_IMAGES = "1416962047d92d176d3b6e1cbc657eaa35f52413d55cea031c1ff19fadd0ce0e"  # --images the samples'


def _sha256(folder) -> str:
    return hashlib.sha256((folder / "default" / "val-00000-of-00001.parquet").read_bytes()).hexdigest()


@pytest.mark.parametrize("bench", sorted(GOLDEN))
def test_a_paired_sample_build_keeps_its_bytes(built, bench):
    assert _sha256(built(bench)) == GOLDEN[bench]


def test_vcr_visor_with_images_keeps_its_bytes(cli, sample_sources, tmp_path):
    out = tmp_path / "vcr-visor"
    code, _, err = cli("build", "vcr-visor", "--source", sample_sources, "--out", out, "--images",
                       sample_sources / "vcr1images", *offline_flags("vcr-visor"))
    assert code == 0, err
    assert _sha256(out) == VCR_VISOR_WITH_IMAGES
