"""The per-pixel foreground decision of the streaming model.

A pixel x of a frame is foreground when it leaves its background band::

    h(p)  = max(k_sigma * sigma(p), floor) * (1 + blink_gain * v(p))
    fg(p) = x(p) < min_{q in N(p)} (bg(q) - h(q))  or  x(p) > max_{q in N(p)} (bg(q) + h(q))

- ``sigma(p)`` is the background's own spread at p, estimated at each window refit from the
  window's deviations from the robust mean ``M``, leaving out the samples that KDRSDL put in
  the sparse part ``E`` (they are foreground, not background variation): :func:`pixel_spread`.
- ``N(p)`` is a square neighbourhood (spatial tolerance) where the background is seen to move
  (``v(p)`` above ``tolerance_blink``), and p alone elsewhere: a pixel matching the background of
  a neighbour is background, which absorbs camera jitter and swaying edges, while the edges of
  objects over a still background are not eroded.
- ``v(p)`` counts how often p's raw decision flips outside the objects of the previous frame:
  a moving background (water, leaves) makes a decision blink, an object keeps it on. The band
  widens where decisions blink. The idea is SuBSENSE's feedback on per-pixel distance
  thresholds (St-Charles, Bilodeau and Bergevin, IEEE TIP 2015); the rule here is our own.
- A pixel that leaves its band but matches its background samples
  (:mod:`core.streaming.samples`: values the model called background, at the frame rate) is
  background after all: the band is one mode, the samples hold them all (a leaf and the sky).
- A pixel darker than its band by a ratio that is uniform over its neighbourhood is a cast
  shadow (:meth:`PixelDecision.shadow`).
"""

from dataclasses import dataclass

import cv2
import numpy as np

from core.streaming.median import median
from core.streaming.params import BackgroundParams
from core.streaming.postprocess import grow, square
from core.streaming.samples import SampleSet, flat

#: 1 / Phi^-1(3/4): turns a median absolute deviation into a Gaussian sigma.
MAD_TO_SIGMA = 1.4826

#: sqrt(pi / 2): turns a mean absolute deviation into a Gaussian sigma.
MEAN_ABS_TO_SIGMA = 1.2533


def pixel_spread(
    X: np.ndarray,
    M: np.ndarray,
    E: np.ndarray,
    e_cut: float,
    fg: np.ndarray | None = None,
    far: np.ndarray | None = None,
) -> np.ndarray:
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
    fg : ndarray, shape (N, m, n), bool, optional
        Samples the model itself called foreground when they entered: left out too.
    far : ndarray, shape (N, m, n), bool, optional
        Samples flagged as ``E``'s are (a still pixel's beyond ``pixel_floor`` from ``M``,
        :func:`core.streaming.refit.solve_window`): left out too.

    Returns
    -------
    ndarray, shape (m, n), float32
        ``sqrt(pi/2)`` times the mean absolute deviation from ``M`` of the kept samples
        (the Gaussian sigma); 0 where every sample was left out (the floor then applies).
    """
    # one window-sized float array at a time (a refit's peak of memory): made and zeroed in place
    dev = np.subtract(X, M[None], dtype=np.float32)
    np.abs(dev, out=dev)
    keep = (E <= e_cut) & (E >= -e_cut)  # |E| <= e_cut
    if fg is not None:
        keep &= ~fg
    if far is not None:
        keep &= ~far
    n = keep.sum(axis=0)
    np.multiply(dev, keep, out=dev)  # a sample left out counts +0 (dev >= 0)
    total = dev.sum(axis=0, dtype=np.float32)
    return (MEAN_ABS_TO_SIGMA * total / np.maximum(n, 1)).astype(np.float32)


#: The model's knobs at their defaults: the decision's own defaults come from them, so that each
#: knob is declared once (core.streaming.params).
_DEFAULTS = BackgroundParams()


@dataclass
class DecisionParams:
    """Knobs of :class:`PixelDecision`.

    The fields that are also model knobs (``k_sigma``, ``floor`` = ``pixel_floor``,
    ``tolerance``, ``tolerance_blink``, ``blink_gain``, ``shadow``) default to the knob's
    default; :meth:`from_knobs` takes them from a model's parameters.

    Attributes
    ----------
    k_sigma : float
        Band half-width in multiples of the pixel's sigma.
    floor : float
        Smallest band half-width (intensity in [0, 1]; 0.06 = 15 gray levels).
    tolerance : int
        Side (pixels) of the neighbourhood N(p); 1 = none.
    tolerance_blink : float
        N(p) applies where the blink count v exceeds this (the background moves or the camera
        shakes there); 0 = at every pixel.
    blink_gain : float
        Band widening per unit of the blink count v.
    blink_up, blink_down, blink_max : float
        v rises by ``blink_up`` at a counted flip, falls by ``blink_down`` otherwise, and stays
        in ``[0, blink_max]``.
    object_margin : int
        Side (pixels) of the dilation of the previous frame's objects inside which flips are
        not counted (an object's moving edge is not a moving background).
    shadow : bool
        Veto cast shadows (:meth:`PixelDecision.shadow`) among the pixels darker than the band.
    shadow_ratio : (float, float)
        Open interval of the ratio x / bg that a shadow may have (it darkens by 8-30%).
    shadow_spread : float
        Largest standard deviation of that ratio, smoothed over ``shadow_smooth`` x
        ``shadow_smooth`` pixels, over the ``shadow_window`` x ``shadow_window`` neighbourhood
        (pixels): a shadow scales the background uniformly.
    shadow_smooth : int
        Side (pixels) of the box filter applied to the ratio before its spread is taken (the
        noise of one pixel's ratio, JPEG's included, is 0.03-0.05 on CDnet's shadows); 1 = none.
    dynamic_blink : float
        Blink count above which a pixel is dynamic (its background moves): the sample
        consensus also looks at its neighbours' samples there, and learns faster
        (:mod:`core.streaming.samples`).
    compiled : bool
        Run the band, the consensus and the blink counts as compiled loops
        (:mod:`core.streaming.kernels`, the knob ``kernel``); with ``tolerance > 1`` the numpy
        reference runs either way.
    """

    k_sigma: float = _DEFAULTS.k_sigma
    floor: float = _DEFAULTS.pixel_floor
    tolerance: int = _DEFAULTS.tolerance
    tolerance_blink: float = _DEFAULTS.tolerance_blink
    blink_gain: float = _DEFAULTS.blink_gain
    blink_up: float = 1.0
    blink_down: float = 0.1
    blink_max: float = 20.0
    object_margin: int = 5
    shadow: bool = _DEFAULTS.shadow
    shadow_ratio: tuple = (0.7, 0.92)
    shadow_spread: float = 0.05
    shadow_window: int = 5
    shadow_smooth: int = 3
    dynamic_blink: float = _DEFAULTS.dynamic_blink
    compiled: bool = _DEFAULTS.kernel == "numba"

    @classmethod
    def from_knobs(cls, p: BackgroundParams) -> "DecisionParams":
        """The decision's knobs as a model's parameters set them; the others at their defaults."""
        return cls(
            k_sigma=p.k_sigma,
            floor=p.pixel_floor,
            tolerance=p.tolerance,
            tolerance_blink=p.tolerance_blink,
            blink_gain=p.blink_gain,
            shadow=p.shadow,
            dynamic_blink=p.dynamic_blink,
            compiled=p.kernel == "numba",
        )


class PixelDecision:
    """Per-pixel bands with blink feedback; holds the per-pixel state across frames.

    Each frame: :meth:`raw` (the bands, the shadow veto and the sample consensus of
    :mod:`core.streaming.samples`), then the caller's post-processing, then :meth:`feedback`
    with both masks.

    Parameters
    ----------
    shape : (int, int)
        Frame shape (h, w) in pixels.
    params : DecisionParams

    Attributes
    ----------
    v : ndarray, shape (h, w), float32
        Blink counts.
    prev_raw, prev_obj : ndarray, shape (h, w), bool
        The previous frame's raw and post-processed masks.
    dynamic : ndarray, shape (h, w), bool
        Pixels whose blink count exceeds ``dynamic_blink`` (updated by :meth:`feedback`).
    widen : ndarray, shape (h, w), float32, or None
        The band's blink widening ``1 + blink_gain v`` at the last :meth:`raw` (None without
        feedback, and with the compiled kernels, which widen inside their loop).
    """

    #: Arrays a checkpoint stores: attribute name -> dtype.
    STATE = {"v": np.float32, "prev_raw": bool, "prev_obj": bool}

    def __init__(self, shape: tuple[int, int], params: DecisionParams) -> None:
        self.params = params
        self.shape = shape
        self.v = np.zeros(shape, np.float32)
        self.prev_raw = np.zeros(shape, bool)
        self.prev_obj = np.zeros(shape, bool)
        self.dynamic = np.zeros(shape, bool)
        self.widen: np.ndarray | None = None
        #: The last raw decision's pixels below their band within the shadow test's ratio (before
        #: its uniformity), bool (h, w): those the post-processing never restores.
        self.shaded: np.ndarray = np.zeros(shape, bool)
        self._half: tuple[np.ndarray, np.ndarray] | None = None  # (sigma, its half-width before blink widening)
        self._kernels = None  # core.streaming.kernels when the compiled loops run
        if params.compiled and params.tolerance <= 1:
            from core.streaming import kernels  # imported here: numba costs memory a numpy model never needs

            self._kernels = kernels

    # ----------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, np.ndarray]:
        """The per-pixel state as named arrays (:data:`STATE`); not copied."""
        return {name: getattr(self, name) for name in self.STATE}

    def load(self, state: dict[str, np.ndarray]) -> None:
        """Take back what :meth:`state` gave.

        Raises
        ------
        ValueError
            If an array is missing, of another shape or non-finite.
        """
        arrays = {}
        for name, dtype in self.STATE.items():
            a = np.asarray(state[name], dtype=dtype)
            if a.shape != self.shape or not np.isfinite(a).all():
                raise ValueError(f"decision state {name} of shape {a.shape} does not fit frames of {self.shape}")
            arrays[name] = a.copy()
        for name, a in arrays.items():
            setattr(self, name, a)
        self.dynamic = self.v > np.float32(self.params.dynamic_blink)

    # ----------------------------------------------------------------- the bands
    def half(self, sigma: np.ndarray) -> np.ndarray:
        """Half-width of each pixel's band before blink widening, ``max(k_sigma sigma, floor)``,
        float32 (h, w) (kept until ``sigma`` changes, at the next refit)."""
        p = self.params
        if self._half is None or self._half[0] is not sigma:
            self._half = (sigma, np.maximum(np.float32(p.k_sigma) * sigma, np.float32(p.floor)))
        return self._half[1]

    def band(self, bg: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper ends of the background band, each float32 (h, w)."""
        p = self.params
        h = self.half(sigma)
        self.widen = None
        if p.blink_gain > 0:
            widen = np.multiply(self.v, np.float32(p.blink_gain))
            widen += 1
            self.widen = widen
            h = widen * h
        lo, hi = bg - h, bg + h
        if p.tolerance > 1:
            k = square(p.tolerance)
            if p.tolerance_blink > 0:
                moving = (self.v > np.float32(p.tolerance_blink)).view(np.uint8)
                # cv2.copyTo writes in place where the mask is set (np.where is 25x slower here)
                cv2.copyTo(cv2.erode(lo, k), moving, lo)
                cv2.copyTo(cv2.dilate(hi, k), moving, hi)
            else:
                lo, hi = cv2.erode(lo, k), cv2.dilate(hi, k)
        return lo, hi

    def shadow(self, x: np.ndarray, bg: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        """Pixels that look like a cast shadow on the background, bool (h, w): darker by a ratio
        that is uniform over the neighbourhood (a shadow scales the background's texture; an
        object replaces it).

        Only pixels of ``where`` (bool (h, w); None = everywhere) are tested; the others are
        False. The uniformity is computed only over the bounding box of the candidates (pixels
        of ``where`` within the ratio range) that survive a 3 x 3 erosion, with a margin of half
        the window: a shadow is a region, and most frames' candidates are specks of noise.
        """
        return self._uniform(x, bg, self._in_ratio(x, bg, where))

    def _in_ratio(self, x: np.ndarray, bg: np.ndarray, where: np.ndarray | None) -> np.ndarray:
        """Pixels of ``where`` (None = everywhere) whose ``x / bg`` lies within ``shadow_ratio``,
        bool (h, w), a new array (the ratio test, without dividing)."""
        lo, hi = self.params.shadow_ratio
        out = (x > np.float32(lo) * bg) & (x < np.float32(hi) * bg)
        if where is not None:
            out &= where
        return out

    def _uniform(self, x: np.ndarray, bg: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Of the candidates ``out`` (bool (h, w), those within the ratio range; changed in place
        and returned), those whose ratio is uniform over the neighbourhood (:meth:`shadow`)."""
        p = self.params
        seeds = cv2.erode(out.view(np.uint8), square(3))
        c0, r0, bw, bh = cv2.boundingRect(seeds)
        if bw == 0:
            out[:] = False
            return out
        h, w = x.shape
        m = p.shadow_window // 2 + p.shadow_smooth // 2 + 1
        y0, y1, x0, x1 = max(r0 - m, 0), min(r0 + bh + m, h), max(c0 - m, 0), min(c0 + bw + m, w)
        r = x[y0:y1, x0:x1] / np.maximum(bg[y0:y1, x0:x1], np.float32(1 / 255))
        if p.shadow_smooth > 1:  # JPEG and sensor noise: a pixel's own ratio is too noisy to be uniform
            r = cv2.blur(r, (p.shadow_smooth, p.shadow_smooth))
        k = (p.shadow_window, p.shadow_window)
        mean = cv2.blur(r, k)
        uniform = (cv2.blur(r * r, k) - mean * mean) < np.float32(p.shadow_spread**2)
        inside = out[y0:y1, x0:x1] & uniform
        out[:] = False
        out[y0:y1, x0:x1] = inside
        return out

    def raw(self, x: np.ndarray, bg: np.ndarray, sigma: np.ndarray, samples: SampleSet | None = None) -> np.ndarray:
        """The raw foreground of one frame: outside the band, not a shadow, not matched by the samples.

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        bg : ndarray, shape (h, w), float32
            Its background.
        sigma : ndarray, shape (h, w), float32
            The background's per-pixel spread (:func:`pixel_spread`).
        samples : core.streaming.samples.SampleSet, optional
            The background samples: a pixel outside its band that matches them is background
            (its radius widened as its band is; dynamic pixels may match a neighbour's).

        Returns
        -------
        ndarray, shape (h, w), bool
            Before post-processing.
        """
        p = self.params
        if self._kernels is not None and self._kernels.ready():
            return self._raw_compiled(x, bg, sigma, samples)
        lo, hi = self.band(bg, sigma)
        dark = x < lo
        self.shaded = self._in_ratio(x, bg, dark)
        if p.shadow and dark.any():  # shadow(x, bg, dark), its ratio test already done
            dark &= ~self._uniform(x, bg, self.shaded.copy())
        raw = dark | (x > hi)
        if samples is not None:
            raw &= ~samples.match(x, raw, self.widen, self.dynamic)
        return raw

    def _raw_compiled(self, x: np.ndarray, bg: np.ndarray, sigma: np.ndarray, samples: SampleSet | None) -> np.ndarray:
        """:meth:`raw` by :func:`core.streaming.kernels.decide` (the same mask to the bit)."""
        p = self.params
        half = self.half(sigma)
        cand, ratio = np.empty(self.shape, bool), np.empty(self.shape, bool)
        table, ready, radius, matches = _NO_SAMPLES, False, 0.0, 1
        if samples is not None:
            table, ready = samples.samples, samples.ready
            radius, matches = samples.params.radius, samples.params.matches
        lo, hi = p.shadow_ratio
        assert self._kernels is not None
        shadowed = self._kernels.decide(
            flat(x), flat(bg), flat(half), self.v.reshape(-1), np.float32(p.blink_gain), table, ready,
            np.float32(radius), matches, np.float32(p.dynamic_blink), self.shape[1], np.float32(lo), np.float32(hi),
            cand.reshape(-1), ratio.reshape(-1),
        )  # fmt: skip
        self.shaded = ratio
        if p.shadow and shadowed:  # the test may veto a candidate: run it on every pixel of the ratio
            spread2 = np.float32(p.shadow_spread**2)
            self._kernels.uniform_shadow(x, bg, ratio, cand, p.shadow_smooth, p.shadow_window, spread2)
        return cand

    def feedback(self, raw: np.ndarray, mask: np.ndarray, inside: bool = False) -> None:
        """Count the blinks of a frame's raw decision outside the previous frame's objects.

        Parameters
        ----------
        raw : ndarray, shape (h, w), bool
            What :meth:`raw` returned.
        mask : ndarray, shape (h, w), bool
            The same frame's post-processed mask (the next frame's objects).
        inside : bool
            Count the blinks inside the previous frame's objects too (the first
            ``warmup_blink_frames`` frames, docs/algorithm.md, "Ghosts"): what the model then calls
            an object may be a moving background it has not yet seen (leaves against the sky,
            flagged as one blob).
        """
        p = self.params
        if p.blink_gain > 0 and self._kernels is not None and self._kernels.ready():
            self.dynamic = np.empty(self.shape, bool)
            self._kernels.feedback(
                raw, self.prev_raw, self.prev_obj, p.object_margin, inside, self.v,
                np.float32(p.blink_down), np.float32(p.blink_up + p.blink_down), np.float32(p.blink_max),
                np.float32(p.dynamic_blink), self.dynamic,
            )  # fmt: skip
        elif p.blink_gain > 0:
            objects = self.prev_obj
            if inside:
                objects = np.zeros_like(objects)
            else:
                objects = grow(objects, p.object_margin)
            counted = (raw != self.prev_raw) & ~objects
            self.v -= np.float32(p.blink_down)
            # cv2.add with a mask: twice as fast as numpy's boolean-indexed +=
            cv2.add(self.v, p.blink_up + p.blink_down, dst=self.v, mask=counted.view(np.uint8))  # type: ignore[call-overload]
            np.clip(self.v, 0, p.blink_max, out=self.v)
            self.dynamic = self.v > np.float32(p.dynamic_blink)
        self.prev_raw, self.prev_obj = raw, mask


#: What the compiled decision reads for the samples of a model without any.
_NO_SAMPLES = np.zeros((0, 1), np.uint8)


def global_threshold(score: np.ndarray, p: BackgroundParams) -> float:
    """The global decision's threshold on ``|x - L|`` (``decision = "global"``, and every frame
    before the first refit): ``threshold`` when set, else ``max(min_threshold, k_sigma * sigma)``
    with sigma the frame's robust noise (1.4826 times the median score).

    Parameters
    ----------
    score : ndarray, shape (h, w), float32
        ``|x - background|``, intensity in [0, 1].
    p : core.streaming.params.BackgroundParams

    Returns
    -------
    float
        The threshold, intensity in [0, 1].
    """
    if p.threshold is not None:
        return float(p.threshold)
    return max(p.min_threshold, p.k_sigma * MAD_TO_SIGMA * float(median(score.ravel())))
