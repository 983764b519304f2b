"""Images of a benchmark's rows: the embedded `image` column of a built table (struct with bytes), or
files in an `--images` folder found by the row's image key (COCO/VisDial file names end in the
zero-padded image id, GQA's are `<imageId>.jpg`, VCR's `img_fn` is a path inside the folder)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

from builders.sources.files import inside
from core.errors import ModelError

_SUFFIXES = (".jpg", ".jpeg", ".png")


def index_by_stem(root: Path, suffixes: tuple[str, ...], trailing_number: bool = False, option: str | None = None,
                  ) -> dict[str, Path]:
    """The files under ROOT (sub-folders included, in sorted order: the first one wins) with one of
    `suffixes`, by name without extension, and with `trailing_number` also by the number their name
    ends in (COCO_val2014_000000000042.jpg -> "42"). With `option` (the command-line option that named
    ROOT), two files with one name are refused instead: which one the user meant is not knowable."""
    index: dict[str, Path] = {}
    for folder, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            stem, ext = os.path.splitext(name)
            if ext.lower() not in suffixes:
                continue
            path = Path(folder) / name
            if option is not None and stem in index:
                raise ModelError(f"{option} {root}: two files for '{stem}' ({index[stem].relative_to(root)}, "
                                 f"{path.relative_to(root)}); keep one")
            index.setdefault(stem, path)
            digits = re.search(r"(\d+)$", stem) if trailing_number else None
            if digits:
                index.setdefault(str(int(digits.group(1))), path)
    return index


# A blind run (`--no-image`; Chen et al., NeurIPS 2024, §3: a model's score without its images): a generative VLM is
# asked the prompt without its pictures; a model that cannot run without an image (an `hf:` task head: ViLT, CLIP)
# sees this neutral image in place of every picture, so that nothing of the row's image reaches it.
NEUTRAL_IMAGE = "a 224 x 224 RGB image of one mid-grey, (128, 128, 128), as PNG"
BLIND_NOTES = {
    "hf-generative": "no image: the prompt without its pictures",
    "vllm": "no image: the prompt without its pictures",
    "openai": "no image: the prompt without its pictures",
    "hf": f"no image of the row: the neutral image ({NEUTRAL_IMAGE}) in place of every picture",
    "baseline": "no image: a baseline reads none",
    "py": "no image: the tables the model is given lack the benchmark's image and video columns",
}


def neutral_image() -> bytes:
    """The neutral image's PNG bytes (NEUTRAL_IMAGE), the same on every call and machine."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (224, 224), (128, 128, 128)).save(buffer, format="PNG")
    return buffer.getvalue()


class ImageFolder:
    """Finds an image file by key; the folder is indexed once, on first use. `blind`: every row shows the
    neutral image instead (`--no-image`)."""

    def __init__(self, root: Path | None, blind: bool = False):
        self.root = None if root is None else Path(root)
        self.blind = blind
        self._index: dict[str, Path] | None = None

    def path(self, key) -> Path:
        if self.root is None:
            raise ModelError("this model reads images: pass --images DIR (the benchmark's image folder)")
        if not self.root.is_dir():
            raise ModelError(f"--images {self.root}: " + ("is a file, expected a folder" if self.root.exists()
                                                          else "no such folder"))
        key = str(key)
        if "/" in key or "\\" in key or key.lower().endswith(_SUFFIXES):
            path = inside(self.root, key, self.root, record=key, field="image key")
        else:
            if self._index is None:
                self._index = index_by_stem(self.root, _SUFFIXES, trailing_number=True)
            path = self._index.get(key)
        if path is None or not path.is_file():
            raise ModelError(f"{self.root}: no image file for image '{key}'")
        return path


def open_image(source):
    """A path, embedded bytes or an image already decoded (a video frame) -> an RGB PIL image; an
    undecodable file, or one whose size makes Pillow refuse it as a decompression bomb, is a ModelError naming
    it."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(source, Image.Image):
        return source.convert("RGB")
    name = source if isinstance(source, Path) else "embedded image"
    try:
        image = Image.open(source if isinstance(source, Path) else io.BytesIO(source))
        return image.convert("RGB")
    except Image.DecompressionBombError as exc:  # a small file that decodes to billions of pixels
        raise ModelError(f"{name}: image too large to decode safely ({exc})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ModelError(f"{name}: cannot decode image ({exc})") from None


def image_sources(table, key_column: str, folder: ImageFolder) -> list:
    """Per row what `open_image` reads: embedded bytes when the table has an `image` column (the neutral image's
    in a blind run)."""
    if folder.blind:
        return [neutral_image()] * table.num_rows
    if "image" in table.column_names:
        return [v["bytes"] for v in table.column("image").to_pylist()]
    return [folder.path(k) for k in table.column(key_column).to_pylist()]
