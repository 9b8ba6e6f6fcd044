"""The per-pixel foreground decision of the streaming model.

A pixel x of a frame is foreground when it leaves its background band::

    h(p)  = max(k_sigma * sigma(p), floor) * (1 + blink_gain * v(p))
    fg(p) = x(p) < min_{q in N(p)} (bg(q) - h(q))  or  x(p) > max_{q in N(p)} (bg(q) + h(q))

- ``sigma(p)`` is the background's own spread at p, estimated at each window refit from the
  window's deviations from the robust mean ``M``, leaving out the samples that KDRSDL put in
  the sparse part ``E`` (they are foreground, not background variation): :func:`pixel_spread`.
- ``N(p)`` is a square neighbourhood (spatial tolerance): a pixel matching the background of a
  neighbour is background, which absorbs camera jitter and swaying edges.
- ``v(p)`` counts how often p's raw decision flips outside the objects of the previous frame:
  a moving background (water, leaves) makes a decision blink, an object keeps it on. The band
  widens where decisions blink. The idea is SuBSENSE's feedback on per-pixel distance
  thresholds (St-Charles, Bilodeau and Bergevin, IEEE TIP 2015); the rule here is our own.
"""

from dataclasses import dataclass

import cv2
import numpy as np

from core.streaming.postprocess import postprocess, square

#: sqrt(pi / 2): turns a mean absolute deviation into a Gaussian sigma.
MEAN_ABS_TO_SIGMA = 1.2533


def pixel_spread(X: np.ndarray, M: np.ndarray, E: np.ndarray, e_cut: float) -> np.ndarray:
    """The background's per-pixel spread over a solved window.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32
        The window's frames, intensity in [0, 1].
    M : ndarray, shape (m, n)
        The window's robust mean (KDRSDL's mean mode).
    E : ndarray, shape (N, m, n)
        KDRSDL's sparse part of the window: samples with ``|E| > e_cut`` are left out.
    e_cut : float
        Intensity above which a sample of ``E`` counts as foreground.

    Returns
    -------
    ndarray, shape (m, n), float32
        ``sqrt(pi/2)`` times the mean absolute deviation from ``M`` of the kept samples
        (the Gaussian sigma); 0 where every sample was left out (the floor then applies).
    """
    dev = np.abs(X - M[None], dtype=np.float32)
    keep = np.abs(E) <= e_cut
    n = keep.sum(axis=0)
    total = np.where(keep, dev, 0).sum(axis=0, dtype=np.float32)
    return (MEAN_ABS_TO_SIGMA * total / np.maximum(n, 1)).astype(np.float32)


@dataclass
class DecisionParams:
    """Knobs of :class:`PixelDecision`.

    Attributes
    ----------
    k_sigma : float
        Band half-width in multiples of the pixel's sigma.
    floor : float
        Smallest band half-width (intensity in [0, 1]; 0.06 = 15 gray levels).
    tolerance : int
        Side (pixels) of the neighbourhood N(p); 1 = none.
    blink_gain : float
        Band widening per unit of the blink count v.
    blink_up, blink_down, blink_max : float
        v rises by ``blink_up`` at a counted flip, falls by ``blink_down`` otherwise, and stays
        in ``[0, blink_max]``.
    object_margin : int
        Side (pixels) of the dilation of the previous frame's objects inside which flips are
        not counted (an object's moving edge is not a moving background).
    """

    k_sigma: float = 3.0
    floor: float = 0.06
    tolerance: int = 5
    blink_gain: float = 0.1
    blink_up: float = 1.0
    blink_down: float = 0.1
    blink_max: float = 20.0
    object_margin: int = 5
    shadow: bool = False
    shadow_ratio: tuple = (0.5, 0.92)
    shadow_spread: float = 0.04
    shadow_window: int = 5


class PixelDecision:
    """Per-pixel bands with blink feedback; holds the per-pixel state across frames.

    Parameters
    ----------
    shape : (int, int)
        Frame shape (h, w) in pixels.
    params : DecisionParams
    open_size, close_size : int
        Post-processing (:func:`core.streaming.postprocess.postprocess`), pixels.
    fill : bool
        Hole filling in the post-processing.
    """

    #: Arrays a checkpoint stores: attribute name -> dtype.
    STATE = {"v": np.float32, "prev_raw": bool, "prev_obj": bool}

    def __init__(
        self, shape: tuple[int, int], params: DecisionParams, open_size: int = 3, close_size: int = 7, fill: bool = True
    ) -> None:
        self.params = params
        self.post = (open_size, close_size, fill)
        self.v = np.zeros(shape, np.float32)
        self.prev_raw = np.zeros(shape, bool)
        self.prev_obj = np.zeros(shape, bool)
        self._half: tuple[np.ndarray, np.ndarray] | None = None  # (sigma, its half-width before blink widening)

    def band(self, bg: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends of the background band, each float32 (h, w)."""
        p = self.params
        if self._half is None or self._half[0] is not sigma:
            # sigma changes at refits only: its half-width is kept until the next one
            self._half = (sigma, np.maximum(np.float32(p.k_sigma) * sigma, np.float32(p.floor)))
        h = self._half[1]
        if p.blink_gain > 0:
            h = h * (1 + np.float32(p.blink_gain) * self.v)
        lo, hi = bg - h, bg + h
        if p.tolerance > 1:
            k = square(p.tolerance)
            lo, hi = cv2.erode(lo, k), cv2.dilate(hi, k)
        return lo, hi

    def shadow(self, x: np.ndarray, bg: np.ndarray) -> np.ndarray:
        """Pixels that look like a cast shadow on the background, bool (h, w): darker by a ratio
        that is uniform over the neighbourhood (a shadow scales the background's texture; an
        object replaces it)."""
        p = self.params
        r = x / np.maximum(bg, np.float32(1 / 255))
        k = (p.shadow_window, p.shadow_window)
        mean = cv2.blur(r, k)
        var = cv2.blur(r * r, k) - mean * mean
        lo, hi = p.shadow_ratio
        return (r > lo) & (r < hi) & (var < np.float32(p.shadow_spread**2))

    def decide(self, x: np.ndarray, bg: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        """Foreground mask of one frame, and the feedback update.

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        bg : ndarray, shape (h, w), float32
            Its background.
        sigma : ndarray, shape (h, w), float32
            The background's per-pixel spread (:func:`pixel_spread`).

        Returns
        -------
        ndarray, shape (h, w), bool
            The post-processed foreground mask.
        """
        p = self.params
        lo, hi = self.band(bg, sigma)
        dark = x < lo
        if p.shadow and dark.any():
            dark &= ~self.shadow(x, bg)
        raw = dark | (x > hi)
        if p.blink_gain > 0:
            objects = self.prev_obj
            if p.object_margin > 1:
                objects = cv2.dilate(objects.view(np.uint8), square(p.object_margin)).view(bool)
            counted = (raw != self.prev_raw) & ~objects
            self.v -= np.float32(p.blink_down)
            self.v[counted] += np.float32(p.blink_up + p.blink_down)
            np.clip(self.v, 0, p.blink_max, out=self.v)
        mask = postprocess(raw, *self.post)
        self.prev_raw, self.prev_obj = raw, mask
        return mask
