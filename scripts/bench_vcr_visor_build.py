"""Benchmark: VCR-Visor pair mining on a VCR-val-size input (26,534 questions), CPU, packaged MiniLM.

The input (`generate_vcr_matched`) has VCR val's shape: its mix of causal and temporal questions, short
questions that recur across movies, correct responses that are texts of their own, and distractors that
are other records' correct responses re-tagged (adversarial matching).

Reports what the models were asked for versus what they computed (each distinct string is
embedded once; each distinct NLI pair is classified once), the candidate pairs against the NLI
pairs scored, the float64 re-checks, the stages' seconds and the NLI estimate against the pass, and
three measures from one run with the caches off: the wall time of the build (target: under 10 minutes
on 2 cores), its peak RSS (under 4 GB), both printed against a bare `json.loads` of the same
file in a fresh process in the same run, and the share of the build's wall time spent outside model
forward passes (at most 10%).

The NLI model is a tiny random RobertaForSequenceClassification built from a config (nothing is
downloaded), its entailment logit shifted so that it entails --entail-rate of the directed pairs of questions
it is calibrated on (default 0.9: the recipe's RoBERTa-MNLI labels most paraphrased questions, the pairs of
Sentence-BERT cosine above 0.9, entailment), so that query pairs pass both ways and the response-pair check
runs, as it does in a real regeneration. The stand-in entails response pairs at about the same rate, where a
real MNLI model entails fewer (two different answers), so a real run asks more response pairs backward: the
bench also prints that upper bound, every response pair of the passed query pairs asked both ways, timed at the
run's own seconds per NLI pair. --entail-rate 0 is the old stand-in that passes no query pair. Pass
--nli-model to use a real model, e.g. FacebookAI/roberta-large-mnli.

    python scripts/bench_vcr_visor_build.py [--items 26534] [--entail-rate 0.9] [--response-entail-rate 0.5]
                                            [--nli-model PATH_OR_ID | none]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import offline_build, offline_build_child, verdict, write_entailing_nli, write_tiny_nli

ROOT = Path(__file__).resolve().parents[1]
TARGET_OUTSIDE_SHARE = 0.10
TARGET_WALL_S = 600.0
TARGET_RSS_MB = 4096.0
# the baseline: a fresh Python parses every line of the file with json.loads (the clock around the parse only)
LOAD_BASELINE = """import json, resource, sys, time
start = time.perf_counter()
with open(sys.argv[1], "rb") as fh:
    records = [json.loads(line) for line in fh]
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=26_534)
    parser.add_argument("--nli-model", default=None)
    parser.add_argument("--entail-rate", type=float, default=0.9)
    parser.add_argument("--response-entail-rate", type=float, default=0.5)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        offline_build_child(*args.child)
        return 0
    sys.path.insert(0, str(ROOT))
    import msgspec

    from builders.sources.vcr_samples import generate_vcr_matched

    with tempfile.TemporaryDirectory(prefix="vlbench-bench-vcr-") as tmp:
        source = Path(tmp) / "src"
        source.mkdir()
        records = generate_vcr_matched(args.items, 11)
        (source / "val.jsonl").write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
        calibrated, pairs_of_questions = {}, []
        nli = args.nli_model or str(stand_in(source / "val.jsonl", Path(tmp) / "tiny-nli", args.entail_rate,
                                             args.response_entail_rate, calibrated, pairs_of_questions))
        baseline = load_baseline(source / "val.jsonl")
        r = offline_build(__file__, "vcr-visor", source, Path(tmp) / "out", nli)
    sbert, nli_stats = r["models"]["sbert"], r["models"].get("nli", {})
    forward = sbert["forward_seconds"] + nli_stats.get("forward_seconds", 0.0)
    outside = (r["wall"] - forward) / r["wall"]
    candidates = sum(m["candidates"] for m in r["statistics"]["mining"].values())
    stand_in_name = "tiny random RoBERTa (offline stand-in, uncalibrated)" if not calibrated else (
        f"tiny random RoBERTa (offline stand-in, seed {calibrated['seed']}) entailing {calibrated['queries']:.0%} of "
        f"sampled question pairs and {calibrated['responses']:.0%} of sampled answer pairs")
    print(f"input: {args.items:,} VCR val questions (synthetic, native format, adversarially matched); NLI model: "
          f"{args.nli_model or stand_in_name}")
    print(f"sentence strings: {sbert['requested']:,} requested, {sbert['distinct']:,} distinct, "
          f"{sbert['computed']:,} encoded ({sbert['computed'] / max(1, sbert['requested']):.1%} of requested)")
    print(f"NLI: {candidates:,} candidate pairs -> {nli_stats.get('requested', 0):,} directed pairs asked, "
          f"{nli_stats.get('computed', 0):,} distinct pairs scored")
    mining = r["statistics"]["mining"]
    print("candidate pairs -> queries entailed both ways -> kept after the response check: " + ", ".join(
        f"{k} {m['candidates']:,} -> {m.get('queries_entailed') or 0:,} -> {m['kept']:,}" for k, m in mining.items()))
    entailed = sum(m.get("queries_entailed") or 0 for m in mining.values())
    print(f"measured: {entailed / max(1, candidates):.1%} of candidate pairs entailed both ways")
    if nli_stats.get("computed"):
        # a response pair not yet asked backward is one whose forward label was entailment: at most one more pair
        # per passed query pair, at this run's seconds per scored NLI pair
        per_pair = nli_stats["forward_seconds"] / nli_stats["computed"]
        print(f"NLI {per_pair * 1e3:.2f} ms per scored pair; upper bound with every response pair asked both ways "
              f"(a real MNLI model entails fewer response pairs than the stand-in): "
              f"{r['wall'] + entailed * per_pair:.0f} s")
    if nli_stats.get("computed") and pairs_of_questions:
        per_pair, tokens = recipe_seconds_per_pair(pairs_of_questions)
        print(f"the recipe's NLI model, FacebookAI/roberta-large-mnli (its architecture with random weights, same "
              f"cost; sampled question pairs of {tokens:.0f} tokens on average): {per_pair * 1e3:.1f} ms per pair "
              f"here, so this run's {nli_stats['computed']:,} scored pairs would take about "
              f"{per_pair * nli_stats['computed'] / 3600:.1f} h of NLI, "
              f"{per_pair * (nli_stats['computed'] + entailed) / 3600:.1f} h at the upper bound")
    print(f"float64 re-checks: {sbert['refined']:,} texts (cosines on a rounding boundary that decide or are "
          f"written); NLI estimated {nli_stats.get('estimated_seconds', 0.0):.1f} s from early batches, took "
          f"{nli_stats.get('total_seconds', 0.0):.1f} s")
    print("stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["stage_seconds"].items()))
    print(f"wall {r['wall']:.1f} s; forward passes {forward:.1f} s (SBERT {sbert['forward_seconds']:.1f}, "
          f"NLI {nli_stats.get('forward_seconds', 0.0):.1f})")
    print(f"json.loads of the same file: {baseline['seconds']:.2f} s, peak RSS {baseline['peak_rss_mb']:.0f} MB; "
          f"build: {r['wall']:.1f} s ({r['wall'] / baseline['seconds']:.0f}x), peak RSS {r['peak_rss_mb']:.0f} MB "
          f"({r['peak_rss_mb'] / baseline['peak_rss_mb']:.1f}x)")
    ok = verdict("VCR-Visor build, wall time", r["wall"], TARGET_WALL_S, " s",
                 detail=f"{args.items:,} items, {entailed / max(1, candidates):.0%} of candidate pairs entailed both "
                        f"ways; json.loads {baseline['seconds']:.2f} s in the same run")
    ok &= verdict("VCR-Visor build, peak RSS", r["peak_rss_mb"], TARGET_RSS_MB, " MB",
                  detail=f"json.loads {baseline['peak_rss_mb']:.0f} MB")
    ok &= verdict("VCR-Visor build, share of wall outside model forward passes", 100 * outside,
                  100 * TARGET_OUTSIDE_SHARE, "%", detail=f"wall {r['wall']:.0f} s")
    return 0 if ok else 1


def stand_in(source: Path, path: Path, rate: float, response_rate: float, calibrated: dict, sampled: list,
             pairs: int = 2000) -> Path:
    """The offline NLI stand-in calibrated on seeded samples of directed pairs of the file's causal questions and
    of their correct answers (the texts a pair's two checks read); `calibrated` gets its seed and the rates it
    measured, `sampled` the question pairs. At rate 0, the tiny random model as it is (uncalibrated)."""
    import random

    from builders.vcr_visor.builder import vcr_items

    if rate <= 0:
        return write_tiny_nli(path)
    items = [r for r in vcr_items(source, False)["items"].to_pylist() if r["reasoning_type"] == "causal"]
    rng = random.Random(0)
    questions, answers = ([tuple(rng.sample(texts, 2)) for _ in range(pairs)] for texts in
                          (sorted({r["query"] for r in items}), sorted({r["response"] for r in items})))
    folder, measured = write_entailing_nli(path, questions, answers, rate, response_rate)
    calibrated.update(measured)
    sampled += questions
    return folder


def recipe_seconds_per_pair(pairs: list[tuple[str, str]], batch: int = 64, batches: int = 3) -> tuple[float, float]:
    """(seconds per pair, mean tokens per pair) of a RobertaForSequenceClassification of roberta-large's shape (24
    layers of 1024, 16 heads; random weights: a forward pass costs what the trained model's does) over `pairs`, in
    batches of `batch` after one warm-up batch, tokenized by the packaged MiniLM's tokenizer (roberta's BPE gives
    question texts a similar length)."""
    import time

    import torch
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from pipelines.tiny_models import minilm_tokenizer

    torch.manual_seed(0)
    model = RobertaForSequenceClassification(RobertaConfig(
        vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096,
        max_position_embeddings=514, num_labels=3)).eval()
    tokenizer = minilm_tokenizer()
    seconds, tokens = 0.0, []
    with torch.inference_mode():
        for k in range(batches + 1):
            chunk = pairs[k * batch:(k + 1) * batch]
            encoded = tokenizer([a for a, _ in chunk], [b for _, b in chunk], padding=True, truncation=True,
                                return_tensors="pt")
            start = time.perf_counter()
            model(**encoded)
            if k:  # the first batch pays the warm-up
                seconds += time.perf_counter() - start
                tokens += encoded["attention_mask"].sum(dim=1).tolist()
    return seconds / (batches * batch), sum(tokens) / len(tokens)


def load_baseline(path: Path) -> dict:
    """Seconds and peak RSS of LOAD_BASELINE on `path`."""
    done = subprocess.run([sys.executable, "-c", LOAD_BASELINE, str(path)], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)

if __name__ == "__main__":
    sys.exit(main())
