"""CDnet 2014's dataset layout: finding sequences, and which frames are processed and scored.

A sequence directory holds ``input/inXXXXXX.jpg`` (1-based), ``groundtruth/gtXXXXXX.png``,
``temporalROI.txt`` (the first and last annotated frame) and optionally ``ROI.bmp`` (the spatial
region of interest, 0 = not scored). A dataset tree is ``ROOT/<category>/<sequence>/``
(Goyette et al., CVPRW 2012; Wang et al., CVPRW 2014; changedetection.net).

CDnet's protocol: a method processes every frame from the first one in ``input/`` (the frames
before temporalROI are its warm-up) up to the last scored frame; only frames inside temporalROI
that have a ground-truth file are scored. Every rejection names the file at fault.
"""

import pathlib
import re
from dataclasses import dataclass

import cv2
import numpy as np

from core.evaluation.metrics import GT_OUTSIDE_ROI

_INPUT = re.compile(r"^in(\d{6})\.jpg$")


class DatasetError(ValueError):
    """A directory that is not a readable CDnet-format dataset; the message names the file at fault."""


def read_gray(path: pathlib.Path | str) -> np.ndarray:
    """An image file as grayscale uint8, shape (h, w).

    Raises
    ------
    DatasetError
        If the file is missing or cannot be decoded (the message names it).
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: missing")
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if img is None:
        raise DatasetError(f"{path}: unreadable (not an image OpenCV can decode)")
    return img


@dataclass(frozen=True)
class Sequence:
    """One CDnet sequence directory, checked on construction.

    Attributes
    ----------
    root : pathlib.Path
    name : str
        ``category/sequence``, the sequence's name in results.
    category : str
        CDnet category (the parent directory's name).
    first_input, last_input : int
        First and last frame number present in ``input/`` (1-based).
    roi_first, roi_last : int
        temporalROI: the annotated range (1-based, inclusive).
    """

    root: pathlib.Path
    name: str
    category: str
    first_input: int
    last_input: int
    roi_first: int
    roi_last: int

    @classmethod
    def open(cls, root: pathlib.Path | str, name: str | None = None) -> "Sequence":
        """Check the layout of ``root`` and read its frame ranges.

        Raises
        ------
        DatasetError
            No ``input/`` or ``groundtruth/`` folder, no input frame, a missing or malformed
            ``temporalROI.txt``.
        """
        root = pathlib.Path(root)
        for sub in ("input", "groundtruth"):
            if not (root / sub).is_dir():
                raise DatasetError(f"{root}: no {sub}/ folder (expected the CDnet layout)")
        numbers = sorted(int(m.group(1)) for p in (root / "input").iterdir() if (m := _INPUT.match(p.name)))
        if not numbers:
            raise DatasetError(f"{root / 'input'}: no frame named inXXXXXX.jpg")
        roi_file = root / "temporalROI.txt"
        if not roi_file.is_file():
            raise DatasetError(f"{roi_file}: missing")
        text = roi_file.read_text(errors="replace")
        try:
            first, last = (int(v) for v in text.split()[:2])
        except ValueError:
            raise DatasetError(f"{roi_file}: expected two frame numbers, got {text[:40]!r}") from None
        if not 1 <= first <= last:
            raise DatasetError(f"{roi_file}: bad range {first}..{last}")
        root = root.resolve()
        category = root.parent.name
        return cls(root, name or f"{category}/{root.name}", category, numbers[0], numbers[-1], first, last)

    def input_path(self, i: int) -> pathlib.Path:
        """Path of input frame ``i`` (1-based)."""
        return self.root / "input" / f"in{i:06d}.jpg"

    def gt_path(self, i: int) -> pathlib.Path:
        """Path of the ground truth of frame ``i`` (1-based)."""
        return self.root / "groundtruth" / f"gt{i:06d}.png"

    def scored_frames(self, a: int | None = None, b: int | None = None) -> list[int]:
        """Frames to score: inside temporalROI and ``a..b``, with a ground-truth file.

        Parameters
        ----------
        a, b : int, optional
            A sub-range of temporalROI (``--frames A:B``, 1-based, inclusive).

        Returns
        -------
        list of int
            Ascending frame numbers; may be empty.

        Raises
        ------
        DatasetError
            If ``a..b`` is not inside temporalROI.
        """
        a = self.roi_first if a is None else a
        b = self.roi_last if b is None else b
        if not self.roi_first <= a <= b <= self.roi_last:
            raise DatasetError(
                f"frames {a}:{b} are outside the annotated range "
                f"{self.roi_first}:{self.roi_last} ({self.root / 'temporalROI.txt'})"
            )
        return [i for i in range(a, b + 1) if self.gt_path(i).is_file()]

    def roi(self, shape: tuple[int, ...]) -> np.ndarray | None:
        """The spatial region of interest as bool (h, w), or None when the sequence has none.

        Raises
        ------
        DatasetError
            If ``ROI.bmp`` (or ``ROI.png``) is unreadable or not of the frames' ``shape``.
        """
        for name in ("ROI.bmp", "ROI.png"):
            path = self.root / name
            if path.is_file():
                roi = read_gray(path)
                if roi.shape != tuple(shape):
                    raise DatasetError(
                        f"{path}: size {roi.shape[1]}x{roi.shape[0]}, but the frames are {shape[1]}x{shape[0]}"
                    )
                return roi > 0
        return None

    def frames(self, a: int, b: int) -> np.ndarray:
        """Input frames ``a..b`` (1-based, inclusive) as grayscale uint8, shape (b - a + 1, h, w).

        The size is checked on the first frame before the stack is allocated.

        Raises
        ------
        DatasetError
            A missing or unreadable frame, or one of another size than the first.
        """
        first = read_gray(self.input_path(a))
        out = np.empty((b - a + 1,) + first.shape, np.uint8)
        out[0] = first
        for k, i in enumerate(range(a + 1, b + 1), start=1):
            f = read_gray(self.input_path(i))
            if f.shape != first.shape:
                raise DatasetError(
                    f"{self.input_path(i)}: size {f.shape[1]}x{f.shape[0]}, "
                    f"but frame {a} is {first.shape[1]}x{first.shape[0]}"
                )
            out[k] = f
        return out

    def labels(self, i: int, shape: tuple[int, ...], roi: np.ndarray | None = None) -> np.ndarray:
        """CDnet labels of frame ``i`` as uint8 (h, w), pixels outside ``roi`` set to 85 (not scored).

        Raises
        ------
        DatasetError
            An unreadable ground truth, or one of another size than the frames.
        """
        path = self.gt_path(i)
        g = read_gray(path)
        if g.shape != tuple(shape):
            raise DatasetError(f"{path}: size {g.shape[1]}x{g.shape[0]}, but the frames are {shape[1]}x{shape[0]}")
        if roi is not None:
            g = np.where(roi, g, GT_OUTSIDE_ROI).astype(np.uint8)
        return g


def find_sequences(root: pathlib.Path | str) -> list[Sequence]:
    """The sequences under ``root``: the directory itself, its children, or ``root/<category>/<sequence>``.

    Parameters
    ----------
    root : str or path
        One sequence directory, one category directory, or a tree in CDnet's layout.

    Returns
    -------
    list of Sequence
        Sorted by name.

    Raises
    ------
    DatasetError
        If ``root`` is not a directory, holds no sequence, or a sequence is malformed.
    """
    root = pathlib.Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")
    if (root / "input").is_dir():
        return [Sequence.open(root)]
    found = sorted(p.parent for p in root.glob("*/input") if p.is_dir())
    if not found:
        found = sorted(p.parent for p in root.glob("*/*/input") if p.is_dir())
    if not found:
        raise DatasetError(
            f"{root}: no sequence found (expected input/ in it, in ROOT/<sequence>/ or in ROOT/<category>/<sequence>/)"
        )
    return [Sequence.open(p) for p in found]
