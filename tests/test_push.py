"""`vlbench push` with the HfApi layer replaced: exact files, commit message, token handling."""

from __future__ import annotations

import json

import pipelines.push


class FakeApi:
    def __init__(self, token, remote=()):
        self.token, self.remote, self.calls = token, list(remote), []

    def create_repo(self, **kw):
        self.calls.append(("create_repo", kw))

    def create_branch(self, **kw):
        self.calls.append(("create_branch", kw))

    def list_repo_files(self, **kw):
        return self.remote

    def create_commit(self, **kw):
        self.calls.append(("create_commit", kw))
        return type("Info", (), {"commit_url": "https://example.invalid/commit/1"})()


def _fake(monkeypatch, remote=()):
    made = []

    def factory(token):
        made.append(FakeApi(token, remote))
        return made[-1]

    monkeypatch.setattr(pipelines.push, "_api", factory)
    return made


def test_push_uploads_exactly_the_built_folder(built, cli, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    made = _fake(monkeypatch, remote=[".gitattributes", "all/val-00000-of-00002.parquet", "README.md"])
    code, stdout, err = cli("push", built("gqa-ood"), "--repo-id", "org/gqa-ood", "--private", "--revision", "v1")
    assert code == 0, err
    api = made[0]
    assert api.token == "hf_secret_value"
    assert "hf_secret_value" not in stdout + err
    names = [c[0] for c in api.calls]
    assert names == ["create_repo", "create_branch", "create_commit"]
    assert api.calls[0][1] == {"repo_id": "org/gqa-ood", "repo_type": "dataset", "private": True, "exist_ok": True}
    commit = api.calls[2][1]
    manifest = json.loads((built("gqa-ood") / "manifest.json").read_text())
    expected = sorted([o["path"] for o in manifest["outputs"]] + ["manifest.json"])
    added = [op.path_in_repo for op in commit["operations"] if type(op).__name__ == "CommitOperationAdd"]
    deleted = [op.path_in_repo for op in commit["operations"] if type(op).__name__ == "CommitOperationDelete"]
    local = sorted(p.relative_to(built("gqa-ood")).as_posix() for p in built("gqa-ood").rglob("*") if p.is_file())
    assert added == expected == local
    assert deleted == ["all/val-00000-of-00002.parquet"]  # a stale shard of an earlier push
    assert commit["commit_message"] == "Upload gqa-ood (testdev, val) built by vlbench"
    assert commit["revision"] == "v1" and commit["repo_type"] == "dataset"


def test_push_without_token_is_one_clear_error(built, cli, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    made = _fake(monkeypatch)
    code, _, err = cli("push", built("gqa-ood"), "--repo-id", "org/gqa-ood")
    assert code == 2
    assert err.strip() == "error: no Hugging Face token: set HF_TOKEN or run `hf auth login`"
    assert made == []


def test_push_refuses_a_damaged_folder(built, tmp_path, cli, monkeypatch):
    import shutil

    monkeypatch.setenv("HF_TOKEN", "hf_x")
    copy = tmp_path / "copy"
    shutil.copytree(built("gqa-ood"), copy)
    (copy / "README.md").write_text("edited")
    made = _fake(monkeypatch)
    code, _, err = cli("push", copy, "--repo-id", "org/x")
    assert code == 2 and "verification failed" in err and made == []
