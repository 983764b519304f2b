"""`vlbench seal`: a built benchmark cut into a public folder with no answer in it and a sealed answer file, bound
by a salted SHA-256 commitment that the public card and manifest carry (the format: evaluator/sealed.py)."""

from __future__ import annotations

import datetime
import secrets
from pathlib import Path

import pyarrow.parquet as pq

from core.errors import ParamsError
from evaluator import sealed as seal_engine

CARD_TEMPLATE = "sealed.md"
OPEN_CONFIG = "open"  # the card's config of the open splits (their files lie beside the sealed ones)


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def _check_answers_out(answers: Path, public: Path, folder: Path, overwrite: bool) -> None:
    """The answer file is never written into the public folder or the build, never through a link, and never over
    a file (a sealed answer file is the only copy of a published commitment's answers) unless --overwrite."""
    for other, option in ((public, "--public"), (folder, "BUILD")):
        if _inside(answers, other) or _inside(other, answers):
            raise ParamsError(f"--answers {answers}: lies inside (or holds) the {option} folder {other}; the sealed "
                              "answers are kept apart from every folder that is published")
    if answers.is_symlink() or answers.is_dir():
        raise ParamsError(f"--answers {answers}: is a link or a folder; name a new file")
    if answers.exists() and not overwrite:
        raise ParamsError(f"--answers {answers}: exists (it may hold the answers of a published commitment); name a "
                          "new file, or pass --overwrite")


def _card(task, builder, record: dict, reveal_on: datetime.date | None, splits: dict, features: dict) -> str:
    """The public half's card: data_cards/sealed.md filled with values from code, the validated split names and the
    commitment; its YAML header (configs, features, splits) made by the cards' one writer."""
    from importlib import resources

    from core.markdown import table
    from pipelines.cards import render_card

    sealing = task.sealing
    code = lambda names: ", ".join(f"`{n}`" for n in names) or "none"  # noqa: E731 (names from code)
    sealed_columns = sorted({c for info in record["splits"].values() for c in info["sealed_columns"]})
    others = record["other_configs"]
    fields = {
        "title": task.name, "benchmark": task.name, "description": builder.description, "source": sealing.source,
        "splits": table(["Config", "Split", "Rows"],
                        [[task.config, s, i["rows"]] for s, i in record["splits"].items()]),
        "public_columns": code(record["public_columns"]), "sealed_columns": code(sealed_columns),
        "other_configs": (f" The build's other configs ({code(sorted(others))}) are sealed whole." if others else "")
        + (f"\n\nOpen splits, whole, answers included (to train on; the card's `{OPEN_CONFIG}` config): "
           f"{code(record['open_splits'])}." if record["open_splits"] else ""),
        "opaque": (" This benchmark's ids and row order give answers away, so rows here are named `s` + the first 20 "
                   "hex digits of HMAC-SHA-256(salt, id) and ordered by those names; the answer file maps them back."
                   if sealing.opaque_ids else ""),
        "commitment": record["commitment"], "algorithm": seal_engine.ALGORITHM,
        "reveal": (f"The hosts will publish the answer file on {reveal_on.isoformat()} (`vlbench serve reveal`)."
                   if reveal_on else "The hosts will publish the answer file when the challenge ends (`vlbench serve "
                                     "reveal`)."),
    }
    template = resources.files("data_cards").joinpath(CARD_TEMPLATE).read_text()
    return render_card(template, fields, features.__getitem__, splits, task.config)


def seal(data: str, public: Path, answers: Path, splits: list[str] | None = None,
         reveal_on: datetime.date | None = None, overwrite: bool = False, open_splits: list[str] = ()) -> dict:
    """Seal the splits (default: the task's evaluation split) of the build DATA: write the answer file, then the
    public folder (atomically), after checking the build as `verify` does and that the two halves give it back row
    for row. `open_splits` (a train split, for the baselines fitted on it) are copied into the public folder whole,
    answers included. Returns the seal's record (as the public manifest holds it)."""
    from builders.registry import get_builder
    from core.data import load_table, pick_split, resolve_data
    from core.manifest import MANIFEST, describe_outputs, read_manifest, write_manifest
    from core.outdir import atomic_folder, check_out, write_atomically
    from evaluator.splits import checked_table
    from evaluator.tasks import get_task
    from pipelines.verify import verify

    folder = resolve_data(data)
    if not (folder / MANIFEST).is_file():
        raise ParamsError(f"BUILD {data}: no {MANIFEST} (not a folder written by `vlbench build`)")
    manifest = read_manifest(folder)
    bench = manifest.get("benchmark")
    if seal_engine.sealed_record(folder) is not None:
        raise ParamsError(f"BUILD {data}: is already the public half of a sealed build")
    if not isinstance(bench, str):
        raise ParamsError(f"BUILD {data}: its manifest names no benchmark")
    task, builder = get_task(bench), get_builder(bench)  # a benchmark without a task: one line saying why
    if task.sealing is None:
        raise ParamsError(f"BUILD {data}: {bench} declares no sealing (which columns a participant sees)")
    check_out(public, {"BUILD": [folder]}, overwrite, writer="`vlbench seal`")
    _check_answers_out(Path(answers), Path(public), folder, overwrite)
    problems = verify(folder).problems
    if problems:
        raise ParamsError(f"BUILD {data}: does not verify ({problems[0]}); rebuild it before sealing")
    chosen = sorted({pick_split(folder, task.config, s, task.default_split) for s in (splits or [None])})
    opened = sorted({pick_split(folder, task.config, s, task.default_split) for s in open_splits})
    if set(opened) & set(chosen):
        raise ParamsError(f"--open {sorted(set(opened) & set(chosen))[0]}: a split is either sealed or open")
    known = set(builder.table_features(task.config)) | set(task.sealing.public)
    salt = secrets.token_bytes(32)
    public_tables, sealed_tables, built, info = {}, {}, {}, {}
    for split in chosen:
        where = f"{folder / task.config}/{split}"
        table = checked_table(task, folder, split, load_table(folder, task.config, split))
        unknown = [c for c in table.column_names if c not in known]
        if unknown:
            raise ParamsError(f"{where}: column {unknown[0]} is not one a {bench} build writes; seal a build vlbench "
                              "wrote")
        public_tables[split], sealed_tables[split] = seal_engine.split_table(task, table, salt, where)
        built[split] = table
        info[split] = {"rows": table.num_rows, "columns": table.column_names,
                       "sealed_columns": [c for c in table.column_names if c not in public_tables[split].column_names]}
    others = {c: {s: load_table(folder, c, s) for s in chosen} for c in builder.configs if c != task.config}
    record = {"format": seal_engine.FORMAT, "benchmark": bench, "config": task.config, "splits": info,
              "opaque_ids": task.sealing.opaque_ids,
              "other_configs": {c: {s: {"rows": t.num_rows} for s, t in by.items()} for c, by in others.items()}}
    data_bytes, commitment = seal_engine.answer_file(record, sealed_tables, others, salt)
    back = seal_engine.read_answers_bytes(data_bytes, Path(answers))
    for split in chosen:  # what verify checks, before anything is written
        again = seal_engine.joined(task, public_tables[split], back.tables[split], info[split]["columns"], False)
        if not again.equals(built[split]):
            raise ParamsError(f"{folder / task.config}/{split}: the two halves do not give the build back row for row "
                              "(a vlbench bug: nothing was written)")
    public_record = {"format": seal_engine.FORMAT, "commitment": commitment, "algorithm": seal_engine.ALGORITHM,
                     "config": task.config, "public_columns": list(task.sealing.public),
                     "splits": {s: {"rows": i["rows"], "sealed_columns": i["sealed_columns"]} for s, i in info.items()},
                     "other_configs": sorted(others), "opaque_ids": task.sealing.opaque_ids,
                     "open_splits": opened, "reveal_on": reveal_on.isoformat() if reveal_on else None}
    write_atomically(Path(answers), data_bytes)  # first: a public commitment never exists without its answers
    with atomic_folder(public) as staging:
        (staging / task.config).mkdir()
        rows, split_info = {}, {task.config: {}}
        open_tables = {s: checked_table(task, folder, s, load_table(folder, task.config, s)) for s in opened}
        for config, split, table in [*((OPEN_CONFIG, s, t) for s, t in open_tables.items()),
                                     *((task.config, s, t) for s, t in public_tables.items())]:
            rel = f"{task.config}/{split}-00000-of-00001.parquet"
            pq.write_table(table, staging / rel)
            rows[rel] = table.num_rows
            meta = pq.read_metadata(staging / rel)
            size = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
            split_info.setdefault(config, {})[split] = {"num_examples": table.num_rows, "num_bytes": size,
                                                        "pattern": f"{task.config}/{split}-*"}
        first = chosen[0]
        features = {task.config: seal_engine.public_features(built[first], public_tables[first].column_names)}
        if opened:
            features[OPEN_CONFIG] = seal_engine.public_features(open_tables[opened[0]],
                                                                open_tables[opened[0]].column_names)
        (staging / "README.md").write_text(_card(task, builder, public_record, reveal_on, split_info, features))
        write_manifest(staging, {
            "benchmark": bench, "code_version": manifest.get("code_version"), "params": manifest.get("params"),
            "versions": manifest.get("versions"), "splits": sorted([*chosen, *opened]), "inputs": [],
            "command": "vlbench seal BUILD --public OUT --answers FILE", "sealed": public_record,
            "outputs": describe_outputs(staging, rows)})
    return public_record
