"""The background a new frame is judged against (the ``frame_model`` and ``global_offset`` knobs).

Between refits the window's solution is fixed; each frame's background comes from it in one of
three ways (docs/algorithm.md, "Per-frame cores"):

- ``"mean"`` (the default, the most accurate measured): the window's robust mean ``M``;
- ``"last"``: ``M`` plus the low-rank part of the newest window frame, ``A R_N B^T``
  (:func:`last_background`, computed once per installed solution);
- ``"fit"``: ``M + A R B^T`` with the frame's own core ``R`` fitted on the fixed dictionary
  (:func:`core.solver.frame_fit.fit_cores`, ``frame_iters`` iterations).

With ``global_offset`` the frame's median difference from that background is added (clouds,
auto-exposure), taken over the still background (the previous mask's background less the
dynamic pixels, whose leaves or water would bias it) and over one pixel in each 4 x 4 block: a
sixteenth of the cost, the same offset to about 1e-3.
"""

import numpy as np

from core.solver.frame_fit import fit_cores
from core.solver.products import sandwich
from core.solver.state import KDRSDLState
from core.streaming.median import median
from core.streaming.params import BackgroundParams

#: Fewest still sampled pixels the global offset is taken over (else it is taken over all).
MIN_STILL = 64


def last_background(state: KDRSDLState) -> np.ndarray:
    """``M + A R_N B^T`` of the newest frame of a mean-mode solution: (m, n) float32."""
    assert state.M is not None
    return sandwich(state.A, state.R[-1:], state.B)[0] + state.M


def frame_background(
    x: np.ndarray,
    state: KDRSDLState,
    p: BackgroundParams,
    lam: float,
    last: np.ndarray | None,
    still: np.ndarray | None = None,
) -> np.ndarray:
    """The background of frame ``x``.

    Parameters
    ----------
    x : ndarray, shape (m, n), float32
        The frame at the processing resolution, intensity in [0, 1].
    state : KDRSDLState
        The installed window solution (mean mode).
    p : core.streaming.params.BackgroundParams
        ``frame_model``, ``frame_iters``, ``alpha``, ``global_offset``.
    lam : float
        The solver's regularisation weight (``"fit"``).
    last : ndarray, shape (m, n), or None
        :func:`last_background` of ``state`` (``"last"``).
    still : ndarray, shape (m, n), bool, optional
        The still background (the previous mask's background, less the dynamic pixels): the
        global offset is the median over those, when at least ``MIN_STILL`` of the sampled
        pixels are; else over every sampled pixel.

    Returns
    -------
    ndarray, shape (m, n), float32
    """
    assert state.M is not None
    if p.frame_model == "mean":
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
    if p.global_offset:
        d = x[::4, ::4] - bg[::4, ::4]
        if still is not None:
            keep = still[::4, ::4]
            if np.count_nonzero(keep) >= MIN_STILL:
                d = d[keep]
        bg = bg + np.float32(median(d.ravel()))
    return bg
