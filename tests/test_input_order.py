"""Same records in another order -> byte-identical parquet and manifest outputs, for the
formats whose records come as JSON lists: VQA v2, VQA-CP (both modes) and VisDial."""

from __future__ import annotations

import json

import pytest

from builders.visdial.samples import write_visdial
from builders.vqa.samples import write_vqa_cp, write_vqa_v2


def _outputs(folder):
    manifest = json.loads((folder / "manifest.json").read_text())
    return {o["path"]: o["sha256"] for o in manifest["outputs"]}


def _reverse_lists(path, keys):
    data = json.loads(path.read_text())
    target = data
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]].reverse()
    path.write_text(json.dumps(data))


def _reverse(path):
    path.write_text(json.dumps(list(reversed(json.loads(path.read_text())))))


@pytest.mark.parametrize("bench, extra", [("vqa-v2", []), ("vqa-cp", ["--param", "mode=regenerate"]),
                                          ("vqa-cp", []), ("visdial", [])])
def test_record_order_does_not_change_outputs(cli, tmp_path, bench, extra):
    roots = []
    for k in range(2):
        root = tmp_path / f"src{k}"
        write_vqa_v2(root / "vqa_v2", 120, 60, seed=9)
        write_vqa_cp(root / "vqa_cp", root / "vqa_v2")
        write_visdial(root / "visdial", {"val": 5}, seed=9)
        roots.append(root)
    shuffled = roots[1]
    for name in ("v2_OpenEnded_mscoco_train2014_questions.json", "v2_OpenEnded_mscoco_val2014_questions.json"):
        _reverse_lists(shuffled / "vqa_v2" / name, ["questions"])
    for name in ("v2_mscoco_train2014_annotations.json", "v2_mscoco_val2014_annotations.json"):
        _reverse_lists(shuffled / "vqa_v2" / name, ["annotations"])
    for name in ("vqacp_v2_train_questions.json", "vqacp_v2_test_annotations.json"):
        _reverse(shuffled / "vqa_cp" / name)
    _reverse_lists(shuffled / "visdial" / "visdial_1.0_val.json", ["data", "dialogs"])
    _reverse(shuffled / "visdial" / "visdial_1.0_val_dense_annotations.json")
    outs = []
    for k, root in enumerate(roots):
        out = tmp_path / f"out{k}"
        code, _, err = cli("build", bench, "--source", root, "--out", out, "--no-cache", *extra)
        assert code == 0, err
        outs.append(_outputs(out))
    assert outs[0] == outs[1]
