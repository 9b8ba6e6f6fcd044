"""Window refits at a coarser resolution than the per-frame decision (``refit_scale``).

A refit's cost is in passes over the window's pixels (docs/algorithm.md, "Cost and layout"), so
solving KDRSDL on the window reduced by 2 on each side costs about a quarter; with the lift's own
passes at the full size, a refit costs 0.3-0.45x (docs/results.md, "Cameras per core"). The per-frame
decision still needs the background ``M``, the spread and the samples at the processing
resolution, with its edges and texture. :func:`lift` brings them back from the coarse solution
(docs/algorithm.md, "Coarse refits"):

1. The foreground support. A coarse sample with ``|E| > e_cut`` marks its block (2 x 2 at scale 2;
   nearest neighbour), dilated by one pixel, so that no object edge counts as background.
2. ``M = up(M_c) + mean over the background samples of (X_i - up(X_c,i))``. The coarse robust
   mean ``M_c`` gives the low frequencies. The detail the reduction removed comes from the frames
   where the pixel is background. ``up`` is bilinear interpolation.
3. ``E_i = shrink(X_i - M - up(A R_i B^T), lam / mu)``, the solver's E step at the processing
   resolution, with the coarse low-rank part. The spread and the samples read its support.

The weight of R. The data term of a coarse solve sums over a quarter of the pixels, so the
same ``alpha`` weighs ``|R|_1`` four times as much against it and shrinks the dictionary. Measured
(docs/algorithm.md, "Coarse refits"): with ``alpha`` unchanged, an object that stops is held as
foreground for good (its samples stay in E, the spread stays narrow, and the conditional update
keeps the object out of the window), and under a strong drift of the light the dictionary
collapses to 0; ``alpha / 4`` loses 0.04 F on office. A coarse refit uses ``alpha / scale``.

The warm start keeps solving at the coarse resolution: the state keeps the coarse A, B, cores, E
and duals, and the lifted M. The next refit reduces that M again (:func:`coarse_init`).
"""

import dataclasses

import cv2
import numpy as np

from core.solver.kdrsdl import KDRSDLResult
from core.solver.products import sandwich
from core.solver.prox import shrink
from core.solver.state import KDRSDLState
from core.streaming.resolution import reduce

#: Side of the square by which the coarse foreground support is dilated at the processing
#: resolution, pixels (3: one pixel around each flagged 2 x 2 block).
SUPPORT_DILATION = 3


def reduce_window(X: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Every frame of ``X`` (N, h, w) float32 reduced to ``shape`` by area averaging.

    Returns
    -------
    ndarray, shape (N,) + ``shape``, float32, C-contiguous
    """
    out = np.empty((X.shape[0],) + tuple(shape), np.float32)
    for i, frame in enumerate(X):
        out[i] = reduce(frame, shape)
    return out


def coarse_init(init: KDRSDLState, shape: tuple[int, int]) -> KDRSDLState:
    """A warm start for a coarse refit: the state with its (lifted) M reduced to ``shape``."""
    if init.M is None or init.M.shape == tuple(shape):
        return init
    return dataclasses.replace(init, M=reduce(np.ascontiguousarray(init.M, np.float32), shape))


def _up(image: np.ndarray, shape: tuple[int, int], interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    return cv2.resize(image, (shape[1], shape[0]), interpolation=interpolation)


def lift(
    X: np.ndarray, Xc: np.ndarray, result: KDRSDLResult, lam: float, e_cut: float
) -> tuple[np.ndarray, np.ndarray]:
    """The background ``M`` and sparse part ``E`` of window ``X`` from its coarse solution.

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32
        The window at the processing resolution, intensity in [0, 1].
    Xc : ndarray, shape (N, mc, nc), float32
        The same window as the refit solved it (:func:`reduce_window`).
    result : core.solver.kdrsdl.KDRSDLResult
        KDRSDL's mean-mode solution of ``Xc`` (``A`` (mc, r), ``R`` (N, r, r), ``E`` like
        ``Xc``, ``M`` (mc, nc), ``state.mu``).
    lam : float
        The solver's weight of ``|E|_1``: the E step's threshold is ``lam / mu``.
    e_cut : float
        Intensity above which a coarse sample of ``E`` marks foreground (the knob ``e_cut``).

    Returns
    -------
    M : ndarray, shape (m, n), float32
        The robust mean at the processing resolution (steps 1-2 of the module's docstring).
    E : ndarray, shape (N, m, n), float32
        The sparse part at the processing resolution (step 3).

    Raises
    ------
    ValueError
        If the shapes of ``X``, ``Xc`` and the result do not agree, or the result has no ``M``.
    """
    N, m, n = X.shape
    if Xc.shape[0] != N or result.E.shape != Xc.shape or result.M is None or result.M.shape != Xc.shape[1:]:
        raise ValueError(f"a coarse solution of {Xc.shape} (E {result.E.shape}) does not fit a window of {X.shape}")
    shape = (m, n)
    kernel = np.ones((SUPPORT_DILATION, SUPPORT_DILATION), np.uint8)
    flagged = (np.abs(result.E) > e_cut).view(np.uint8)
    detail = np.zeros(shape, np.float32)
    count = np.zeros(shape, np.float32)
    for i in range(N):
        background = cv2.dilate(_up(flagged[i], shape, cv2.INTER_NEAREST), kernel) == 0
        d = X[i] - _up(Xc[i], shape)
        detail += np.where(background, d, np.float32(0))
        count += background
    M = _up(result.M, shape)
    M += detail / np.maximum(count, np.float32(1))
    low_rank = sandwich(result.A, result.R, result.B)
    E = np.empty_like(X)
    for i in range(N):
        np.subtract(X[i], M, out=E[i])
        E[i] -= _up(low_rank[i], shape)
    shrink(E, lam / result.state.mu, out=E)
    return M, E
