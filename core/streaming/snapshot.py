"""The model state that checkpoints save, as named arrays, and its checks on the way back.

A snapshot holds everything a restarted subtractor needs to continue a stream as if it had
not stopped: the frame shape, the regularisation weight and two counters, the last window
solution (:class:`core.solver.KDRSDLState`: A, B, cores, duals, M, penalties), the background's
per-pixel spread, and each part's own state as the part gives it (the window and its schedule,
the decision's feedback, the background samples: ``state()`` and ``load()`` of
:class:`core.streaming.window.WindowSchedule`, :class:`core.streaming.decision.PixelDecision`
and :class:`core.streaming.samples.SampleSet`). :func:`to_arrays` lays it out for
``numpy.savez``; :func:`from_arrays` checks what is not a part's against the model's knobs, and
names what is wrong; each part checks its own arrays when it loads them.
"""

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from core.solver.state import KDRSDLState
from core.streaming.params import BackgroundParams
from core.streaming.resolution import processing_shape, refit_shape

#: Version of the array layout; a checkpoint of another version is refused.
VERSION = 4
#: The facade's counters, in the order of the ``counters`` array.
COUNTERS = ("result_start", "n_frames")
#: The parts that give and take their own state; their arrays are stored as ``<part>_<name>``.
PARTS = ("window", "decision", "samples", "ghosts")
_STATE_ARRAYS = ("A", "B", "K", "R", "Lam", "Y", "M")
_STATE_SCALARS = ("mu", "muK", "muK0")


@dataclass(frozen=True)
class ModelSnapshot:
    """The learnt state of a :class:`core.streaming.background.KDRSDLBackgroundSubtractor`.

    Attributes
    ----------
    frame_shape : (int, int)
        Input frame shape (h, w), pixels.
    counters : dict of str to int
        :data:`COUNTERS`: ``result_start`` (the window start the solution was solved on) and
        ``n_frames``.
    lam : float
        The regularisation weight in use.
    state : KDRSDLState or None
        The last window solution; None before the first.
    sigma : ndarray, shape (m, n), float32, or None
        The background's per-pixel spread (:func:`core.streaming.decision.pixel_spread`).
    parts : dict of str to dict of str to ndarray
        Each part's state (:data:`PARTS`) as its ``state()`` gave it, unchecked: the part checks
        it when it loads it.
    """

    frame_shape: tuple
    counters: dict
    lam: float
    state: Optional[KDRSDLState] = None
    sigma: Optional[np.ndarray] = None
    parts: dict = field(default_factory=dict)


def settings(params: BackgroundParams) -> str:
    """The knobs a checkpoint must match, as JSON: all but ``async_refit``, ``kernel`` and
    ``mask_resolution``, which do not change what the model learns, ``refit_still_factor`` and ``refit_still_fraction``,
    which pace the refits but leave the state's meaning alone, ``blend_dynamic``, ``update_blend``,
    ``update_blend_moving``, ``fit_refresh`` and ``fit_refresh_dynamic``, which change how later
    frames enter the window or are judged but not what the window holds, and ``refit_scale`` at 1, so that a
    checkpoint of the release before these knobs still loads (its window counters then start the
    still count at 0: :meth:`core.streaming.window.WindowSchedule.load`)."""
    d = dataclasses.asdict(params)
    for name in (
        "async_refit",
        "kernel",
        "mask_resolution",
        "refit_still_factor",
        "refit_still_fraction",
        "blend_dynamic",
        "update_blend",
        "update_blend_moving",
        "fit_refresh",
        "fit_refresh_dynamic",
    ):
        d.pop(name)
    if d["refit_scale"] == 1:  # what checkpoints made before the knob existed were made at
        d.pop("refit_scale")
    return json.dumps(d, sort_keys=True)


def to_arrays(snap: ModelSnapshot, params: BackgroundParams) -> dict[str, np.ndarray | np.generic]:
    """The snapshot as named arrays for ``numpy.savez`` (arrays are not copied).

    Parameters
    ----------
    snap : ModelSnapshot
    params : core.streaming.params.BackgroundParams
        The model's knobs; a restore must match them (:func:`settings`).

    Returns
    -------
    dict of str to ndarray
        ``version``, ``settings``, ``frame_shape`` (2,) int64, ``counters`` (2,) int64, ``lam``
        float64, ``<part>_<name>`` for each part's arrays, and when present ``state_<name>`` for
        A, B, K, R, Lam, Y, M, mu, muK, muK0 and ``sigma``. The state's ``E``, which a warm start
        does not read, is not saved (the model drops it when it installs a solution).
    """
    out: dict[str, np.ndarray | np.generic] = {
        "version": np.int64(VERSION),
        "settings": np.str_(settings(params)),
        "frame_shape": np.asarray(snap.frame_shape, dtype=np.int64),
        "counters": np.array([snap.counters[name] for name in COUNTERS], dtype=np.int64),
        "lam": np.float64(snap.lam),
    }
    for part, arrays in snap.parts.items():
        for name, a in arrays.items():
            out[f"{part}_{name}"] = a
    if snap.state is not None:
        for name in _STATE_ARRAYS + _STATE_SCALARS:
            out["state_" + name] = np.asarray(getattr(snap.state, name))
    if snap.sigma is not None:
        out["sigma"] = snap.sigma
    return out


def from_arrays(ckpt: Mapping[str, np.ndarray], params: BackgroundParams) -> ModelSnapshot:
    """Check a checkpoint's arrays and return the snapshot they hold.

    Parameters
    ----------
    ckpt : mapping of str to ndarray
        What :func:`to_arrays` returned, or ``numpy.load`` of its file.
    params : core.streaming.params.BackgroundParams
        The restoring model's knobs: their :func:`settings` must equal the checkpoint's.

    Returns
    -------
    ModelSnapshot

    Raises
    ------
    ValueError
        If the checkpoint is of another layout version, was made with other knobs, or an
        array that is not a part's is missing, of an inconsistent shape or non-finite (the
        message says which).
    """
    try:
        return _from_arrays(ckpt, params)
    except (KeyError, TypeError, IndexError) as exc:
        raise ValueError(f"checkpoint is incomplete or malformed: {type(exc).__name__}: {exc}") from None


def _from_arrays(ckpt, params):
    if int(ckpt["version"]) != VERSION:
        raise ValueError(f"checkpoint layout version {int(ckpt['version'])}, expected {VERSION}")
    if str(ckpt["settings"]) != settings(params):
        raise ValueError("checkpoint was made with other model settings")
    shape = tuple(int(v) for v in ckpt["frame_shape"])
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"checkpoint frame shape {shape} is not (h, w)")
    proc = processing_shape(shape, params.processing_side)
    values = [int(v) for v in ckpt["counters"]]
    lam = float(ckpt["lam"])
    if len(values) != len(COUNTERS) or min(values) < 0 or not (np.isfinite(lam) and lam > 0):
        raise ValueError("checkpoint counters or lambda out of range")
    counters = dict(zip(COUNTERS, values, strict=True))
    parts = {part: {k[len(part) + 1 :]: ckpt[k] for k in ckpt if k.startswith(part + "_")} for part in PARTS}
    state = sigma = None
    if "state_A" in ckpt:
        state = _state(ckpt, proc, refit_shape(proc, params.solve_scale), params.window)
        if params.decision == "pixel":
            sigma = np.asarray(ckpt["sigma"], dtype=np.float32)
            if sigma.shape != proc or not np.isfinite(sigma).all():
                raise ValueError(f"checkpoint sigma of shape {sigma.shape} does not fit frames of {shape}")
    return ModelSnapshot(
        frame_shape=shape,
        counters=counters,
        lam=lam,
        state=state,
        sigma=sigma,
        parts={part: arrays for part, arrays in parts.items() if arrays},
    )


def _state(ckpt, small, solved, window):
    """The window solution: A, B, cores and duals at the refit resolution ``solved``, M at the
    processing resolution ``small`` (core.streaming.coarse). A checkpoint made before the model
    dropped ``E`` holds it (``state_E``); it is not read."""
    st = KDRSDLState(
        **{n: np.asarray(ckpt["state_" + n]) for n in _STATE_ARRAYS},
        **{n: float(ckpt["state_" + n]) for n in _STATE_SCALARS},
        E=None,
    )
    n_slices, r = st.n_slices, st.rank
    shapes = {
        "A": (solved[0], r),
        "B": (solved[1], r),
        "K": (n_slices, r, r),
        "R": (n_slices, r, r),
        "Y": (n_slices, r, r),
        "Lam": (n_slices,) + solved,
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
