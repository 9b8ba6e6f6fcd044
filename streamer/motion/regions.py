"""Motion regions: the connected components of a foreground mask, as the mask header lists them.

OpenCV's ``connectedComponentsWithStats`` (8-connectivity) does the labelling, or the model's
compiled kernel when it is loaded (:func:`core.streaming.kernels.components`, the same
components); this module only scales to input pixels, filters by area and orders them
(docs/design.md, "Motion").
"""

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Region:
    """One connected component of a mask, in input pixels.

    Attributes
    ----------
    box : (int, int, int, int)
        ``(x, y, w, h)``: left column, top row, width and height, input pixels.
    area : int
        Foreground pixels of the component, input pixels (the mask's count times the scale's
        area when the mask is at the processing resolution).
    centroid : (float, float)
        ``(x, y)`` of the component's pixels, input pixels, rounded to 0.01 pixel.
    """

    box: tuple[int, int, int, int]
    area: int
    centroid: tuple[float, float]


@dataclass(frozen=True)
class Regions:
    """The regions of one mask: the listed ones, largest first, and how many were left out.

    Attributes
    ----------
    listed : list of Region
        At most ``max_regions``, by decreasing area (ties: top-left first).
    omitted : int
        Components of at least ``min_area`` pixels beyond ``max_regions``.
    """

    listed: list[Region]
    omitted: int


def find_regions(
    fgmask: np.ndarray,
    min_area: int,
    max_regions: int,
    scale: tuple[float, float] = (1.0, 1.0),
    compiled: bool = False,
) -> Regions:
    """The connected components of ``fgmask`` of at least ``min_area`` input pixels.

    Parameters
    ----------
    fgmask : ndarray, shape (h, w), uint8
        0 = background, anything else = foreground.
    min_area : int
        Smallest component listed, input pixels (>= 1).
    max_regions : int
        Most components listed (>= 0); the rest are counted in ``omitted``.
    scale : (float, float)
        ``(sx, sy)``: input pixels per mask pixel along x and y (1, 1 when the mask is at the input
        resolution).
    compiled : bool
        Label by :func:`core.streaming.kernels.components` (the model's compiled kernels loaded:
        :attr:`core.streaming.background.KDRSDLBackgroundSubtractor.compiled`), the same regions
        as OpenCV's in a sixth of its time.

    Returns
    -------
    Regions

    Raises
    ------
    ValueError
        If ``fgmask`` is not a 2-D uint8 array.
    """
    if fgmask.ndim != 2 or fgmask.dtype != np.uint8:
        raise ValueError(f"fgmask must be a 2-D uint8 array, got {fgmask.dtype} of shape {fgmask.shape}")
    if not fgmask.any():
        return Regions([], 0)
    a = scale[0] * scale[1]  # input pixels per mask pixel
    if compiled:
        # the statistics without a label image: 0.04 against 0.32 ms at 320 x 240, 0.13 against
        # 0.79 ms paced at 30 fps (docs/results.md, "Cameras per core")
        from core.streaming.kernels import components

        # [left, top, width, height, area, centroid x, centroid y] (the kernel gives the sums)
        rows = [r[:5] + [r[5] / r[4], r[6] / r[4]] for r in components(fgmask).tolist() if r[4] * a >= min_area]
    else:
        # Grana's block-based algorithm: the fastest of OpenCV's on masks of 320 x 240, with one
        # thread or two (0.16-0.23 ms against 0.23-0.42 ms for the default; docs/results.md).
        _, _, stats, centroids = cv2.connectedComponentsWithStatsWithAlgorithm(fgmask, 8, cv2.CV_32S, cv2.CCL_GRANA)
        keep = np.flatnonzero(stats[1:, cv2.CC_STAT_AREA] * a >= min_area) + 1  # label 0 is the background
        rows = [r + c for r, c in zip(stats[keep].tolist(), centroids[keep].tolist(), strict=True)]
    # The few components kept (most are specks below min_area) are ordered and scaled in Python:
    # on so few, numpy's calls cost more than their arithmetic (docs/results.md, "Cameras per core").
    # Largest first; equal areas top-left first, then by their centroids' rows: the order does not
    # depend on how the labelling numbered them, so that it is the same on every run and both ways.
    rows.sort(key=lambda r: (-r[4], r[1], r[0], r[6]))
    sx, sy = scale
    listed = []
    for x, y, w, h, area, cx, cy in rows[:max_regions]:
        x0, y0 = int(x * sx), int(y * sy)
        box = (x0, y0, round((x + w) * sx) - x0, round((y + h) * sy) - y0)
        # the pixel centres' mean in input pixels, rounded to 0.01 as numpy rounds (rint of 100 times)
        centroid = (round(((cx + 0.5) * sx - 0.5) * 100) / 100, round(((cy + 0.5) * sy - 0.5) * 100) / 100)
        listed.append(Region(box, round(area * a), centroid))
    return Regions(listed, len(rows) - len(listed))
