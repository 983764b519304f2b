"""`vlbench push`: upload exactly a verified built folder to a hub dataset repo in one commit."""

from __future__ import annotations

import tempfile
from pathlib import Path

from core.errors import VlbenchError
from core.manifest import MANIFEST, read_manifest
from pipelines.verify import verify

KEEP_REMOTE = {".gitattributes"}


def _api(token: str):
    from huggingface_hub import HfApi

    return HfApi(token=token)


def push(folder: Path, repo_id: str, private: bool = False, revision: str | None = None, api_factory=None,
         inspect_task: Path | None = None) -> dict:
    """Create the repo if needed and commit the folder's files; remote files not in it are deleted. With
    `inspect_task` (an Inspect task `export-task` wrote from this build), the commit also carries the layer
    that makes the repo a Hub benchmark Inspect runs (evaluator/harness/hub.py).

    The token comes from HF_TOKEN or the user's `hf auth login`; it is never printed or stored.
    """
    from huggingface_hub import get_token
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from core.data import hub_errors

    folder = Path(folder)
    try:
        validate_repo_id(repo_id)
        if repo_id.count("/") != 1:
            raise HFValidationError("expected ORG/NAME")
    except HFValidationError as exc:
        raise VlbenchError(f"--repo-id {repo_id}: not a valid hub repo id ({str(exc).splitlines()[0]})") from None
    check = verify(folder)
    if check.problems:
        raise VlbenchError(f"{folder}: refusing to push, verification failed: {check.problems[0]}")
    token = get_token()
    if not token:
        raise VlbenchError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    manifest = read_manifest(folder)
    sources = {item["path"]: folder / item["path"] for item in manifest["outputs"]}
    sources[MANIFEST] = folder / MANIFEST
    with tempfile.TemporaryDirectory(prefix="vlbench-push-") as layer:
        if inspect_task is not None:
            from evaluator.harness.hub import write_layer

            sources.update({rel: Path(layer) / rel for rel in write_layer(folder, Path(inspect_task), repo_id,
                                                                            Path(layer))})
        api = (api_factory or _api)(token)
        try:
            return _upload(api, manifest, sources, repo_id, private, revision)
        except hub_errors() as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise VlbenchError(f"push to datasets/{repo_id} failed ({reason}); no commit was made") from None


def _upload(api, manifest: dict, sources: dict[str, Path], repo_id: str, private: bool,
            revision: str | None) -> dict:
    """One commit of {path in the repo: local file}."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    files = sorted(sources)
    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    if revision:
        api.create_branch(repo_id=repo_id, repo_type="dataset", branch=revision, exist_ok=True)
    remote = set(api.list_repo_files(repo_id=repo_id, repo_type="dataset", revision=revision))
    operations = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(sources[rel])) for rel in files]
    operations += [CommitOperationDelete(path_in_repo=rel) for rel in sorted(remote - set(files) - KEEP_REMOTE)]
    message = f"Upload {manifest['benchmark']} ({', '.join(manifest['splits'])}) built by vlbench"
    info = api.create_commit(repo_id=repo_id, repo_type="dataset", revision=revision, operations=operations,
                             commit_message=message, commit_description=manifest["command"])
    return {"files": files, "deleted": sorted(remote - set(files) - KEEP_REMOTE), "commit_message": message,
            "url": getattr(info, "commit_url", None)}
