"""Sealed builds (`vlbench seal`, evaluator/sealed.py): for every benchmark with a task, the public half holds no
column a participant does not see (nor names one in its schema), `verify` checks it and, with the answer file, the
commitment and the invariants of the two halves joined; the halves give the build back row for row; and scores
from public + sealed equal `vlbench evaluate` on the build itself, intervals included. Nothing here names a
benchmark: the columns come from each Task's `sealing` declaration."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import assert_one_error_line, public_names

from builders.registry import get_benchmark
from evaluator.tasks import get_task, task_names


@pytest.fixture(scope="module")
def sealable(built, sample_sources, tmp_path_factory):
    """sealable(bench): a build of the benchmark that can be sealed (its Sealing's `build_param` where it names
    one: VisDial's one round per dialog)."""
    from pipelines.build import run_build

    root, done = tmp_path_factory.mktemp("sealable"), {}

    def build(bench: str) -> Path:
        task = get_task(bench)
        if task.sealing is None or task.sealing.build_param is None:
            return built(bench)
        if bench not in done:
            entry = get_benchmark(bench)
            run_build(bench, sample_sources, root / bench, splits=[task.default_split],
                      assignments=[*entry.demo_params, task.sealing.build_param])
            done[bench] = root / bench
        return done[bench]

    return build


def _predict(cli, bench: str, data: Path, sources: Path, out: Path) -> Path:
    entry = get_benchmark(bench)
    train = () if entry.demo.train_file is None else ("--train-file", sources / entry.demo.train_file)
    code, _, err = cli("predict", bench, "--data", data, "--model", entry.demo.models[0], "--out", out, *train)
    assert code == 0, err
    return out


def _metrics(cli, bench: str, data: Path, predictions: Path, report: Path, *extra) -> dict:
    code, _, err = cli("evaluate", bench, "--data", data, "--predictions", predictions, "--report", report,
                       "--bootstrap", "200", *extra)
    assert code == 0, err
    return json.loads((report / "metrics.json").read_text())


@pytest.mark.parametrize("bench", task_names())
def test_a_sealed_build_holds_no_answer_verifies_and_scores_as_the_build(bench, sealable, sample_sources, cli,
                                                                          tmp_path):
    task = get_task(bench)
    build = sealable(bench)
    public, answers = tmp_path / "public", tmp_path / "keep" / "answers.zip"
    code, out, err = cli("seal", build, "--public", public, "--answers", answers, "--reveal-on", "2027-03-31")
    if task.sealing is None:  # a benchmark that declares no public columns cannot be sealed, and says so
        assert_one_error_line(code, err, (bench, "declares no sealing"))
        return
    assert code == 0, err
    manifest = json.loads((public / "manifest.json").read_text())
    record = manifest["sealed"]
    split = task.default_split
    assert record["splits"][split]["rows"] > 0 and f"commitment: {record['commitment']}" in out

    # The public half: its tables, card and manifest only; its table the declared columns, and its schema's
    # Hugging Face features name no other.
    assert sorted(p.relative_to(public).as_posix() for p in public.rglob("*") if p.is_file()) == sorted(
        ["README.md", "manifest.json", f"{task.config}/{split}-00000-of-00001.parquet"])
    table = pq.read_table(public / task.config / f"{split}-00000-of-00001.parquet")
    built = pq.read_table(build / task.config / f"{split}-00000-of-00001.parquet")
    assert set(table.column_names) <= set(task.sealing.public) and table.num_rows == built.num_rows
    assert set(record["splits"][split]["sealed_columns"]) == set(built.column_names) - set(table.column_names) != set()
    assert set(json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]) == set(table.column_names)
    card = (public / "README.md").read_text()
    assert record["commitment"] in card and "2027-03-31" in card
    assert not any(f"`{c}`" in card.split("Sealed (in the answer file")[0] for c in
                   record["splits"][split]["sealed_columns"])

    # verify: the public half alone; with the answers and the build, row for row
    code, out, err = cli("verify", public)
    assert code == 0 and "columns a participant sees" in out, err
    code, out, err = cli("verify", public, "--answers", answers, "--against", build)
    assert code == 0 and "row for row" in out and f"invariants of {bench}" in out, err

    # scores: a prediction file made on the build, scored on public + sealed and on the build (ids named as the
    # public half names them where the benchmark's ids give answers away)
    predictions = _predict(cli, bench, build, sample_sources, tmp_path / "p.json")
    submitted = predictions
    if task.sealing.opaque_ids:
        names = public_names(answers, split, task.id_field)
        entries = json.loads(predictions.read_text())
        submitted = tmp_path / "submitted.json"
        submitted.write_text(json.dumps([{**e, task.id_field: names[e[task.id_field]]} for e in entries]))
        assert set(names) == {e[task.id_field] for e in entries} and set(names) != set(names.values())
    on_build = _metrics(cli, bench, build, predictions, tmp_path / "on-build")
    on_sealed = _metrics(cli, bench, public, submitted, tmp_path / "on-sealed", "--answers", answers)
    on_build.pop("predictions"), on_sealed.pop("predictions")
    on_build.pop("prediction_record", None), on_sealed.pop("prediction_record", None)
    # the prior-following rate's prior is fitted on a train split: the public half sealed here publishes none
    prior_on_build, prior_on_sealed = on_build.pop("prior_following", None), on_sealed.pop("prior_following", None)
    if task.prior_rule is not None and "rate" in prior_on_build:  # fitted on the build's train split
        assert "no default/train tables" in prior_on_sealed["not_measured"]
    elif task.prior_rule is not None:  # fitted outside the build (gqa-ood: --train-file), passed to neither
        assert prior_on_sealed == prior_on_build and "--train-file" in prior_on_build["not_measured"]
    assert on_sealed == on_build and "intervals" in on_build

    # without the answers, nothing that needs them runs
    code, _, err = cli("evaluate", bench, "--data", public, "--predictions", submitted)
    assert_one_error_line(code, err, ("sealed build", "--answers"))


def test_the_commitment_is_what_coreutils_compute_and_binds_every_member(sealable, cli, tmp_path):
    """The card's recipe, run with `sha256sum` and `sort` over the members Python's zipfile extracts: the same
    commitment. A changed answer (one label) or another seal's file is refused in one line."""
    bench = "socialiq"  # a benchmark with another config sealed whole and opaque ids: every kind of member
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", sealable(bench), "--public", public, "--answers", answers)[0] == 0
    record = json.loads((public / "manifest.json").read_text())["sealed"]
    members = tmp_path / "members"
    with zipfile.ZipFile(answers) as archive:
        archive.extractall(members)
        names = sorted(n for n in archive.namelist() if n != "salt")
    script = f"(cat salt; sha256sum {' '.join(names)} | LC_ALL=C sort -k2) | sha256sum"
    found = subprocess.run(["bash", "-c", script], cwd=members, capture_output=True, text=True, check=True)
    assert found.stdout.split()[0] == record["commitment"]

    # another seal of the same build: another salt, so another commitment and other public names
    other_public, other = tmp_path / "other-public", tmp_path / "other.zip"
    assert cli("seal", sealable(bench), "--public", other_public, "--answers", other)[0] == 0
    assert json.loads((other_public / "manifest.json").read_text())["sealed"]["commitment"] != record["commitment"]
    code, _, err = cli("verify", public, "--answers", other)
    assert_one_error_line(code, err, ("other.zip", "commitment"))

    # one label flipped inside the file (a member rewritten, the archive otherwise as written)
    import io

    import pyarrow as pa

    with zipfile.ZipFile(answers) as archive:
        content = {n: archive.read(n) for n in archive.namelist()}
    split = get_task(bench).default_split
    table = pq.read_table(pa.BufferReader(content[f"{split}.parquet"]))
    labels = table.column("label").to_pylist()
    labels[0] = 1 - labels[0]
    sink = io.BytesIO()
    pq.write_table(table.set_column(table.column_names.index("label"), "label", pa.array(labels, pa.int8())), sink)
    content[f"{split}.parquet"] = sink.getvalue()
    changed = tmp_path / "changed.zip"
    with zipfile.ZipFile(changed, "w", zipfile.ZIP_STORED) as archive:
        for name, data in content.items():
            archive.writestr(name, data)
    code, _, err = cli("evaluate", bench, "--data", public, "--answers", changed, "--predictions", changed)
    assert_one_error_line(code, err, ("changed.zip", "commitment"))


def test_verify_finds_an_answer_put_back_into_the_public_half(sealable, cli, tmp_path):
    """A public half whose table regained a sealed column (its manifest updated to match, as a careless
    re-publication would) fails `verify` naming the column; so does a figure copied in."""
    from core.manifest import describe_outputs, read_manifest, write_manifest

    bench = "vqa-v2"
    task = get_task(bench)
    build = sealable(bench)
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", build, "--public", public, "--answers", answers)[0] == 0
    rel = f"{task.config}/{task.default_split}-00000-of-00001.parquet"
    table = pq.read_table(public / rel)
    whole = pq.read_table(build / rel)
    pq.write_table(table.append_column("answers", whole.column("answers")), public / rel)
    shutil.copytree(build / "figures", public / "figures")
    manifest = read_manifest(public)
    manifest["outputs"] = describe_outputs(public, {})
    write_manifest(public, manifest)
    code, _, err = cli("verify", public)
    assert code == 2 and "figures/answer_types.png: the public half of a sealed build holds only" in err, err
    shutil.rmtree(public / "figures")
    manifest["outputs"] = describe_outputs(public, {})
    write_manifest(public, manifest)
    code, _, err = cli("verify", public)
    assert code == 2 and "column answers is not one a participant sees" in err, err


def test_seal_refusals_are_one_line_and_write_nothing(sealable, built, cli, tmp_path):
    """A split a sealed form cannot take (VisDial with every round: a later round's history holds the answers), a
    benchmark with no task, an answer file inside the public folder, over an existing file, an open split that
    is also sealed: one line each, nothing written. A model that reads a sealed column is refused before it runs,
    a model that reads only public columns predicts on the public half, and an open split keeps its answers."""
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    code, _, err = cli("seal", built("visdial"), "--public", public, "--answers", answers)
    assert_one_error_line(code, err, ("one row per image_id", "--param rounds=dense"))
    code, _, err = cli("seal", built("vl-bias"), "--public", public, "--answers", answers)
    assert_one_error_line(code, err, ("vl-bias", "counterbias"))
    code, _, err = cli("seal", built("vcr"), "--public", public, "--answers", public / "answers.zip")
    assert_one_error_line(code, err, ("lies inside", "--public"))
    answers.write_text("mine")
    code, _, err = cli("seal", built("vcr"), "--public", public, "--answers", answers)
    assert_one_error_line(code, err, ("exists", "--overwrite"))
    assert answers.read_text() == "mine" and not public.exists()
    code, _, err = cli("seal", built("vcr"), "--public", public, "--answers", tmp_path / "a.zip", "--split", "val",
                       "--open", "val")
    assert_one_error_line(code, err, ("--open val", "sealed or open"))
    assert not public.exists() and not (tmp_path / "a.zip").exists()

    code, _, err = cli("seal", built("vcr"), "--public", public, "--answers", tmp_path / "a.zip", "--open", "train")
    assert code == 0, err
    code, _, err = cli("predict", "vcr", "--data", public, "--model", "baseline:overlap", "--out", tmp_path / "p.json")
    assert_one_error_line(code, err, ("baseline:overlap", "answer_label", "holds apart"))
    code, _, err = cli("predict", "vcr", "--data", public, "--model", "baseline:random", "--out", tmp_path / "p.json")
    assert code == 0, err
    code, _, err = cli("predict", "vcr", "--data", public, "--split", "train", "--model", "baseline:overlap", "--out",
                       tmp_path / "train.json")
    assert code == 0, err  # the open split is read whole: a model may read its answers
    code, _, err = cli("evaluate", "vcr", "--data", public, "--split", "train", "--predictions",
                       tmp_path / "train.json")
    assert code == 0, err  # and it is scored without an answer file
    code, _, err = cli("verify", public)
    assert code == 0, err


def test_an_answer_file_that_is_not_one_is_one_line(sealable, cli, tmp_path):
    """The answer file is read as untrusted input: not a ZIP, a compressed member (nothing is inflated), a member
    its record does not list, a missing record: one line each, naming the file."""
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", sealable("vqa-v2"), "--public", public, "--answers", answers)[0] == 0
    with zipfile.ZipFile(answers) as archive:
        content = {n: archive.read(n) for n in archive.namelist()}

    def written(name: str, members: dict, compression=zipfile.ZIP_STORED) -> Path:
        path = tmp_path / name
        with zipfile.ZipFile(path, "w", compression) as archive:
            for member, data in members.items():
                archive.writestr(member, data)
        return path

    text = tmp_path / "text.zip"
    text.write_text("not a zip")
    for path, needles in (
            (text, ("text.zip", "not a sealed answer file")),
            (written("deflated.zip", content, zipfile.ZIP_DEFLATED), ("deflated.zip", "compressed")),
            (written("extra.zip", {**content, "x/../../evil": b"1"}), ("extra.zip", "does not list")),
            (written("norecord.zip", {k: v for k, v in content.items() if k != "seal.json"}),
             ("norecord.zip", "seal.json")),
            (tmp_path / "missing.zip", ("missing.zip", "no such file"))):
        code, _, err = cli("verify", public, "--answers", path)
        assert_one_error_line(code, err, needles)


def _overlapping(content: dict, path: Path) -> Path:
    """A ZIP whose central directory names its largest stored member's bytes 50 more times (each new entry's local
    header at the same offset): a small file whose members add up to far more than it holds."""
    import struct

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for member, data in content.items():
            archive.writestr(member, data)
    raw = path.read_bytes()
    end = raw.rindex(b"PK\x05\x06")  # the end of central directory record
    count, size, offset = struct.unpack("<HII", raw[end + 10:end + 20])
    directory = raw[offset:offset + size]
    entries, at = [], 0
    while at < len(directory):  # the central directory's entries: 46 bytes, then the name, extra and comment
        name_length, extra_length, comment_length = struct.unpack("<HHH", directory[at + 28:at + 34])
        entries.append(directory[at:at + 46 + name_length + extra_length + comment_length])
        at += len(entries[-1])
    largest = max(entries, key=lambda e: struct.unpack("<I", e[24:28])[0])
    name_length = struct.unpack("<H", largest[28:30])[0]
    copies = b"".join(largest[:46] + str(k).zfill(name_length).encode() + largest[46 + name_length:]
                      for k in range(50))  # 50 more names for its bytes: still fewer members than MAX_MEMBERS
    tail = raw[end:end + 8] + struct.pack("<HHII", count + 50, count + 50, size + len(copies), offset) + \
        raw[end + 20:]
    path.write_bytes(raw[:offset] + directory + copies + tail)
    return path


def test_another_benchmark_s_task_on_a_sealed_half_is_one_line(sealable, cli, tmp_path):
    """`evaluate vcr` on a sealed VQA v2 half with its own answers was a KeyError traceback (VCR's id column)."""
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", sealable("vqa-v2"), "--public", public, "--answers", answers)[0] == 0
    predictions = tmp_path / "p.json"
    predictions.write_text("[]")
    code, _, err = cli("evaluate", "vcr", "--data", public, "--answers", answers, "--predictions", predictions)
    assert_one_error_line(code, err, ["is the public half of a sealed vqa-v2 build, not vcr's"])


def test_the_halves_of_a_split_of_no_rows_join_into_no_rows(sealable, cli, tmp_path):
    """Joining an empty split's halves was a StopIteration traceback (pyarrow's `all` of no rows is null, read as a
    mismatch whose row was then looked for): no rows, every column."""
    import io

    from evaluator.sealed import joined

    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", sealable("vqa-v2"), "--public", public, "--answers", answers)[0] == 0
    shown = pq.read_table(next((public / "default").glob("validation-*.parquet")))
    hidden = pq.read_table(io.BytesIO(zipfile.ZipFile(answers).read("validation.parquet")))
    table = joined(get_task("vqa-v2"), shown.slice(0, 0), hidden.slice(0, 0), shown.column_names, True)
    assert table.num_rows == 0 and table.column_names == shown.column_names


@pytest.mark.slow
def test_a_refused_answer_file_never_aborts_the_process_at_exit(sealable, cli, tmp_path):
    """Reading a sealed answer file's tables left Arrow pool tasks holding its bytes (a Python buffer) past the
    read; a process that ended soon after (a refusal) aborted in about 1 run of 8 (exit 134, "terminate called
    without an active exception"; measured: 5 of 40 runs of this script on the old code, so 32 clean runs by
    chance would be 1 in 70). Now the tables are read in the reading thread: no run aborts."""
    public, answers, other = tmp_path / "public", tmp_path / "answers.zip", tmp_path / "other.zip"
    assert cli("seal", sealable("vqa-v2"), "--public", public, "--answers", answers)[0] == 0
    assert cli("seal", sealable("vqa-v2"), "--public", tmp_path / "public2", "--answers", other)[0] == 0
    script = ("import sys\nfrom pathlib import Path\nfrom core.errors import ParamsError\n"
              "from evaluator.sealed import check_pair, read_answers, sealed_record\n"
              f"public = Path({str(public)!r})\n"
              f"try:\n    check_pair(public, sealed_record(public), read_answers(Path({str(other)!r})))\n"
              "except ParamsError:\n    sys.exit(3)\nsys.exit(4)\n")
    codes = [subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                            capture_output=True, timeout=120).returncode for _ in range(32)]
    assert codes.count(134) == 0 and set(codes) == {3}, codes


def test_an_answer_file_that_is_a_trap_is_refused_unread(sealable, cli, tmp_path):
    """Before: a FIFO hung the command, /dev/zero was a MemoryError, a folder or a device was "no such file", a
    deeply nested seal.json a RecursionError, and a ZIP of overlapping stored members made a small answer file read
    many times its size (52 MB read as 3.3 GB). Now each is one line saying what it is, read no further."""
    import os

    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", sealable("vqa-v2"), "--public", public, "--answers", answers)[0] == 0
    with zipfile.ZipFile(answers) as archive:
        content = {n: archive.read(n) for n in archive.namelist()}
    fifo = tmp_path / "answers.fifo"
    os.mkfifo(fifo)
    nested = tmp_path / "nested.zip"
    with zipfile.ZipFile(nested, "w", zipfile.ZIP_STORED) as archive:
        for member, data in {**content, "seal.json": b"[" * 100_000 + b"]" * 100_000}.items():
            archive.writestr(member, data)
    for path, needles in ((fifo, ("answers.fifo", "is a FIFO")), (tmp_path, ("is a folder",)),
                          (Path("/dev/zero"), ("/dev/zero", "is a character device")),
                          (nested, ("nested.zip", "seal.json is not readable")),
                          (_overlapping(content, tmp_path / "overlap.zip"), ("overlap.zip", "members overlap"))):
        code, _, err = cli("verify", public, "--answers", path)
        assert_one_error_line(code, err, needles)


@pytest.mark.slow
def test_a_vlm_on_vcr_s_public_half_scores_as_on_the_build(sealable, cli, tmp_path):
    """VCR's public half has no labels, so a generative VLM is asked the rationales given each answer (the VCR
    leaderboard's form) and the scorer reads the list of the correct answer: the same log-likelihoods as the build's
    prompts given the correct answer, so the same scores, intervals included (the tiny LLaVA, scored in float32)."""
    from helpers import write_row_images

    from pipelines.tiny_models import write_tiny_llava

    model = write_tiny_llava(tmp_path / "tiny-llava")
    build = sealable("vcr")
    images = write_row_images("vcr", build, tmp_path / "images")
    public, answers = tmp_path / "public", tmp_path / "answers.zip"
    assert cli("seal", build, "--public", public, "--answers", answers)[0] == 0
    runs = {}
    for name, data in (("build", build), ("public", public)):
        code, _, err = cli("predict", "vcr", "--data", data, "--model", f"hf:{model}", "--images", images, "--out",
                           tmp_path / f"{name}.json")
        assert code == 0, err
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert all(len(e["rationale_scores"]) == 4 and len(e["rationale_scores"][0]) == 4 for e in runs["public"])
    labels = {r["annot_id"]: r["answer_label"] for r in pq.read_table(build / "default" / "val-00000-of-00001.parquet")
              .select(["annot_id", "answer_label"]).to_pylist()}
    for given, each in zip(runs["build"], runs["public"]):
        assert each["answer_scores"] == pytest.approx(given["answer_scores"], abs=1e-4)
        assert each["rationale_scores"][labels[given["annot_id"]]] == pytest.approx(given["rationale_scores"],
                                                                                    abs=1e-4)
    on_build = _metrics(cli, "vcr", build, tmp_path / "build.json", tmp_path / "on-build")
    on_sealed = _metrics(cli, "vcr", public, tmp_path / "public.json", tmp_path / "on-sealed", "--answers", answers)
    keys = ("q_a", "qa_r", "q_ar", "intervals", "items", "coverage")
    assert {k: on_sealed[k] for k in keys} == {k: on_build[k] for k in keys}
