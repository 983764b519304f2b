"""`vlbench push`: upload exactly a verified built folder to a hub dataset repo in one commit."""

from __future__ import annotations

from pathlib import Path

from core.errors import VlbenchError
from core.manifest import MANIFEST, read_manifest
from pipelines.verify import verify

KEEP_REMOTE = {".gitattributes"}


def _api(token: str):
    from huggingface_hub import HfApi

    return HfApi(token=token)


def push(folder: Path, repo_id: str, private: bool = False, revision: str | None = None, api_factory=None) -> dict:
    """Create the repo if needed and commit the folder's files; remote files not in it are deleted.

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
    files = sorted([item["path"] for item in manifest["outputs"]] + [MANIFEST])
    api = (api_factory or _api)(token)
    try:
        return _upload(api, folder, manifest, files, repo_id, private, revision)
    except hub_errors() as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VlbenchError(f"push to datasets/{repo_id} failed ({reason}); no commit was made") from None


def _upload(api, folder: Path, manifest: dict, files: list[str], repo_id: str, private: bool,
            revision: str | None) -> dict:
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete

    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    if revision:
        api.create_branch(repo_id=repo_id, repo_type="dataset", branch=revision, exist_ok=True)
    remote = set(api.list_repo_files(repo_id=repo_id, repo_type="dataset", revision=revision))
    operations = [CommitOperationAdd(path_in_repo=rel, path_or_fileobj=str(folder / rel)) for rel in files]
    operations += [CommitOperationDelete(path_in_repo=rel) for rel in sorted(remote - set(files) - KEEP_REMOTE)]
    message = f"Upload {manifest['benchmark']} ({', '.join(manifest['splits'])}) built by vlbench"
    info = api.create_commit(repo_id=repo_id, repo_type="dataset", revision=revision, operations=operations,
                             commit_message=message, commit_description=manifest["command"])
    return {"files": files, "deleted": sorted(remote - set(files) - KEEP_REMOTE), "commit_message": message,
            "url": getattr(info, "commit_url", None)}
