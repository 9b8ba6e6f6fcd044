"""Zones: polygons in input pixels, rasterised once per frame size.

Two kinds (docs/configuration.md, "Motion"):

- **ignore** polygons, whose pixels are never foreground. Before the model sees a frame, their
  pixels are replaced by the median of the frame's other pixels, so the model learns nothing
  from them (Frigate's motion masks do the same); the published mask is zero there and they are
  counted in no fraction. The median follows a global change of light (``median(g x + o) =
  g median(x) + o``), so a filled area never looks like a change of light to the model.
- named **zones**, whose foreground fraction each mask header and a Prometheus gauge carry.

A polygon covers the pixels that OpenCV's ``fillPoly`` fills for its points rounded to whole
pixels: its outline included, so ``[[0, 0], [9, 0], [9, 9], [0, 9]]`` is 10 x 10 pixels.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

#: One pixel in this many (at least 1000 pixels) gives the median that fills ignored areas.
FILL_SAMPLE_STEP = 7


class ZoneError(ValueError):
    """A polygon of ``[motion]`` does not fit the frames' size (a configuration error, found at a frame)."""


def check_inside(polygon: Sequence[Sequence[float]], shape: tuple[int, int], what: str) -> None:
    """Raise :class:`ZoneError` naming ``what`` if a point of ``polygon`` lies outside a frame of ``shape``.

    Parameters
    ----------
    polygon : sequence of (x, y)
        Input pixels; a point may lie on the frame's last column or row (``x <= w - 1``).
    shape : (int, int)
        ``(h, w)`` of the frame, pixels.
    what : str
        How the error names the polygon (``"motion.zones[0] 'door'"``).
    """
    h, w = shape
    for x, y in polygon:
        if not (0 <= x <= w - 1 and 0 <= y <= h - 1):
            raise ZoneError(
                f"{what}: point ({x:g}, {y:g}) lies outside the {w} x {h} frame (x in 0..{w - 1}, y in 0..{h - 1})"
            )


def rasterise(
    polygons: Sequence[Sequence[Sequence[float]]], shape: tuple[int, int], scale: tuple[float, float] = (1.0, 1.0)
) -> np.ndarray:
    """The union of ``polygons`` as a (h, w) bool mask at ``shape``.

    ``scale`` ``(sx, sy)`` is input pixels per pixel of ``shape``: a polygon's points are divided
    by it before rounding (a mask at the processing resolution).
    """
    out = np.zeros(shape, np.uint8)
    sx, sy = scale
    pts = [np.round(np.asarray(p, float) / (sx, sy)).astype(np.int32) for p in polygons]
    if pts:
        cv2.fillPoly(out, pts, 1)
    return out.view(bool)


@dataclass(frozen=True)
class _Zone:
    name: str
    rows: slice
    cols: slice
    inside: np.ndarray  # bool, the zone within its bounding box, ignored pixels excluded
    pixels: int


class ZoneMap:
    """The ignore and named zones of one camera, rasterised at one mask size.

    Parameters
    ----------
    ignore : sequence of polygons
        Each a sequence of (x, y), input pixels.
    zones : mapping of str to polygon
        Named zones, in the configuration's order.
    input_shape : (int, int)
        ``(h, w)`` of the frames, input pixels.
    mask_shape : (int, int)
        ``(h, w)`` of the masks (the processing size with ``mask_resolution = "processing"``).

    Raises
    ------
    ZoneError
        If a point lies outside the input frame (:func:`check_inside`).
    """

    def __init__(
        self,
        ignore: Sequence[Sequence[Sequence[float]]],
        zones: Mapping[str, Sequence[Sequence[float]]],
        input_shape: tuple[int, int],
        mask_shape: tuple[int, int],
    ) -> None:
        for i, poly in enumerate(ignore):
            check_inside(poly, input_shape, f"motion.ignore[{i}]")
        for i, (name, poly) in enumerate(zones.items()):
            check_inside(poly, input_shape, f"motion.zones[{i}] {name!r}")
        self.input_shape: tuple[int, int] = (int(input_shape[0]), int(input_shape[1]))
        self.mask_shape: tuple[int, int] = (int(mask_shape[0]), int(mask_shape[1]))
        self.scale = (input_shape[1] / mask_shape[1], input_shape[0] / mask_shape[0])
        ignored = rasterise(ignore, self.mask_shape, self.scale) if ignore else None
        #: 255 where a pixel may be foreground, 0 where it is ignored; None without ignore polygons.
        self.keep = None if ignored is None else np.where(ignored, 0, 255).astype(np.uint8)
        #: Pixels of the mask that count (all but the ignored ones).
        self.counted = int(np.prod(self.mask_shape)) - (0 if ignored is None else int(np.count_nonzero(ignored)))
        self._ignored = ignored
        if ignored is not None:
            visible = np.flatnonzero(~ignored)
            step = max(1, min(FILL_SAMPLE_STEP, visible.size // 1000))
            self._fill_sample = visible[::step]
        self._zones: list[_Zone] = []
        for name, poly in zones.items():
            inside = rasterise([poly], self.mask_shape, self.scale)
            if ignored is not None:
                inside &= ~ignored
            ys, xs = np.nonzero(inside)
            rows = slice(int(ys.min()), int(ys.max()) + 1) if ys.size else slice(0, 0)
            cols = slice(int(xs.min()), int(xs.max()) + 1) if xs.size else slice(0, 0)
            self._zones.append(_Zone(name, rows, cols, np.ascontiguousarray(inside[rows, cols]), int(ys.size)))

    @property
    def names(self) -> list[str]:
        """The named zones, in the configuration's order."""
        return [z.name for z in self._zones]

    def fill_ignored(self, frame: np.ndarray) -> np.ndarray:
        """``frame`` (mask shape, uint8), its ignored pixels set to the others' median.

        The frame itself when there is nothing to ignore; else a copy. A frame is filled by the
        map made with its own shape as the mask shape.
        """
        if self._ignored is None:
            return frame
        out = frame.copy()
        out[self._ignored] = np.median(frame.ravel()[self._fill_sample]).astype(np.uint8)
        return out

    def apply(self, fgmask: np.ndarray) -> np.ndarray:
        """``fgmask`` (mask shape, uint8) with the ignored pixels zeroed (a new array when any are)."""
        return fgmask if self.keep is None else cv2.bitwise_and(fgmask, self.keep)

    def fractions(self, fgmask: np.ndarray) -> dict[str, float]:
        """Foreground fraction of each named zone in ``fgmask`` (already :meth:`apply`-ed), in [0, 1].

        A zone whose pixels are all ignored has fraction 0.
        """
        out = {}
        for z in self._zones:
            fg = np.count_nonzero(fgmask[z.rows, z.cols][z.inside]) if z.pixels else 0
            out[z.name] = fg / z.pixels if z.pixels else 0.0
        return out

    def box(self, fgmask: np.ndarray, name: str | None) -> tuple[int, int, int, int] | None:
        """The box ``(x, y, w, h)`` in input pixels of the foreground of zone ``name`` (None = the frame).

        None when that foreground is empty.
        """
        if name is None:
            x, y, w, h = cv2.boundingRect(fgmask)
        else:
            z = next(z for z in self._zones if z.name == name)
            sub = np.where(z.inside, fgmask[z.rows, z.cols], 0).astype(np.uint8)
            x, y, w, h = cv2.boundingRect(sub)
            x, y = x + z.cols.start, y + z.rows.start
        if w == 0 or h == 0:
            return None
        sx, sy = self.scale
        return int(x * sx), int(y * sy), int(round((x + w) * sx)) - int(x * sx), int(round((y + h) * sy)) - int(y * sy)
