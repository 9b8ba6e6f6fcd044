"""Everything a warm start of Algorithm 1 needs, and sliding it along a video."""

from dataclasses import dataclass, replace
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class KDRSDLState:
    """The variables of Algorithm 1 (Bahri et al., ICCV 2017) after a solve.

    Pass it as ``init=`` to :func:`core.solver.kdrsdl` to warm-start. The slices
    (first axis of ``K, R, E, Lam, Y``) belong to the first ``N_state`` frames
    of the next call's ``X``; frames after those are new and get initialised
    from ``A``, ``B`` (see :func:`core.solver.kdrsdl`).

    Attributes
    ----------
    A : ndarray, shape (m, r)
        Left (row, mode-1) factor of the dictionary ``B (x) A``.
    B : ndarray, shape (n, r)
        Right (column, mode-2) factor.
    K : ndarray, shape (N_state, r, r)
        The split (Stein) variable of the cores.
    R : ndarray, shape (N_state, r, r)
        The sparse (soft-thresholded) cores; ``L_i = M + A R_i B^T``.
    E : ndarray, shape (N_state, m, n), or None
        The sparse error (foreground) slices. Kept for the caller; a warm
        start does not read it (its first E step makes E afresh), so a caller
        that keeps the state only to warm-start may drop it (None).
    Lam : ndarray, shape (N_state, m, n)
        Unscaled Lagrange multipliers of ``X_i = A K_i B^T + E_i`` (Lambda).
    Y : ndarray, shape (N_state, r, r)
        Unscaled Lagrange multipliers of ``R_i = K_i``.
    M : ndarray, shape (m, n), or None
        The robust mean (mean mode), None when mean mode is off.
    mu, muK : float
        Penalty parameters reached at the end of the solve.
    muK0 : float
        ``muK`` of the cold start; caps ``muK`` at ``1e7 * muK0`` (paper Section 4).
    """

    A: np.ndarray
    B: np.ndarray
    K: np.ndarray
    R: np.ndarray
    E: Optional[np.ndarray]
    Lam: np.ndarray
    Y: np.ndarray
    M: Optional[np.ndarray]
    mu: float
    muK: float
    muK0: float

    @property
    def n_slices(self) -> int:
        """Number of frames the state holds slices for (int)."""
        return self.K.shape[0]

    @property
    def frame_shape(self) -> tuple[int, int]:
        """Frame shape ``(m, n)`` in pixels (rows, columns)."""
        return (self.A.shape[0], self.B.shape[0])

    @property
    def rank(self) -> int:
        """Dictionary size ``r`` (int)."""
        return self.A.shape[1]


def slide_state(state: KDRSDLState, s: int) -> KDRSDLState:
    """Drop the first ``s`` frames' slices, for a window slid by ``s`` frames.

    ``kdrsdl(X_new, init=slide_state(result.state, s))``, where ``X_new`` is the
    previous window without its first ``s`` frames and with ``s`` new ones
    appended, keeps ``A``, ``B``, ``M`` and the slices (cores and duals) of the
    frames that remain; the solver initialises the ``s`` new slices itself
    (docs/algorithm.md, "Warm start").

    Parameters
    ----------
    state : KDRSDLState
        State of the previous window.
    s : int
        Number of frames dropped from the start, ``0 <= s <= state.n_slices``.

    Returns
    -------
    KDRSDLState
        A new state with ``state.n_slices - s`` slices; arrays are views where
        possible (the input is not modified).

    Raises
    ------
    ValueError
        If ``s`` is not an integer in ``0 .. state.n_slices``.
    """
    if not isinstance(s, (int, np.integer)) or not 0 <= s <= state.n_slices:
        raise ValueError(f"s must be an integer in 0..{state.n_slices}, got {s!r}")
    return replace(
        state,
        K=state.K[s:],
        R=state.R[s:],
        E=None if state.E is None else state.E[s:],
        Lam=state.Lam[s:],
        Y=state.Y[s:],
    )
