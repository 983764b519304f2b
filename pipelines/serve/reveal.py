"""`vlbench serve reveal CONFIG --out DIR`: the end of a challenge. DIR receives, per phase with sealed answers, the
answer file (salt included, checked against the commitment its public half states), every scored submission's
file and `reveal.json` (per phase: the commitment, the answer file's SHA-256, and per submission its team, file,
SHA-256 and the metrics the service recorded; where the phase had a private part, its share, the rule that drew it
and each submission's private scores), so that anyone can check the commitment (`vlbench verify PUBLIC
--answers FILE`) and rescore every submission with `vlbench evaluate`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from core.errors import ParamsError
from pipelines.serve.config import Config
from pipelines.serve.store import now_utc
from pipelines.serve.stored import StoredFileChanged, copy_checked, stored_path

PRIVATE_RULE = ("a cluster of rows (the task's bootstrap clusters of the public half, numbered as its `clusters` "
                "numbers them) is private when the first 8 bytes of HMAC-SHA-256 keyed by the answer file's salt over "
                "'vlbench-private-part:<phase>:<number>', read big-endian, are below share * 2^64 "
                "(pipelines/serve/views.py)")


def reveal(config: Config, out: Path, before_end: bool = False, overwrite: bool = False) -> dict:
    """Write DIR (atomically); returns its record. A phase still open is refused unless `before_end`."""
    from core.outdir import atomic_folder, check_out
    from evaluator.sealed import check_pair, read_answers, sealed_record
    from evaluator.tasks import get_task

    now = now_utc()
    phases = [p for p in config.phases if p.answers is not None]
    if not phases:
        raise ParamsError(f"{config.path}: no phase has sealed answers to reveal")
    still_open = [p for p in phases if p.ends is None or now < p.ends]
    if still_open and not before_end:
        when = "unset" if still_open[0].ends is None else still_open[0].ends.isoformat()
        raise ParamsError(f"phase {still_open[0].name} has not ended (its `ends`: {when}); reveal after the end, or "
                          "pass --before-end")
    check_out(out, {"the storage folder": [config.storage]}, overwrite,
              owned=lambda path: (path / "reveal.json").is_file(), writer="`vlbench serve reveal`")
    store = config.store()
    record = {"challenge": config.challenge, "revealed": now.isoformat(), "phases": {}}
    with atomic_folder(out) as staging:
        for phase in phases:
            answers = read_answers(phase.answers)
            check_pair(phase.data, sealed_record(phase.data), answers)
            folder = staging / phase.name
            (folder / "submissions").mkdir(parents=True)
            shutil.copyfile(phase.answers, folder / "answers.zip")
            listed = []
            for row in reversed(store.submissions(phase=phase.name)):
                if row["status"] != "scored":
                    continue
                source = stored_path(config.storage, row["sha256"], row["filename"])
                name = f"{row['id']}{source.suffix}"
                try:  # only the bytes that were scored: never a link's target, never changed bytes
                    copy_checked(source, row["sha256"], folder / "submissions" / name)
                except StoredFileChanged as exc:
                    raise ParamsError(f"phase {phase.name}: submission {row['id']}: {exc}; nothing was revealed "
                                      "(restore the file from a backup, or find what changed the storage)") from None
                listed.append({"id": row["id"], "team": row["team_name"], "file": f"submissions/{name}",
                               "sha256": row["sha256"], "submitted": row["submitted"],
                               "metrics": json.loads(row["metrics"]),
                               **({"private": json.loads(row["private_view"])} if row["private_view"] else {})})
            record["phases"][phase.name] = {
                "benchmark": phase.benchmark, "split": phase.split or get_task(phase.benchmark).default_split,
                "commitment": answers.commitment,
                "answers": "answers.zip", "submissions": listed,
                **({"private_part": {"share": phase.private, "rule": PRIVATE_RULE}} if phase.private else {})}
        (staging / "reveal.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return record
