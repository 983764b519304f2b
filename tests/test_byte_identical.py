"""Every benchmark builds byte for byte the same under other CPU kernels and thread counts (issue:
byte-identical on any machine). torch picks its CPU kernels by the CPU's vector extensions;
ATEN_CPU_CAPABILITY forces another path (`default`: no vector extensions, as on an old CPU; `avx2`: a
laptop without AVX-512), so one machine stands in for several. The `default` runs also turn off
numpy's dispatched vector paths (NPY_DISABLE_CPU_FEATURES) and libjpeg-turbo's SIMD (JSIMD_FORCENONE),
which DISCO's JPEG encoder runs on. Before cosines were rounded to a stated precision, the parquets
of vcr-visor, cosim-q and pmr-p differed across these runs (seen with this test on the earlier code)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# Each run changes both the kernels and the thread count from the other and from the session's builds (`built`: this
# CPU's best kernels, every core): a build that depends on either differs somewhere. The two run at once.
RUNS = [("default", 1), ("avx2", 2)]


def _has_avx2() -> bool:
    try:
        return " avx2 " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def _numpy_dispatch_levels() -> str:
    """numpy's dispatched x86 levels this CPU has (turned off in the `default` runs)."""
    from numpy._core._multiarray_umath import __cpu_features__

    return " ".join(level for level in ("X86_V4", "X86_V3") if __cpu_features__.get(level))


def _start_build(sources: Path, out: Path, nli: Path, capability: str, threads: int) -> subprocess.Popen:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads), "PYTHONPATH": str(HERE.parent)}
    if capability == "default":
        env.update(NPY_DISABLE_CPU_FEATURES=_numpy_dispatch_levels(), JSIMD_FORCENONE="1")
    return subprocess.Popen([sys.executable, str(HERE / "build_every_benchmark.py"), str(sources), str(out), str(nli),
                             str(threads)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _published(folder: Path) -> dict:
    """What a build publishes: every output file's sha256, and the manifest but its run timings."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("run")
    return manifest


@pytest.mark.slow
def test_every_benchmark_builds_byte_identical_on_other_cpu_kernels_and_thread_counts(sample_sources, built, tmp_path):
    from builders.registry import benchmarks
    from pipelines.tiny_models import write_tiny_sequence_classifier

    nli = write_tiny_sequence_classifier(tmp_path / "nli", {0: "entailment", 1: "neutral", 2: "contradiction"})
    runs = [(c, t) for c, t in RUNS if c != "avx2" or _has_avx2()]
    started = {run: _start_build(sample_sources, tmp_path / "{}-{}".format(*run), nli, *run) for run in runs}
    try:
        for run, process in started.items():
            _, err = process.communicate(timeout=1200)
            assert process.returncode == 0, err[-3000:]
    finally:
        for process in started.values():
            process.kill()
    for capability, threads in runs:
        kernels = json.loads((tmp_path / f"{capability}-{threads}" / "kernels.json").read_text())
        assert kernels == {"capability": capability.upper(), "threads": threads}  # the setting took effect
    names = [b.name for b in benchmarks()]
    first = tmp_path / "{}-{}".format(*runs[0])
    for capability, threads in runs:
        for name in names:  # against the session's builds: this CPU's own kernels, every core
            assert _published(tmp_path / f"{capability}-{threads}" / name) == _published(built(name)), \
                f"{name} differs between this CPU's kernels and {(capability, threads)}"
    for capability, threads in runs[1:]:
        assert _published(tmp_path / f"{capability}-{threads}" / "cosim-q-nli") == _published(first / "cosim-q-nli"), \
            f"cosim-q with an NLI model differs between {runs[0]} and {(capability, threads)}"
    parquets = [o for o in _published(first / "vcr-visor")["outputs"] if o["path"].endswith(".parquet")]
    assert parquets and all(len(o["sha256"]) == 64 for o in parquets)


def test_verify_against_a_published_build_names_the_versions_that_differ(built, cli, tmp_path):
    from core.manifest import library_versions

    folder = built("disco")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert {"torch", "pillow", "numpy", "pyarrow", "datasets", "sentence-transformers"} <= set(manifest["versions"])
    assert manifest["versions"] == library_versions()
    code, out, _ = cli("verify", folder, "--against", folder)  # a build is byte-identical to itself
    assert code == 0 and f"checked: {len(manifest['outputs'])} files against the published build's sha256" in out

    # The published build was made with another Pillow (and its JPEG encoder): one image parquet differs.
    published = json.loads((folder / "manifest.json").read_text())
    parquet = next(o for o in published["outputs"] if o["path"].endswith(".parquet"))
    parquet["sha256"] = "0" * 64
    published["versions"]["pillow"] = "9.0.0\x1b]0;owned\x07"  # a hostile manifest's text is sanitised
    (tmp_path / "published.json").write_text(json.dumps(published))
    code, _, err = cli("verify", folder, "--against", tmp_path / "published.json")
    assert code == 2 and f"problem: {parquet['path']}: differs from the published build" in err
    assert f"differs: version: pillow {manifest['versions']['pillow']} here, 9.0.0" in err and "\x1b" not in err
    assert "numpy" not in err  # only what differs is named

    published["outputs"] = published["outputs"][1:]
    published["params"] = {**published["params"], "seed": 99}
    published["versions"] = manifest["versions"]
    (tmp_path / "published.json").write_text(json.dumps(published))
    code, _, err = cli("verify", folder, "--against", tmp_path / "published.json")
    first = manifest["outputs"][0]["path"]
    assert code == 2 and f"{first}: in this build, not in the published one" in err
    assert f"differs: param: seed {manifest['params']['seed']} here, 99 published" in err

    # text of a published manifest cannot forge a line, reorder the terminal's text or fail to print
    published["versions"] = {**manifest["versions"], "pillow": f"9.0.0\n{folder}: ok\tx \u202eko\udcff"}
    (tmp_path / "published.json").write_text(json.dumps(published))
    code, _, err = cli("verify", folder, "--against", tmp_path / "published.json")
    (line,) = [x for x in err.splitlines() if "pillow" in x]
    assert code == 2 and line.endswith(f"9.0.0 {folder}: ok x \\u202eko\\xff published") and not any(
        x.startswith(f"{folder}: ok") for x in err.splitlines()), err


@pytest.mark.parametrize("content, message", [(None, "no such file or folder"), ("[]", "expected a JSON object"),
                                              ('{"outputs": 3}', "not a vlbench manifest")])
def test_verify_against_a_damaged_published_manifest_is_one_line(built, cli, tmp_path, content, message):
    path = tmp_path / "published.json"
    if content is not None:
        path.write_text(content)
    code, out, err = cli("verify", built("disco"), "--against", path)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "checked" not in out


@pytest.mark.parametrize("inputs", [5, "text", {"a": 1}, [{"path": ["not", "text"], "sha256": "x"}, 3, None]])
def test_verify_against_a_published_manifest_with_malformed_inputs(built, cli, tmp_path, inputs):
    """Malformed `inputs` in a published manifest (not a list, entries that are not records, a path that is not
    text): the files are compared, the differences named, and nothing is read from those inputs."""
    folder = built("disco")
    published = json.loads((folder / "manifest.json").read_text())
    published["outputs"][0]["sha256"] = "0" * 64
    published["inputs"] = inputs
    (tmp_path / "published.json").write_text(json.dumps(published))
    code, _, err = cli("verify", folder, "--against", tmp_path / "published.json")
    assert code == 2 and "Traceback" not in err and "differs from the published build" in err
    assert err.strip().splitlines()[-1].startswith("error: ")


def test_every_card_states_how_its_floats_are_made(built):
    from builders.registry import benchmarks, get_builder

    for benchmark in benchmarks():
        folder = built(benchmark.name)
        card = " ".join((folder / "README.md").read_text().split())
        assert "**Floating-point values.** " + " ".join(get_builder(benchmark.name).floats.split()) in card
        assert "byte-identical on any CPU and thread count" in card and "${" not in card
    card = " ".join((built("vcr-visor") / "README.md").read_text().split())
    assert "rounded to 4 decimal places (half to even)" in card and "Tie rule" in card
    mining = json.loads((built("cosim-q") / "manifest.json").read_text())["statistics"]["mining"]
    assert mining["near_threshold"]["precision"] == 1e-4 and mining["near_threshold"]["count"] >= 0
    assert len(mining["near_threshold"]["decisions"]) == min(200, mining["near_threshold"]["count"])
