"""The background a new frame is judged against (the ``frame_model`` and ``global_offset`` knobs).

Between refits the window's solution is fixed; each frame's background comes from it in one of
four ways (docs/algorithm.md, "Per-frame cores" and "The moving background"):

- ``"moving"`` (the default, the most accurate measured): ``M``, plus ``A R B^T`` within
  ``fit_reach`` of the dynamic pixels, the frame's core ``R`` fitted robustly on the fixed
  dictionary over the previous mask's background (:func:`moving_background`);
- ``"mean"``: the window's robust mean ``M``;
- ``"last"``: ``M`` plus the low-rank part of the newest window frame, ``A R_N B^T``
  (:func:`last_background`, computed once per installed solution);
- ``"fit"``: ``M + A R B^T`` with the frame's own core ``R`` fitted on the fixed dictionary
  (:func:`core.solver.frame_fit.fit_cores`, ``frame_iters`` iterations).

With ``global_offset`` the frame's median difference from that background is added (clouds,
auto-exposure), taken over the still background (the previous mask's background less the
dynamic pixels, whose leaves or water would bias it) and over one pixel in each 4 x 4 block: a
sixteenth of the cost, the same offset to about 1e-3.

With ``kernel = "numba"`` the moving background's fit, its sum with ``M`` and the offset run as
one compiled call (:func:`core.streaming.kernels.moving_background`), to the same bits.
"""

import cv2
import numpy as np

from core.solver.frame_fit import FrameFitter, fit_cores
from core.solver.penalty import ETA
from core.solver.products import sandwich
from core.solver.state import KDRSDLState
from core.streaming.median import median
from core.streaming.params import BackgroundParams
from core.streaming.postprocess import square

#: Fewest still sampled pixels the global offset is taken over (else it is taken over all).
MIN_STILL = 64

#: The global offset is taken over one pixel in each OFFSET_STEP x OFFSET_STEP block.
OFFSET_STEP = 4

#: The moving background's core is fitted on every FIT_STEP-th row and column (a sixteenth of the
#: pixels, 4,800 at 320 x 240 for the 144 entries of a rank-12 core): the core is the same
#: unknown on any subset of rows and columns, and the fit costs a sixteenth.
FIT_STEP = 4


def last_background(state: KDRSDLState) -> np.ndarray:
    """``M + A R_N B^T`` of the newest frame of a mean-mode solution: (m, n) float32."""
    assert state.M is not None
    return sandwich(state.A, state.R[-1:], state.B)[0] + state.M


def near_dynamic(dynamic: np.ndarray, reach: int) -> np.ndarray:
    """1 within the ``reach`` x ``reach`` square (``fit_reach``, pixels) around each dynamic pixel,
    0 elsewhere: uint8 (m, n) from ``dynamic`` (m, n) bool. Where ``"moving"`` adds the fitted
    low-rank part, and where a refit's ``still_cut`` does not apply (docs/algorithm.md)."""
    near: np.ndarray = cv2.dilate(dynamic.view(np.uint8), square(reach))
    return near


class FitReuse:
    """The moving background's last fitted part, for the frames that reuse it (``fit_refresh``).

    docs/algorithm.md, "The moving background": while fewer than ``fit_refresh_dynamic`` of the
    frame's pixels are dynamic, ``M + A R B^T`` (within ``fit_reach`` of the dynamic pixels, no
    offset) is fitted on one frame in ``fit_refresh`` and reused on the others; a new installed
    solution (a new ``fitter``) or a frame under the gate starts it again.

    Attributes
    ----------
    fitter : FrameFitter or None
        The fitter ``base`` was made with.
    base : ndarray, shape (m, n), float32, or None
        The last fitted background, without the global offset.
    age : int
        Frames that have reused ``base`` since it was fitted.
    """

    def __init__(self) -> None:
        self.fitter: FrameFitter | None = None
        self.base: np.ndarray | None = None
        self.age = 0

    def clear(self) -> None:
        """Forget the kept background: the next frame past the gate is fitted."""
        self.fitter, self.base, self.age = None, None, 0


def moving_background(
    x: np.ndarray,
    state: KDRSDLState,
    p: BackgroundParams,
    lam: float,
    objects: np.ndarray,
    dynamic: np.ndarray,
    fitter: FrameFitter | None,
    offset: bool = False,
    reuse: FitReuse | None = None,
) -> np.ndarray:
    """``M``, plus the frame's own low-rank part near the moving background (``"moving"``).

    docs/algorithm.md, "The moving background": when at least ``fit_min_dynamic`` of the frame
    is dynamic pixels, the frame's core ``R`` is solved on the fixed dictionary by the robust
    updates of Algorithm 1 (:class:`core.solver.frame_fit.FrameFitter`, ``frame_iters``
    iterations) on every ``FIT_STEP``-th row and column, the previous mask's objects held at
    ``M`` (GRASTA's way of keeping objects out of a subspace's fit), and ``A R B^T`` is added
    to ``M`` within the ``fit_reach`` square around each dynamic pixel. While fewer than
    ``fit_refresh_dynamic`` of the pixels are dynamic, that sum is fitted on one frame in
    ``fit_refresh`` and kept in ``reuse`` for the others.

    Parameters
    ----------
    x : ndarray, shape (m, n), float32
        The frame at the processing resolution, intensity in [0, 1].
    state : KDRSDLState
        The installed window solution (mean mode).
    p : core.streaming.params.BackgroundParams
        ``frame_iters``, ``fit_reach``, ``fit_min_dynamic``, ``fit_refresh``,
        ``fit_refresh_dynamic``, ``alpha``.
    lam : float
        The solver's weight of ``|E|_1``.
    objects, dynamic : ndarray, shape (m, n), bool
        The previous frame's post-processed mask, and the dynamic pixels (the decision's blink
        counts above ``dynamic_blink``).
    fitter : FrameFitter or None
        :func:`moving_fitter` of ``state``; None when it has none.
    offset : bool
        Add the global offset too (:func:`global_offset`; with ``kernel = "numba"`` in the same
        compiled call as the fit).
    reuse : FitReuse, optional
        The fitted background kept between frames; without it every frame past the gate is
        fitted.

    Returns
    -------
    ndarray, shape (m, n), float32
        ``state.M`` itself when there is no fit nor offset to add: too few dynamic pixels, or no
        fitter.
    """
    M = state.M
    assert M is not None
    n_dynamic = np.count_nonzero(dynamic)
    if fitter is None or n_dynamic < p.fit_min_dynamic * dynamic.size:
        if reuse is not None:
            reuse.clear()
        return global_offset(x, M, objects, dynamic, p) if offset else M
    if reuse is None or p.fit_refresh == 1 or n_dynamic >= p.fit_refresh_dynamic * dynamic.size:
        if reuse is not None:
            reuse.clear()
        return _fitted(x, state, p, lam, objects, dynamic, fitter, offset)
    if reuse.fitter is fitter and reuse.base is not None and reuse.age + 1 < p.fit_refresh:
        reuse.age += 1
    else:
        reuse.fitter, reuse.base, reuse.age = fitter, _fitted(x, state, p, lam, objects, dynamic, fitter, False), 0
    return global_offset(x, reuse.base, objects, dynamic, p) if offset else reuse.base


def _fitted(
    x: np.ndarray,
    state: KDRSDLState,
    p: BackgroundParams,
    lam: float,
    objects: np.ndarray,
    dynamic: np.ndarray,
    fitter: FrameFitter,
    offset: bool,
) -> np.ndarray:
    """:func:`moving_background` past its gates: the frame's fit, a new array."""
    M = state.M
    assert M is not None
    if _compiled(p):  # the same bits in one compiled call (core.streaming.kernels)
        f = fitter
        near = near_dynamic(dynamic, p.fit_reach)
        out: np.ndarray = _kernels().moving_background(
            x, M, objects, dynamic, near, state.A, state.B, FIT_STEP,
            f.A, f.B, f.P, f.Q, f.ab, f.AtA_inv, f.BtB_inv,
            ETA, float(lam), float(p.alpha), float(state.mu), float(state.mu / state.muK), 2.0, p.frame_iters,
            OFFSET_STEP, MIN_STILL if offset else -1,
        )  # fmt: skip
        return out
    s = FIT_STEP
    Xc = x[::s, ::s] - M[::s, ::s]
    Xc[objects[::s, ::s]] = 0  # the previous objects held at M
    R = fitter.fit(
        Xc,
        lam=lam,
        alpha=p.alpha,
        mu_end=state.mu,
        mu_ratio=state.mu / state.muK,
        rho=2.0,
        max_iter=p.frame_iters,
    )
    near = near_dynamic(dynamic, p.fit_reach)  # 0 / 1
    bg = state.A @ R @ state.B.T
    bg *= near  # the low-rank part within fit_reach of a dynamic pixel, 0 elsewhere
    bg += M
    return global_offset(x, bg, objects, dynamic, p) if offset else bg


def global_offset(
    x: np.ndarray, bg: np.ndarray, objects: np.ndarray | None, dynamic: np.ndarray | None, p: BackgroundParams
) -> np.ndarray:
    """``bg`` plus the frame's median difference from it (``global_offset``), a new array.

    Taken over one pixel in each ``OFFSET_STEP`` x ``OFFSET_STEP`` block: the still background
    (in neither ``objects`` nor ``dynamic``) when at least ``MIN_STILL`` of those pixels are, else
    all of them (and all of them when ``objects`` and ``dynamic`` are None).

    Parameters
    ----------
    x, bg : ndarray, shape (m, n), float32
        The frame and its background, intensity in [0, 1].
    objects, dynamic : ndarray, shape (m, n), bool, or None
        The previous frame's mask and the dynamic pixels (both or neither).
    p : core.streaming.params.BackgroundParams
        ``kernel``: ``"numba"`` computes it in one compiled call, to the same bits.

    Returns
    -------
    ndarray, shape (m, n), float32
    """
    s = OFFSET_STEP
    if _compiled(p) and objects is not None and dynamic is not None:
        out: np.ndarray = _kernels().global_offset(x, bg, objects, dynamic, s, MIN_STILL)
        return out
    d = x[::s, ::s] - bg[::s, ::s]
    if objects is not None and dynamic is not None:
        keep = ~(objects[::s, ::s] | dynamic[::s, ::s])
        if np.count_nonzero(keep) >= MIN_STILL:
            d = d[keep]
    return bg + np.float32(median(d.ravel()))


def moving_fitter(state: KDRSDLState) -> FrameFitter | None:
    """The fitter of ``"moving"`` for an installed solution (once per solution).

    Returns
    -------
    FrameFitter or None
        On every ``FIT_STEP``-th row of ``A`` and of ``B``; None when the dictionary is at
        another resolution than ``M`` (coarse refits, ``refit_scale`` > 1): the frame is then
        judged against ``M``.
    """
    assert state.M is not None
    m, n = state.M.shape
    if state.A.shape[0] != m or state.B.shape[0] != n:
        return None
    return FrameFitter(state.A[::FIT_STEP], state.B[::FIT_STEP])


def frame_background(
    x: np.ndarray,
    state: KDRSDLState,
    p: BackgroundParams,
    lam: float,
    last: np.ndarray | None,
    objects: np.ndarray | None = None,
    dynamic: np.ndarray | None = None,
    fitter: FrameFitter | None = None,
    reuse: FitReuse | None = None,
) -> np.ndarray:
    """The background of frame ``x``.

    Parameters
    ----------
    x : ndarray, shape (m, n), float32
        The frame at the processing resolution, intensity in [0, 1].
    state : KDRSDLState
        The installed window solution (mean mode).
    p : core.streaming.params.BackgroundParams
        ``frame_model``, ``frame_iters``, ``alpha``, ``global_offset``; ``fit_reach`` and
        ``fit_min_dynamic`` (``"moving"``).
    lam : float
        The solver's regularisation weight (``"moving"``, ``"fit"``).
    last : ndarray, shape (m, n), or None
        :func:`last_background` of ``state`` (``"last"``).
    objects, dynamic : ndarray, shape (m, n), bool, optional
        The previous frame's mask and the dynamic pixels (both or neither; None before the
        decision has judged a frame). The still background, the pixels in neither, is what the
        global offset is the median over, when at least ``MIN_STILL`` of the sampled pixels
        are; else over every sampled pixel. ``"moving"`` is ``"mean"`` without them.
    fitter : FrameFitter, optional
        :func:`moving_fitter` of ``state`` (``"moving"``; without it, ``"mean"``).
    reuse : FitReuse, optional
        ``"moving"``'s fitted background kept between frames (``fit_refresh``).

    Returns
    -------
    ndarray, shape (m, n), float32
    """
    assert state.M is not None
    if p.frame_model == "moving":
        if objects is not None and dynamic is not None:
            return moving_background(x, state, p, lam, objects, dynamic, fitter, p.global_offset, reuse)
        bg = state.M
    elif p.frame_model == "mean":
        bg = state.M
    elif p.frame_model == "last":
        assert last is not None
        bg = last
    else:
        fit = fit_cores(
            state.A,
            state.B,
            (x - state.M)[None],
            lam=lam,
            alpha=p.alpha,
            mu_end=state.mu,
            mu_ratio=state.mu / state.muK,
            rho=2.0,
            max_iter=p.frame_iters,
        )
        bg = sandwich(state.A, fit.R, state.B)[0] + state.M
    return global_offset(x, bg, objects, dynamic, p) if p.global_offset else bg


def _kernels():
    """:mod:`core.streaming.kernels`, imported at the first compiled frame (numba costs memory a
    numpy model never needs)."""
    from core.streaming import kernels

    return kernels


def _compiled(p: BackgroundParams) -> bool:
    """Whether this frame's steps run compiled: ``kernel = "numba"`` and the kernels loaded
    (:func:`core.streaming.kernels.ready`; the numpy reference until then, to the same bits)."""
    return p.kernel == "numba" and _kernels().ready()
