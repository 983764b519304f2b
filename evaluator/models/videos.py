"""Video frames for models that read a benchmark's videos (Social-IQ with `--videos DIR`).

A video is found in the folder by its id (`<video_id>.mp4` and the other usual containers, sub-folders
included; two files for one id, or one that is not a regular file, are refused) and read with PyAV
(`pip install 'vlbench[video]'`): the number of frames is counted from the container's packets, then
N frame indices are spread evenly from the first frame to the last (`frame_indices`, as lmms-eval's
and Qwen2-VL's video loaders do) and those frames are decoded as RGB images. A model gets them as N
images in the order they were shown.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ModelError
from evaluator.models.images import index_by_stem

VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".avi", ".mov")


def frame_indices(total: int, count: int) -> list[int]:
    """`count` frame indices spread evenly over `total` frames, first and last included
    (round(k * (total - 1) / (count - 1)), k = 0..count-1); every frame when the video has fewer."""
    if total <= count:
        return list(range(total))
    if count == 1:
        return [(total - 1) // 2]
    return [int(k * (total - 1) / (count - 1) + 0.5) for k in range(count)]


class VideoFolder:
    """Finds a video file by id; the folder is indexed once, on first use (ids are looked up among the
    files found there, never joined to the folder as paths)."""

    def __init__(self, root: Path):
        """Checks at once that the folder exists and that PyAV is installed."""
        self.root = Path(root)
        if not self.root.is_dir():
            raise ModelError(f"--videos {self.root}: not a folder")
        _pyav()
        self._index: dict[str, Path] | None = None

    def path(self, video_id: str) -> Path:
        if self._index is None:
            self._index = index_by_stem(self.root, VIDEO_SUFFIXES, option="--videos")
        found = self._index.get(str(video_id))
        if found is None:
            raise ModelError(f"--videos {self.root}: no video file for video '{video_id}' "
                             f"(expected {video_id}{VIDEO_SUFFIXES[0]} or another of {', '.join(VIDEO_SUFFIXES)})")
        if not found.is_file():  # a FIFO or a device would block or never end
            raise ModelError(f"--videos {self.root}: {found.relative_to(self.root)} is not a regular file")
        return found


def _pyav():
    try:
        import av
    except ImportError:
        raise ModelError("--videos needs PyAV to read video files: pip install 'vlbench[video]'") from None
    return av


def read_frames(path: Path, count: int) -> list:
    """`count` frames of a video, evenly spread (`frame_indices`), as RGB PIL images."""
    av = _pyav()
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            total = sum(1 for packet in container.demux(stream) if packet.size)
        wanted = frame_indices(total, count)
        frames, position = [], 0
        with av.open(str(path)) as container:
            for frame in container.decode(video=0):
                if len(frames) == len(wanted):
                    break
                if position == wanted[len(frames)]:
                    frames.append(frame.to_image().convert("RGB"))
                position += 1
    except (av.error.FFmpegError, IndexError, OSError) as exc:
        detail = "no video stream" if isinstance(exc, IndexError) else exc
        raise ModelError(f"{path}: cannot read video frames ({detail})") from None
    if not frames or len(frames) != len(wanted):
        raise ModelError(f"{path}: cannot read video frames ({len(frames)} of {len(wanted)} frames decoded)")
    return frames
