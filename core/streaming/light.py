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
   the model would judge the frame against without this rule), and by at least
   :data:`MIN_EXPLAINED` of them. Camera jitter misaligns frame and
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
#: Least share of the sampled background pixels that a fit must bring back into their band. A
#: change of light moves much of the frame out of its band at once; a fit that explains fewer
#: pixels is a drift the bands and the frame's offset already follow (a camera's exposure easing
#: over some frames), and mapping the model's whole memory for it costs more than it saves.
MIN_EXPLAINED = 0.05


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


def moments(x: np.ndarray, bg: np.ndarray) -> tuple[int, float, float, float, float]:
    """The sums a least-squares fit of ``x ~ gain * bg + offset`` needs, in float64.

    Parameters
    ----------
    x, bg : ndarray, shape (n,), float32
        Sampled pixels of the frame and of its background, intensity in [0, 1].

    Returns
    -------
    n, sum_x, sum_bg, sum_bg2, sum_bgx : int and four floats
        ``n`` and the sums of ``x``, ``bg``, ``bg^2`` and ``bg x``. The first two are exact in
        float64 (in any order, for intensities in [0, 1] above 4e-6); the products are exact and
        their sums differ with the order of the additions only in the last bits, so the compiled
        sums (:func:`core.streaming.kernels.light_moments`) decide as these do.
    """
    x64, b64 = x.astype(np.float64), bg.astype(np.float64)
    return x.size, float(x64.sum()), float(b64.sum()), float(b64 @ b64), float(b64 @ x64)


def fit(n: int, sum_x: float, sum_bg: float, sum_bg2: float, sum_bgx: float) -> tuple[float, float]:
    """Least-squares ``gain, offset`` of ``x ~ gain * bg + offset`` from their :func:`moments`.

    The moments of values in [0, 1] over a few thousand pixels lose nothing that matters to the
    cancellation in ``E[b^2] - E[b]^2``; a background of one gray level (variance under 1e-8)
    gives a gain of 1 and the mean offset.
    """
    mb, mx = sum_bg / n, sum_x / n
    var = sum_bg2 / n - mb * mb
    if var <= 1e-8:
        return 1.0, mx - mb
    gain = (sum_bgx / n - mb * mx) / var
    return gain, mx - gain * mb


def _fit(x: np.ndarray, bg: np.ndarray) -> tuple[float, float]:
    """:func:`fit` on float32 pixels (1-D), the sums taken in float32 as numpy takes them: the
    gain and offset a change of light is mapped by."""
    return fit(x.size, float(x.sum()), float(bg.sum()), float(np.dot(bg, bg)), float(np.dot(bg, x)))


def sample_step(shape: tuple[int, ...]) -> int:
    """The side of the blocks of which one pixel is sampled (pixels): about :data:`SAMPLED_PIXELS`
    over a frame of ``shape`` (h, w), 6 at 320 x 240."""
    return max(1, int(np.sqrt(shape[0] * shape[1] / SAMPLED_PIXELS)))


def unchanged(m: tuple[int, float, float, float, float], min_gain_change: float = 0.05) -> bool:
    """Whether the sampled background pixels' :func:`moments` already rule a change of light out.

    Most frames stop here, before the robust fit of :func:`detect_light_change`: their
    background's mean brightness is where its model's is (within half the smallest change; a
    change of contrast alone, a gain about the mean, is left to the bands), or the plain fit's
    gain is within half the smallest change of 1 (a drift of the offset, which the frame's
    median offset follows).

    Parameters
    ----------
    m : (n, sum_x, sum_bg, sum_bg2, sum_bgx)
        The :func:`moments` of the sampled background pixels (one in each ``step`` x ``step``
        block, outside the objects).
    min_gain_change : float
        As :func:`detect_light_change`'s.

    Returns
    -------
    bool
        True also when there are fewer than :data:`MIN_PIXELS` of them.
    """
    n, sum_x, sum_bg = m[0], m[1], m[2]
    if n < MIN_PIXELS:
        return True
    mb = sum_bg / n
    if abs(sum_x / n - mb) <= min_gain_change / 2 * mb:
        return True
    gain, _ = fit(*m)
    return abs(gain - 1) <= min_gain_change / 2


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
        band or brings fewer than :data:`MIN_EXPLAINED` of them back into it.
    """
    if step is None:
        step = sample_step(x.shape)
    keep = background[::step, ::step]
    xs, bs = x[::step, ::step][keep], bg[::step, ::step][keep]
    if unchanged(moments(xs, bs), min_gain_change):
        return None
    gain, offset = _fit(xs, bs)
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
    if not (after * 2 <= before and before - after >= MIN_EXPLAINED):
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
        E=None if state.E is None else g * state.E,
    )
