"""Malformed sources and bad parameters: exit 2, one line naming file/record/field, no output folder."""

from __future__ import annotations

import json

import pytest
from helpers import gqa_record, group, write_gqa

from builders.gqa_ood import reader as gqa
from core.errors import SourceError


@pytest.fixture
def good(tmp_path):
    records = {**group("1", "g1", {"a": 5, "b": 1}), **group("2", "g2", {"c": 2, "d": 2})}
    return records


def _build(cli, tmp_path, *extra):
    out = tmp_path / "out"
    code, stdout, stderr = cli("build", "gqa-ood", "--source", tmp_path / "src", "--out", out, *extra)
    return code, stderr, out


def _expect_error(cli, tmp_path, *needles, extra=()):
    code, stderr, out = _build(cli, tmp_path, *extra)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    return lines[0]


def test_truncated_json(cli, tmp_path, good):
    path = write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    path.write_bytes(path.read_bytes()[:-40])
    # the last record is cut
    _expect_error(cli, tmp_path, "testdev_balanced_questions.json", "truncated JSON", "record 20003")


def test_malformed_json_names_the_record(cli, tmp_path, good):
    path = write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    text = path.read_text()
    cut = text.index('"20001":{') + len('"20001":{')
    path.write_text(text[:cut] + '"oops" 1,' + text[cut:])  # a member without its colon
    _expect_error(cli, tmp_path, "malformed JSON at byte", "record 20001")


def test_record_without_answer(cli, tmp_path, good):
    del good["10003"]["answer"]
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "testdev_balanced_questions.json", "record 10003", "field 'answer'", "missing")


def test_record_that_is_not_an_object(cli, tmp_path, good):
    good["10002"] = ["not", "a", "record"]
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "record 10002", "not a JSON object")


def test_wrong_type_of_a_field(cli, tmp_path, good):
    good["20001"]["groups"]["local"] = 12
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "record 20001", "field 'groups.local'")


def test_wrong_type_of_a_field_read_only_for_kept_rows(cli, tmp_path, good):
    good["10001"]["question"] = 5
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "record 10001", "field 'question'", extra=("--param", "group_threshold=2"))


def _records_in_blocks(tmp_path, records: dict) -> tuple:
    """read_records over every record of a file large enough for Arrow to parse in several blocks."""
    path = write_gqa(tmp_path / "testdev_balanced_questions.json", records)
    index = gqa.read_index(path)
    return gqa.read_records(path, path.read_bytes(), index.column("question_id").to_pylist(),
                            index.column("offset").to_numpy(), index.column("length").to_numpy())


def test_wrong_type_in_a_later_block_names_its_record(tmp_path):
    """About 3 MB of records parse as several 1 MiB blocks; Arrow's row numbers count within a
    block, so the reader names the record from a one-block parse (5,000 records; the bad one is the
    4,321st, in the last block)."""
    records = group("1", "g1", {"a": 5000})
    qid = sorted(records)[4321]
    records[qid]["question"] = 7
    with pytest.raises(SourceError, match=f"record {qid}.*'question'"):
        _records_in_blocks(tmp_path, records)


def test_record_longer_than_a_block_is_read(tmp_path):
    """A 3 MiB question straddles Arrow's 1 MiB blocks: the reader parses the lines again as one
    block and keeps every field intact."""
    records = group("1", "g1", {"a": 20})
    qid = sorted(records)[7]
    records[qid]["question"] = "why " * (3 << 18)
    rows = _records_in_blocks(tmp_path, records)
    assert rows.column("question").to_pylist() == [records[q]["question"] for q in records]
    assert [json.loads(t) for t in rows.column("record_json").to_pylist()] == list(records.values())


def test_empty_file(cli, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "testdev_balanced_questions.json").write_bytes(b"")
    _expect_error(cli, tmp_path, "testdev_balanced_questions.json", "empty file")


def test_repeated_question_id_in_one_file(cli, tmp_path, good):
    text = json.dumps(good, separators=(",", ":"))
    # A second "10002" key: a plain JSON parser would silently keep only the last one.
    duplicate = '"10002":' + json.dumps(gqa_record("zzz", "g1"), separators=(",", ":"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "testdev_balanced_questions.json").write_text(text[:-1] + "," + duplicate + "}")
    _expect_error(cli, tmp_path, "record 10002", "appears twice")


def test_repeated_identical_record_in_pretty_printed_file(tmp_path, good):
    body = ",\n".join(f'    "{k}": {json.dumps(v, indent=4)}' for k, v in good.items())
    body += ',\n    "20000": ' + json.dumps(good["20000"], indent=4)
    path = tmp_path / "testdev_balanced_questions.json"
    path.write_text("{\n" + body + "\n}")
    with pytest.raises(SourceError, match="record 20000.*appears twice"):
        gqa.read_index(path)


@pytest.mark.parametrize("layout", ["compact", "json.dump default", "indented", "trailing newline", "escaped id"])
def test_record_offsets_in_every_layout_and_a_repeated_id_in_each(tmp_path, good, layout):
    # Compact and json.dump-default files are checked key by key as bytes, others by the general walk.
    # The golden is each record's raw view, which must sit at its offset; a repeated id is refused in
    # every layout.
    text = json.dumps(good, **{"compact": {"separators": (",", ":")}, "indented": {"indent": 4}}.get(layout, {}))
    text += "\n" if layout == "trailing newline" else ""
    first = next(iter(good))
    if layout == "escaped id":  # the first id's first digit written as a JSON escape
        text = text.replace(f'"{first}"', '"\\u%04x%s"' % (ord(first[0]), first[1:]), 1)
    path = tmp_path / "testdev_balanced_questions.json"
    path.write_text(text)
    data = path.read_bytes()
    top = gqa.msgspec.json.decode(data, type=dict[str, gqa.msgspec.Raw])
    assert list(top) == list(good)
    offsets = gqa._tiles_walk(path, data, list(top), list(top.values())).tolist()
    assert [data[o:o + len(r)] for o, r in zip(offsets, top.values())] == [bytes(r) for r in top.values()]
    path.write_text(text.rstrip()[:-1] + f', "{first}": ' + json.dumps(good[first]) + "}")
    with pytest.raises(SourceError, match=f"record {first}.*appears twice"):
        gqa.read_index(path)


def test_pretty_printed_source_reads_like_compact(tmp_path, good):
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(good, indent=4))
    compact = write_gqa(tmp_path / "compact.json", good)
    a, b = gqa.read_index(pretty), gqa.read_index(compact)
    assert a.drop_columns(["offset", "length"]).equals(b.drop_columns(["offset", "length"]))
    rows = gqa.read_records(pretty, pretty.read_bytes(), a.column("question_id").to_pylist(),
                            a.column("offset").to_numpy(), a.column("length").to_numpy())
    assert [json.loads(t) for t in rows.column("record_json").to_pylist()] == list(good.values())


def test_same_question_id_in_both_splits(cli, tmp_path, good):
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    write_gqa(tmp_path / "src" / "val_balanced_questions.json", {"10004": gqa_record("a", "g9")})
    _expect_error(cli, tmp_path, "record 10004", "also in")


def test_unknown_set_key(cli, tmp_path, good):
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "--param alpah", "unknown parameter", extra=("--param", "alpah=0.3"))


def test_mistyped_set_value(cli, tmp_path, good):
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    _expect_error(cli, tmp_path, "alpha=high", "expected float", extra=("--param", "alpha=high"))
    _expect_error(cli, tmp_path, "group_threshold=median", extra=("--param", "group_threshold=median"))
    _expect_error(cli, tmp_path, "tail_comparison", extra=("--param", "tail_comparison=fuzzy"))
    _expect_error(cli, tmp_path, "1 + alpha must be positive", extra=("--param", "alpha=-1.5"))


def test_missing_source(cli, tmp_path):
    (tmp_path / "src").mkdir()
    _expect_error(cli, tmp_path, "GQA source file not found")


@pytest.mark.slow
def test_failed_rebuild_keeps_the_previous_output(cli, tmp_path, good):
    write_gqa(tmp_path / "src" / "testdev_balanced_questions.json", good)
    code, stderr, out = _build(cli, tmp_path, "--param", "group_threshold=2")
    assert code == 0, stderr
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    (tmp_path / "src" / "testdev_balanced_questions.json").write_bytes(b"{")
    code, stderr, _ = _build(cli, tmp_path)
    assert code == 2
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
