"""A change of light, recognised and absorbed at once: a global gain and offset between a frame and
its background, and the model's memory mapped to the new light.

A lamp, a cloud or a camera's infrared switch changes every pixel of the background at once,
roughly as ``x = gain * bg + offset``. The frame's median offset (``global_offset``) follows a small
drift, but a gain leaves dark and bright pixels off by different amounts, and a per-pixel model
then calls most of the frame foreground until its memory has turned over (a window spans 240
frames). Instead, each frame:

1. When the mean brightness of the pixels the previous mask called background (about 2,000, one
   in each ``step`` x ``step`` block) moved by more than half of ``min_gain_change`` (relative),
   ``gain`` and ``offset`` are fitted by least squares on them, twice: the second time without
   the residuals above 3 robust sigmas (the objects the previous mask missed).
2. The fit is taken as a change of light when ``|gain - 1|`` exceeds ``min_gain_change`` and it
   explains the frame: on those pixels, the share outside their band falls at least two-fold
   under ``gain * bg + offset`` from what it is under ``bg`` plus the frame's median offset (what
   the model would judge the frame against without this rule). Camera jitter misaligns frame and
   background, which pulls a least-squares slope towards 0, but such a fit explains nothing, so
   it is not taken.
3. The model's memory is mapped (:func:`map_state`, and each part's own mapping): every window
   frame, the robust mean ``M``, the solver state and the background samples through
   ``gain * . + offset``, the spread through ``gain * .``. The next refit then sees one light, not
   two.

The rule and its measured effect are in docs/algorithm.md, "Light changes".
"""

from dataclasses import dataclass, replace

import numpy as np

from core.solver.state import KDRSDLState
from core.streaming.decision import MAD_TO_SIGMA
from core.streaming.median import median

#: Fewest background pixels (of the sampled ones) a fit is made on.
MIN_PIXELS = 64
#: About this many pixels are sampled for the fit, whatever the frame's size.
SAMPLED_PIXELS = 2000


@dataclass(frozen=True)
class LightChange:
    """A change of light between a frame and its background: ``x = gain * bg + offset``.

    Attributes
    ----------
    gain : float
        Multiplicative change (0.6 = dimmed to 60%).
    offset : float
        Additive change, intensity in [0, 1].
    outside_before, outside_after : float
        Share of the fitted background pixels outside their band under the background plus the
        frame's median offset, and under ``gain * bg + offset`` (in [0, 1]).
    """

    gain: float
    offset: float
    outside_before: float
    outside_after: float

    def then(self, later: "LightChange") -> "LightChange":
        """This change followed by ``later``, as one change (the shares are ``later``'s)."""
        return LightChange(
            later.gain * self.gain, later.gain * self.offset + later.offset, later.outside_before, later.outside_after
        )


def _fit(x: np.ndarray, bg: np.ndarray) -> tuple[float, float]:
    """Least-squares ``gain, offset`` of ``x ~ gain * bg + offset`` (1-D float arrays).

    From the sums (four reductions, no temporaries): the moments of values in [0, 1] over a few
    thousand pixels lose nothing that matters to the cancellation in ``E[b^2] - E[b]^2``.
    """
    n = x.size
    mb, mx = float(bg.sum()) / n, float(x.sum()) / n
    var = float(np.dot(bg, bg)) / n - mb * mb
    if var <= 1e-8:
        return 1.0, mx - mb
    gain = (float(np.dot(bg, x)) / n - mb * mx) / var
    return gain, mx - gain * mb


def detect_light_change(
    x: np.ndarray,
    bg: np.ndarray,
    half: np.ndarray | float,
    background: np.ndarray,
    min_gain_change: float = 0.05,
    step: int | None = None,
) -> LightChange | None:
    """The change of light between a frame and its background, if there is one.

    Parameters
    ----------
    x : ndarray, shape (h, w), float32
        The frame, intensity in [0, 1].
    bg : ndarray, shape (h, w), float32
        Its background (the window's robust mean ``M``).
    half : ndarray, shape (h, w), float32, or float
        Half-width of each pixel's band (intensity): a pixel farther than this from its
        background is outside it.
    background : ndarray, shape (h, w), bool
        Pixels the previous mask called background: the fit uses those only.
    min_gain_change : float
        Smallest ``|gain - 1|`` taken as a change of light.
    step : int, optional
        One pixel in each ``step`` x ``step`` block is used (pixels); default: the step that
        samples about ``SAMPLED_PIXELS`` (6 at 320 x 240).

    Returns
    -------
    LightChange or None
        None when the mean brightness of the background pixels moved by less than half of
        ``min_gain_change`` (relative), the gain is within ``min_gain_change`` of 1, too few
        background pixels were seen, or the fit does not halve the share of pixels outside their
        band.
    """
    if step is None:
        step = max(1, int(np.sqrt(x.size / SAMPLED_PIXELS)))
    keep = background[::step, ::step]
    xs, bs = x[::step, ::step][keep], bg[::step, ::step][keep]
    if xs.size < MIN_PIXELS:
        return None
    # most frames: the background's mean brightness is where it was (within half the smallest
    # change), so there is nothing to fit; a change of contrast alone (gain about the mean) is
    # thus left to the bands
    mb = float(bs.sum()) / bs.size
    if abs(float(xs.sum()) / xs.size - mb) <= min_gain_change / 2 * mb:
        return None
    gain, offset = _fit(xs, bs)
    if abs(gain - 1) <= min_gain_change / 2:  # the plain fit near 1: the robust pass is not needed
        return None
    resid = xs - (gain * bs + offset)
    med = float(median(resid))
    mad = float(median(np.abs(resid - med)))
    inliers = np.abs(resid - med) <= 3 * MAD_TO_SIGMA * max(mad, 1e-4)
    if inliers.sum() >= MIN_PIXELS:
        gain, offset = _fit(xs[inliers], bs[inliers])
    if abs(gain - 1) <= min_gain_change or not np.isfinite(gain) or not np.isfinite(offset):
        return None
    hs = half if np.ndim(half) == 0 else np.asarray(half)[::step, ::step][keep]
    before = float(np.mean(np.abs(xs - bs - median(xs - bs)) > hs))
    after = float(np.mean(np.abs(xs - (np.float32(gain) * bs + np.float32(offset))) > hs))
    if not after * 2 <= before:
        return None
    return LightChange(gain, offset, before, after)


def map_state(state: KDRSDLState, change: LightChange) -> KDRSDLState:
    """A solver state for frames in the new light: ``x -> gain * x + offset``.

    With ``X_i = M + A R_i B^T + E_i``, the mapped frames are ``(gain M + offset) + A (gain R_i)
    B^T + gain E_i``: ``M`` is mapped, the cores ``R``, ``K`` and ``E`` scaled; ``A``, ``B``,
    the penalties and the duals (bounded by ``lam`` and ``alpha`` whatever the scale) are kept.

    Parameters
    ----------
    state : KDRSDLState
    change : LightChange

    Returns
    -------
    KDRSDLState
        A new state (the input is not modified).
    """
    g, b = np.float32(change.gain), np.float32(change.offset)
    return replace(
        state,
        M=None if state.M is None else g * state.M + b,
        R=g * state.R,
        K=g * state.K,
        E=g * state.E,
    )
