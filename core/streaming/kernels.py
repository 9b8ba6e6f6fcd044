"""The per-pixel steps of a frame as compiled loops (numba): the same arithmetic as the numpy reference.

The numpy implementation of each step (:mod:`core.streaming.decision`,
:mod:`core.streaming.samples`) is the reference; each kernel here does that step's per-pixel work
in one pass over the pixels, reading each pixel's state once, in the same float32 operations in
the same order, so that the masks are the same to the bit (tests/core/test_kernels.py;
``tests/bench/digest_masks.py`` over the six sequences and the motorway video). The steps that
stay with OpenCV (the shadow test's box filters, the morphology, the dilations) are compiled C
already. docs/design.md, "The compiled per-frame pass", says why numba.

- :func:`decide`: the band (``max(k_sigma sigma, floor)`` widened by the blink count), which side
  of it the pixel is on, the shadow test's ratio condition, and the sample consensus of the
  pixels outside the band, the dynamic ones' 3 x 3 neighbours' samples included;
- :func:`count_blinks`: the blink count's update from the raw decision's flips;
- :func:`due_pixels` and :func:`write_samples`: the background samples' conservative update,
  with the random draws made by numpy's generator between the two (the same stream as the
  reference's).

Compiled at the first call and cached on disk (``cache=True``): in numba's default place beside
this file when it may be written, else where the environment variable ``NUMBA_CACHE_DIR`` says
(the systemd units and the Kubernetes pods set it, since their roots are read-only).
"""

import numpy as np
from numba import njit

_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)


@njit(cache=True, nogil=True)
def _count(samples: np.ndarray, row: int, xv: np.float32, r: np.float32, k: int) -> int:  # pragma: no cover - compiled
    """Samples of pixel ``row`` strictly within ``r`` of ``xv``."""
    c = 0
    for s in range(k):
        if abs(samples[row, s] - xv) < r:
            c += 1
    return c


@njit(cache=True, nogil=True)
def decide(
    x: np.ndarray,
    bg: np.ndarray,
    half: np.ndarray,
    v: np.ndarray,
    gain: np.float32,
    samples: np.ndarray,
    ready: bool,
    radius: np.float32,
    matches: int,
    dynamic_blink: np.float32,
    nbr: np.ndarray,
    shadow_lo: np.float32,
    shadow_hi: np.float32,
    cand: np.ndarray,
    ratio: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """One frame's band decision and sample consensus, per pixel (flat arrays of h * w pixels).

    Parameters
    ----------
    x, bg, half, v : ndarray, shape (h * w,), float32
        The frame, its background, the band's half-width before widening
        (:meth:`core.streaming.decision.PixelDecision.half`) and the blink counts.
    gain : float32
        ``blink_gain``: the band and the samples' radius widen by ``1 + gain * v``; 0 = none.
    samples : ndarray, shape (h * w, K), float32
        The background samples (:class:`core.streaming.samples.SampleSet`).
    ready : bool
        Whether the samples are seeded (else nothing matches); False also without samples.
    radius : float32
        The samples' match radius before widening.
    matches : int
        Samples within the radius that make a match.
    dynamic_blink : float32
        Blink count above which a pixel may match a neighbour's samples.
    nbr : ndarray, shape (h * w, 8), intp
        Each pixel's 8 neighbours, clipped at the border.
    shadow_lo, shadow_hi : float32
        The shadow test's ratio bounds (open interval of ``x / bg``).
    cand, ratio : ndarray, shape (h * w,), bool (written)
        ``cand``: outside the band and not matched by the samples; ``ratio``: below the band with
        ``x / bg`` within the shadow bounds.

    Returns
    -------
    int
        How many pixels are both in ``cand`` and in ``ratio`` (0: the shadow test can change nothing).
    """
    n = x.shape[0]
    k = samples.shape[1]
    shadowed = 0
    # the band, branch-free so that it vectorises; the consensus below visits the few pixels out of it
    for i in range(n):
        xi = x[i]
        b = bg[i]
        h = (v[i] * gain + _ONE) * half[i] if gain != _ZERO else half[i]
        below = xi < b - h
        in_ratio = below & (xi > shadow_lo * b) & (xi < shadow_hi * b)
        out = below | (xi > b + h)
        ratio[i] = in_ratio
        cand[i] = out
        shadowed += in_ratio & out
    if not ready:
        return shadowed
    for i in range(n):
        if not cand[i]:
            continue
        xi = x[i]
        r = radius * (v[i] * gain + _ONE) if gain != _ZERO else radius
        if _count(samples, i, xi, r, k) >= matches:
            cand[i] = False
        elif v[i] > dynamic_blink:
            for j in range(nbr.shape[1]):
                if _count(samples, nbr[i, j], xi, r, k) >= matches:
                    cand[i] = False
                    break
        if not cand[i] and ratio[i]:
            shadowed -= 1
    return shadowed


@njit(cache=True, nogil=True)
def count_blinks(
    raw: np.ndarray,
    prev_raw: np.ndarray,
    objects: np.ndarray,
    v: np.ndarray,
    down: np.float32,
    up_down: np.float32,
    top: np.float32,
    dynamic_blink: np.float32,
    dynamic: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The blink counts' update (:meth:`core.streaming.decision.PixelDecision.feedback`), in place.

    ``v -= down``; ``v += up_down`` where ``raw != prev_raw`` outside ``objects``; then ``v`` is
    clipped to ``[0, top]``, and ``dynamic`` (written) is ``v > dynamic_blink``. ``raw``,
    ``prev_raw``, ``objects``, ``dynamic``: bool (h * w,); ``v``: float32 (h * w,); the four
    numbers float32.
    """
    for i in range(v.shape[0]):
        flip = (raw[i] != prev_raw[i]) & (not objects[i])
        a = min(max(v[i] - down + (up_down if flip else _ZERO), _ZERO), top)
        v[i] = a
        dynamic[i] = a > dynamic_blink


@njit(cache=True, nogil=True)
def due_pixels(
    order: np.ndarray,
    start: int,
    step: int,
    learn: np.ndarray,
    dynamic: np.ndarray,
    due: np.ndarray,
    spread: np.ndarray,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """The pixels whose sample is replaced at this frame, in the reference's order.

    Parameters
    ----------
    order : ndarray, shape (m,), int64
        The pixels whose turn may come at this frame (:class:`core.streaming.samples.SampleSet`'s
        schedule for ``t mod (period / 4)``), in order.
    start, step : int
        Positions ``start, start + step, ...`` of ``order`` are due at this frame whatever their
        dynamics; the others only when dynamic.
    learn, dynamic : ndarray, shape (h * w,), bool
        Pixels that may be learnt (called background, away from the mask), and the dynamic ones.
    due, spread : ndarray, shape (m,), int64 (written)
        The due pixels, and those of them that are dynamic (they also write into a neighbour).

    Returns
    -------
    (int, int)
        How many of ``due`` and of ``spread`` were written.
    """
    nd = 0
    ns = 0
    for j in range(order.shape[0]):
        p = order[j]
        if not learn[p]:
            continue
        dyn = dynamic[p]
        if dyn or (j >= start and (j - start) % step == 0):
            due[nd] = p
            nd += 1
            if dyn:
                spread[ns] = p
                ns += 1
    return nd, ns


@njit(cache=True, nogil=True)
def write_samples(
    samples: np.ndarray,
    x: np.ndarray,
    due: np.ndarray,
    own: np.ndarray,
    spread: np.ndarray,
    nbr_pick: np.ndarray,
    nbr_own: np.ndarray,
    nbr: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """Write the due pixels' values into their samples, and the dynamic ones' into a neighbour's.

    ``samples`` (h * w, K) float32 (written); ``x`` (h * w,) float32; ``due`` (nd,) and ``own``
    (nd,): pixel ``due[i]`` replaces its sample ``own[i]``; ``spread`` (ns,), ``nbr_pick`` (ns,),
    ``nbr_own`` (ns,): pixel ``spread[i]`` replaces sample ``nbr_own[i]`` of its neighbour
    ``nbr[spread[i], nbr_pick[i]]``, in order (a later write wins, as numpy's fancy assignment).
    """
    for i in range(due.shape[0]):
        p = due[i]
        samples[p, own[i]] = x[p]
    for i in range(spread.shape[0]):
        p = spread[i]
        samples[nbr[p, nbr_pick[i]], nbr_own[i]] = x[p]


_warm = False


def warm() -> None:
    """Compile the kernels (or load them from numba's cache) now, on a few pixels, rather than at
    the first frame that needs them (the first refit's). Once per process; a second call returns
    at once. Takes 1-2 s with an empty cache, about 0.3 s with a filled one (numba's import
    included)."""
    global _warm
    if _warm:
        return
    f32, b = np.zeros(4, np.float32), np.zeros(4, bool)
    nbr = np.zeros((4, 8), np.intp)
    samples = np.zeros((4, 2), np.float32)
    one = np.float32(1)
    decide(f32, f32, f32, f32, one, samples, True, one, 1, one, nbr, one, one, b.copy(), b.copy())
    count_blinks(b, b, b, f32.copy(), one, one, one, one, b.copy())
    order = np.arange(4, dtype=np.int64)
    due_pixels(order, 0, 1, b, b, np.empty(4, np.int64), np.empty(4, np.int64))
    none = np.zeros(0, np.int64)
    write_samples(samples, f32, none, none, none, none, none, nbr)
    _warm = True
