"""Build every registered benchmark from sample sources, caches off, into OUT/<bench> (and cosim-q
with a tiny random NLI model, whose near-tie logits take the float64 path), then write
OUT/kernels.json: the torch CPU capability and thread count the builds ran with.

Run by tests/test_byte_identical.py in a subprocess per ATEN_CPU_CAPABILITY and thread count:
    python tests/build_every_benchmark.py SOURCES OUT NLI_MODEL THREADS
"""

import json
import sys
from pathlib import Path


def main(sources: Path, out: Path, nli_model: str, threads: int) -> None:
    import torch

    from builders.registry import benchmarks
    from pipelines.build import run_build

    torch.set_num_threads(threads)
    for benchmark in benchmarks():
        run_build(benchmark.name, sources, out / benchmark.name, assignments=benchmark.demo_params,
                  legacy_json=benchmark.demo.legacy_json, use_cache=False)
    run_build("cosim-q", sources, out / "cosim-q-nli", use_cache=False,
              assignments=[a for a in benchmarks_demo_params("cosim-q") if not a.startswith("nli_model=")]
              + [f"nli_model={nli_model}"])
    (out / "kernels.json").write_text(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                                                  "threads": torch.get_num_threads()}))


def benchmarks_demo_params(name: str) -> list[str]:
    from builders.registry import get_benchmark

    return list(get_benchmark(name).demo_params)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
