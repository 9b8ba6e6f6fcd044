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
        ``(x, y)`` of the component's pixels, input pixels.
    """

    box: tuple[int, int, int, int]
    area: int
    centroid: tuple[float, float]

    def header(self) -> dict:
        """The JSON-able dict of one entry of the mask header's ``regions``."""
        return {"box": list(self.box), "area": self.area, "centroid": [round(c, 2) for c in self.centroid]}


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
    n, _, stats, centroids = cv2.connectedComponentsWithStats(fgmask, connectivity=8)
    sx, sy = scale
    areas = stats[1:, cv2.CC_STAT_AREA] * (sx * sy)
    keep = np.flatnonzero(areas >= min_area) + 1
    # Largest first; equal areas top-left first, so that the order is the same on every run.
    left, top, area = (stats[keep, c] for c in (cv2.CC_STAT_LEFT, cv2.CC_STAT_TOP, cv2.CC_STAT_AREA))
    keep = keep[np.lexsort((left, top, -area))]
    listed = []
    for i in keep[:max_regions]:
        x, y, w, h = stats[i, :4]
        box = (int(x * sx), int(y * sy), int(round((x + w) * sx)) - int(x * sx), int(round((y + h) * sy)) - int(y * sy))
        cx, cy = centroids[i]
        listed.append(Region(box, int(round(areas[i - 1])), ((cx + 0.5) * sx - 0.5, (cy + 0.5) * sy - 0.5)))
    return Regions(listed, max(0, len(keep) - max_regions))
