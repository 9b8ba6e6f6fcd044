"""The model state that checkpoints save, as named arrays, and its checks on the way back.

A snapshot holds everything a restarted subtractor needs to continue a stream as if it had
not stopped: the window of frames and its schedule's counters, the regularisation weight, the
last window solution (:class:`core.solver.KDRSDLState`: A, B, cores, duals, M, penalties), the
background's per-pixel spread and the decision's per-pixel feedback state. :func:`to_arrays`
lays it out for ``numpy.savez``; :func:`from_arrays` checks every array against the model's
knobs before anything is kept, and names what is wrong.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np

from core.solver.state import KDRSDLState
from core.streaming.params import BackgroundParams
from core.streaming.resolution import processing_shape
from core.streaming.window import WindowSchedule

#: Version of the array layout; a checkpoint of another version is refused.
VERSION = 2
#: The counters, in the order of the ``counters`` array.
COUNTERS = WindowSchedule.COUNTERS + ("result_start", "n_frames")
_STATE_ARRAYS = ("A", "B", "K", "R", "E", "Lam", "Y", "M")
_STATE_SCALARS = ("mu", "muK", "muK0")


@dataclass(frozen=True)
class ModelSnapshot:
    """The learnt state of a :class:`core.streaming.background.KDRSDLBackgroundSubtractor`.

    Attributes
    ----------
    frame_shape : (int, int)
        Input frame shape (h, w), pixels.
    window : ndarray, shape (N, m, n), float32
        The window's frames at the solve resolution (m, n), oldest first.
    counters : dict of str to int
        The schedule's counters (:data:`COUNTERS`): ``start``, ``since_entry``, ``since_refit``,
        ``new_since_refit`` (:class:`core.streaming.window.WindowSchedule`), ``result_start``
        (the window start the solution was solved on) and ``n_frames``.
    lam : float
        The regularisation weight in use.
    state : KDRSDLState or None
        The last window solution; None before the first.
    sigma : ndarray, shape (m, n), float32, or None
        The background's per-pixel spread (:func:`core.streaming.decision.pixel_spread`).
    decision : dict of str to ndarray, each of the processing shape, or None
        The per-pixel decision's state (:data:`core.streaming.decision.PixelDecision.STATE`).
    """

    frame_shape: tuple
    window: np.ndarray
    counters: dict
    lam: float
    state: Optional[KDRSDLState] = None
    sigma: Optional[np.ndarray] = None
    decision: Optional[dict] = None


def to_arrays(snap: ModelSnapshot, settings: str) -> dict[str, np.ndarray | np.generic]:
    """The snapshot as named arrays for ``numpy.savez`` (arrays are not copied).

    Parameters
    ----------
    snap : ModelSnapshot
    settings : str
        The knobs a restore must match, as JSON.

    Returns
    -------
    dict of str to ndarray
        ``version``, ``settings``, ``frame_shape`` (2,) int64, ``window``, ``counters``
        (6,) int64, ``lam`` float64, and when present ``state_<name>`` for A, B, K, R, E, Lam,
        Y, M, mu, muK, muK0, ``sigma`` and ``decision_<name>``.
    """
    out: dict[str, np.ndarray | np.generic] = {
        "version": np.int64(VERSION),
        "settings": np.str_(settings),
        "frame_shape": np.asarray(snap.frame_shape, dtype=np.int64),
        "window": snap.window,
        "counters": np.array([snap.counters[name] for name in COUNTERS], dtype=np.int64),
        "lam": np.float64(snap.lam),
    }
    if snap.state is not None:
        for name in _STATE_ARRAYS + _STATE_SCALARS:
            out["state_" + name] = np.asarray(getattr(snap.state, name))
    if snap.sigma is not None:
        out["sigma"] = snap.sigma
    for name, a in (snap.decision or {}).items():
        out["decision_" + name] = a
    return out


def from_arrays(
    ckpt: Mapping[str, np.ndarray], settings: str, params: BackgroundParams, decision_state: Mapping[str, type]
) -> ModelSnapshot:
    """Check a checkpoint's arrays and return the snapshot they hold.

    Parameters
    ----------
    ckpt : mapping of str to ndarray
        What :func:`to_arrays` returned, or ``numpy.load`` of its file.
    settings : str
        The restoring model's knobs as JSON; must equal the checkpoint's.
    params : core.streaming.params.BackgroundParams
        The restoring model's knobs (window size, downscale, decision).
    decision_state : dict of str to dtype
        The decision's state arrays and their dtypes.

    Returns
    -------
    ModelSnapshot

    Raises
    ------
    ValueError
        If the checkpoint is of another layout version, was made with other knobs, or an
        array is missing, of an inconsistent shape or non-finite (the message says which).
    """
    try:
        return _from_arrays(ckpt, settings, params, decision_state)
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"checkpoint is incomplete or malformed: {type(exc).__name__}: {exc}") from None


def _from_arrays(ckpt, settings, params, decision_state):
    if int(ckpt["version"]) != VERSION:
        raise ValueError(f"checkpoint layout version {int(ckpt['version'])}, expected {VERSION}")
    if str(ckpt["settings"]) != settings:
        raise ValueError("checkpoint was made with other model settings")
    shape = tuple(int(v) for v in ckpt["frame_shape"])
    window = np.asarray(ckpt["window"], dtype=np.float32)
    if len(shape) != 2:
        raise ValueError(f"checkpoint frame shape {shape} is not (h, w)")
    proc = processing_shape(shape, params.processing_side)
    small = tuple(side // params.downscale for side in proc)  # the solve resolution of such frames
    if len(shape) != 2 or window.ndim != 3 or window.shape[1:] != small or not 1 <= len(window) <= params.window:
        raise ValueError(f"checkpoint window of shape {window.shape} does not fit frames of {shape}")
    values = [int(v) for v in ckpt["counters"]]
    lam = float(ckpt["lam"])
    if len(values) != len(COUNTERS) or min(values) < 0 or not (np.isfinite(lam) and lam > 0):
        raise ValueError("checkpoint counters or lambda out of range")
    counters = dict(zip(COUNTERS, values, strict=True))
    if not np.isfinite(window).all():
        raise ValueError("checkpoint window holds non-finite values")
    state = sigma = decision = None
    if "state_A" in ckpt:
        state = _state(ckpt, small, params.window)
        if counters["start"] < counters["result_start"]:
            raise ValueError("checkpoint state does not belong to its window")
        if params.decision == "pixel":
            sigma = np.asarray(ckpt["sigma"], dtype=np.float32)
            if sigma.shape != small or not np.isfinite(sigma).all():
                raise ValueError(f"checkpoint sigma of shape {sigma.shape} does not fit frames of {shape}")
    if "decision_v" in ckpt:
        decision = {}
        for name, dtype in decision_state.items():
            a = np.asarray(ckpt["decision_" + name], dtype=dtype)
            if a.shape != proc or not np.isfinite(a).all():
                raise ValueError(f"checkpoint decision state {name} does not fit frames of {shape}")
            decision[name] = a.copy()
    return ModelSnapshot(
        frame_shape=shape, window=window, counters=counters, lam=lam, state=state, sigma=sigma, decision=decision
    )


def _state(ckpt, small, window):
    st = KDRSDLState(
        **{n: np.asarray(ckpt["state_" + n]) for n in _STATE_ARRAYS},
        **{n: float(ckpt["state_" + n]) for n in _STATE_SCALARS},
    )
    n_slices, r = st.n_slices, st.rank
    shapes = {
        "A": (small[0], r),
        "B": (small[1], r),
        "K": (n_slices, r, r),
        "R": (n_slices, r, r),
        "Y": (n_slices, r, r),
        "E": (n_slices,) + small,
        "Lam": (n_slices,) + small,
        "M": small,
    }
    for name, want in shapes.items():
        a = getattr(st, name)
        if a.shape != want:
            raise ValueError(f"checkpoint state {name} has shape {a.shape}, expected {want}")
        if not np.isfinite(a).all():
            raise ValueError(f"checkpoint state {name} holds non-finite values")
    if n_slices > window:
        raise ValueError("checkpoint state does not belong to its window")
    if not all(np.isfinite(v) and v > 0 for v in (st.mu, st.muK, st.muK0)):
        raise ValueError("checkpoint penalties mu, muK must be finite and > 0")
    return st
