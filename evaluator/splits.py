"""The split a command scores: the built folder and table of `--data` / `--split`, the task's scoring options
(`--option`), and the columns `--by` groups rows by (the table's own, or the shortcut labels joined in by id).
What `predict`, `evaluate`, `compare`, `perceptual` and the leaderboard share."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from core.data import load_table, pick_split, resolve_data
from core.errors import ParamsError
from core.params import apply_overrides


def open_split(task, data: str, split: str | None, answers: Path | None = None, truth: bool = True):
    """(folder, split, table) of `--data` and `--split` (the task's default split when None), the table checked
    (`checked_table`). The public half of a sealed build (evaluator/sealed.py) is read with its sealed answer file
    (`answers`, `--answers`): the built table again, row for row, its rows named as the public half names them;
    without it, only where the command needs no truth (`truth` False: `predict`), as the public columns."""
    from evaluator import sealed

    folder = resolve_data(data)
    record = sealed.sealed_record(folder)
    if record is None:
        if answers is not None:
            raise ParamsError(f"--answers {answers}: {data} is not the public half of a sealed build (`vlbench seal`); "
                              "its answers are in its tables")
        split = pick_split(folder, task.config, split, task.default_split)
        return folder, split, checked_table(task, folder, split, load_table(folder, task.config, split))
    split = pick_split(folder, task.config, split, task.default_split)
    if split in (record.get("open_splits") or []):  # copied whole by the seal: its answers are in it
        return folder, split, checked_table(task, folder, split, load_table(folder, task.config, split))
    public = load_table(folder, task.config, split)
    where = f"{folder / task.config}/{split}"
    if answers is None:
        if truth:
            raise ParamsError(f"--data {data}: is the public half of a sealed build (its answers are held apart); pass "
                              "--answers FILE, the sealed answer file `vlbench seal` wrote")
        problems = sealed.public_problems(task, record, {split: public})
        if problems:
            raise ParamsError(f"{problems[0]}; check it with `vlbench verify`")
        return folder, split, public
    found = sealed.read_answers(answers)
    sealed.check_pair(folder, record, found)
    if found.record["benchmark"] != task.name:  # the columns another benchmark's task reads are not there
        raise ParamsError(f"--data {data}: is the public half of a sealed {found.record['benchmark'][:40]} build, "
                          f"not {task.name}'s; score it as {found.record['benchmark'][:40]}")
    if split not in found.tables:
        raise ParamsError(f"--answers {answers}: holds no answers for split {split}")
    try:
        table = sealed.joined(task, public, found.tables[split], found.record["splits"][split]["columns"], True)
    except ParamsError as exc:
        raise ParamsError(f"{where} with --answers {answers}: {exc}") from None
    return folder, split, checked_table(task, folder, split, table)


def checked_table(task, folder: Path, split: str, table: pa.Table) -> pa.Table:
    """A built split as it is read back to be scored or exported (a build may come from anyone): its columns
    as every build of the benchmark writes them (`builders.base.schema_problem`), and its ids unique (a
    submission maps to rows by id). Anything else is one line naming the table."""
    from builders.base import schema_problem
    from builders.registry import get_benchmark
    from core.names import shown

    where = f"{folder / task.config}/{split}"
    entry = get_benchmark(task.name)
    problem = schema_problem(entry.load(entry.builder)(), task.config, table)
    if problem is not None:
        raise ParamsError(f"{where}: {problem}; rebuild it, or check it with `vlbench verify`")
    seen: dict = {}
    for row, row_id in enumerate(task.ids(table)):
        first = seen.setdefault(row_id, row)
        if first != row:
            raise ParamsError(f"{where}: id {shown(row_id)} is on rows {first} and {row}; a build's ids are unique "
                              "(rebuild it, or check it with `vlbench verify`)")
    return table


def task_options(task, assignments: list[str]):
    """The task's scoring options with `--option KEY=VALUE` applied (tasks without options take none)."""
    if task.options_class is None:
        if assignments:
            raise ParamsError(f"--option: {task.name} has no scoring options")
        return None
    return apply_overrides(task.options_class(), assignments, option="--option")


def with_column(task, folder: Path, split: str, table: pa.Table, column: str) -> pa.Table:
    """The table, with `column` joined in by id from another config of the folder that holds it for SPLIT (one a
    command added: `vlbench shortcuts`' labels, `vlbench stress-test`'s scores) when the task's own table does not
    have it. The configs are read from the folder, so a command that adds one is found without being named here."""
    if column in table.column_names:
        return table
    from core.data import available_splits

    others = sorted(p.name for p in folder.iterdir() if p.is_dir() and p.name != task.config)
    found = [load_table(folder, config, split) for config in others if split in available_splits(folder, config)]
    if not found:
        raise ParamsError(f"--by {column}: no such column in {folder}'s {task.config}/{split} table, and the folder "
                          f"has no other config for {split} (vlbench shortcuts and vlbench stress-test add them)")
    id_columns = task.id_field if isinstance(task.id_field, tuple) else (task.id_field,)
    labels = next((t for t in found if {column, *id_columns} <= set(t.column_names)), None)
    if labels is None:
        known = ", ".join(sorted({c for t in found if set(id_columns) <= set(t.column_names) for c in t.column_names}
                                 - {*table.column_names, *id_columns}))
        raise ParamsError(f"--by {column}: no such column (table columns, or added: {known or 'none'})")
    keys = list(zip(*(labels.column(c).to_pylist() for c in id_columns)))
    value = dict(zip(keys, labels.column(column).to_pylist()))
    ids = [i if isinstance(i, tuple) else (i,) for i in task.ids(table)]
    missing = [i for i in ids if i not in value]
    if missing:
        raise ParamsError(f"--by {column}: {len(missing):,} rows have no value (first: {missing[0]}); "
                          "the column was written for another version of the split")
    return table.append_column(column, pa.array([value[i] for i in ids]))


def column_groups(table: pa.Table, column: str):
    """(value, row mask, rows) for each value of `column`, in sorted order: the groups of `--by`."""
    import pyarrow.compute as pc

    values = table.column(column)
    if pa.types.is_nested(values.type):
        raise ParamsError(f"--by {column}: a column of {values.type} values; --by groups rows by a column of single "
                          "values (a label, a type, a count)")
    for value in sorted(set(values.to_pylist()), key=str):
        mask = pc.equal(values, pa.scalar(value, values.type))
        yield value, mask, table.filter(mask)
