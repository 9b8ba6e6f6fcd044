"""The worker's motion stage: ignored areas out of the frame, then regions, zones and events of a mask.

Before the model: :meth:`MotionStage.prepare` fills the ignored areas (:mod:`.zones`) and checks
the polygons against the first frame's size. After it: :meth:`MotionStage.update` zeroes the
ignored pixels of the mask, lists its regions (:mod:`.regions`), measures each zone's
foreground fraction and runs the event detector (:mod:`.events`), in a typed result the worker
publishes (docs/design.md, "Motion").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from streamer.motion.events import FRAME, Event, EventDetector
from streamer.motion.regions import Regions, find_regions
from streamer.motion.zones import ZoneMap

if TYPE_CHECKING:
    from streamer.config import MotionConfig


@dataclass(frozen=True)
class MotionResult:
    """What :meth:`MotionStage.update` made of one mask.

    Attributes
    ----------
    fgmask : ndarray, shape (h, w), uint8
        The mask with the ignored pixels zeroed (the model's own when nothing is ignored).
    fg_ratio : float
        Foreground fraction of the pixels not ignored, in [0, 1], at the processing resolution.
    regions : Regions
        Its connected components (input pixels), measured at the processing resolution.
    zones : dict of str to float
        Each named zone's foreground fraction, in [0, 1] (empty without named zones).
    events : list of Event
        The events this frame raised (:class:`streamer.motion.events.EventDetector`).
    """

    fgmask: np.ndarray
    fg_ratio: float
    regions: Regions
    zones: dict[str, float]
    events: list[Event]


class MotionStage:
    """Regions, zones and events of one camera's masks.

    Parameters
    ----------
    cfg : streamer.config.MotionConfig
    """

    def __init__(self, cfg: MotionConfig) -> None:
        self.cfg = cfg
        self.ignore = [list(p) for p in cfg.ignore]
        self.named = {z.name: list(z.polygon) for z in cfg.zones}
        self.events = EventDetector(
            list(self.named) or [FRAME], cfg.event_threshold, cfg.event_min_frames, cfg.event_quiet_frames
        )
        # the zones rasterised at each size in use (the received frame's, the published mask's, the
        # processing size), for the current input size only
        self._maps: dict[tuple[tuple[int, int], tuple[int, int]], ZoneMap] = {}

    def _map(self, input_shape: tuple[int, int], mask_shape: tuple[int, int]) -> ZoneMap:
        """The zones of a frame of ``input_shape`` rasterised at ``mask_shape``, made once per size.

        Raises
        ------
        streamer.motion.zones.ZoneError
            If a polygon does not fit ``input_shape`` (checked once per size).
        """
        key = (input_shape, mask_shape)
        zm = self._maps.get(key)
        if zm is None:
            if all(i != input_shape for i, _ in self._maps):
                self._maps.clear()
            zm = self._maps[key] = ZoneMap(self.ignore, self.named, input_shape, mask_shape)
        return zm

    def prepare(self, frame: np.ndarray, input_shape: tuple[int, int] | None = None) -> np.ndarray:
        """The frame the model sees: ``frame`` (h, w) uint8 with its ignored areas filled.

        Parameters
        ----------
        frame : ndarray, shape (h, w), uint8
        input_shape : (int, int), optional
            ``(h, w)`` in input pixels, the polygons' (the source's when the capture reduced the
            frame); default the frame's own.

        Raises
        ------
        streamer.motion.zones.ZoneError
            If a polygon has a point outside the input frame (checked at the first frame and at
            each change of size): zones drawn for another size would be silently wrong.
        """
        shape = (frame.shape[0], frame.shape[1])
        return self._map(shape if input_shape is None else input_shape, shape).fill_ignored(frame)

    def update(
        self,
        fgmask: np.ndarray,
        input_shape: tuple[int, int],
        header: dict,
        fgmask_processing: np.ndarray | None = None,
        compiled: bool = False,
    ) -> MotionResult:
        """Regions, zones and events of the model's mask of one frame.

        Parameters
        ----------
        fgmask : ndarray, shape (h, w), uint8
            The model's mask as it is published, at the input or the processing size.
        input_shape : (int, int)
            ``(h, w)`` of the frame, input pixels.
        header : dict
            The frame's header (``epoch``, ``seq``, ``t_capture_ns``).
        fgmask_processing : ndarray, shape (hp, wp), uint8, optional
            The same mask at the processing resolution, when ``fgmask`` is its enlargement: the
            foreground ratio, the regions, the zone fractions and the event boxes are measured on
            it and scaled to input pixels. The enlargement only smooths the objects' edges, and at 1280 x 720 the
            connected components of the full-size mask took 6% of a core (docs/results.md,
            "Cameras per core").
        compiled : bool
            The model's compiled kernels are loaded: the regions are labelled by them
            (:func:`streamer.motion.regions.find_regions`).
        """
        zm = self._map(input_shape, fgmask.shape)
        published = measured = zm.apply(fgmask)
        if fgmask_processing is not None and fgmask_processing.shape != fgmask.shape:
            zm = self._map(input_shape, fgmask_processing.shape)
            measured = zm.apply(fgmask_processing)
        fg_ratio = np.count_nonzero(measured) / zm.counted if zm.counted else 0.0
        regions = find_regions(measured, self.cfg.min_area, self.cfg.max_regions, zm.scale, compiled)
        zones = zm.fractions(measured)
        fractions = zones or {FRAME: fg_ratio}
        events = self.events.update(
            header["epoch"],
            header["seq"],
            header["t_capture_ns"],
            fractions,
            lambda z: zm.box(measured, None if z == FRAME else z),
        )
        return MotionResult(published, fg_ratio, regions, zones, events)
