"""Motion regions: the connected components of a foreground mask, as the mask header lists them.

OpenCV's ``connectedComponentsWithStats`` (8-connectivity) does the labelling; this module only
scales to input pixels, filters by area and orders them (docs/design.md, "Motion").
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
    fgmask: np.ndarray, min_area: int, max_regions: int, scale: tuple[float, float] = (1.0, 1.0)
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
    # Grana's block-based algorithm: the fastest of OpenCV's on masks of 320 x 240, with one
    # thread or two (0.16-0.23 ms against 0.23-0.42 ms for the default; docs/results.md).
    _, _, stats, centroids = cv2.connectedComponentsWithStatsWithAlgorithm(fgmask, 8, cv2.CV_32S, cv2.CCL_GRANA)
    sx, sy = scale
    areas = stats[1:, cv2.CC_STAT_AREA] * (sx * sy)  # label 0 is the background
    keep = np.flatnonzero(areas >= min_area) + 1
    # The few components kept (most are specks below min_area) are ordered and scaled in Python:
    # on so few, numpy's calls cost more than their arithmetic (docs/results.md, "Cameras per core").
    rows = stats[keep].tolist()  # [left, top, width, height, area]
    # Largest first; equal areas top-left first, so that the order is the same on every run.
    order = sorted(range(len(rows)), key=lambda i: (-rows[i][4], rows[i][1], rows[i][0]))[:max_regions]
    cents = np.round((centroids[keep[order]] + 0.5) * (sx, sy) - 0.5, 2).tolist()
    listed = []
    for i, c in zip(order, cents, strict=True):
        x, y, w, h, area = rows[i]
        x0, y0 = int(x * sx), int(y * sy)
        box = (x0, y0, round((x + w) * sx) - x0, round((y + h) * sy) - y0)
        listed.append(Region(box, round(area * (sx * sy)), (c[0], c[1])))
    return Regions(listed, len(rows) - len(listed))
