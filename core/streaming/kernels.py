"""The per-pixel steps of a frame as compiled loops (numba): the same arithmetic as the numpy reference.

The numpy implementation of each step (:mod:`core.streaming.decision`,
:mod:`core.streaming.samples`, :mod:`core.streaming.frame_model`) is the reference; each kernel
here does that step's per-pixel work in one pass over the pixels, reading each pixel's state
once, in the same float32 operations in the same order, so that the masks are the same to the
bit (tests/core/test_kernels.py; ``tests/bench/digest_masks.py`` over the six sequences and the
motorway video). What stays with OpenCV (the dilation to the moving background's reach) is
compiled C already. docs/design.md, "The compiled per-frame pass", says why numba.

- :func:`decide`: the band (``max(k_sigma sigma, floor)`` widened by the blink count), which side
  of it the pixel is on, the shadow test's ratio condition, and the sample consensus of the
  pixels outside the band, the dynamic ones' 3 x 3 neighbours' samples included;
- :func:`uniform_shadow`: the shadow test's uniformity over the candidates' bounding box, its box
  filters summed as OpenCV's are (float64, in OpenCV's order), so the means are OpenCV's to the bit;
- :func:`light_moments`: the light test's sampled background pixels and their sums (most frames
  stop there: their brightness has not moved, or only their offset has);
- :func:`feedback`: the blink count's update from the raw decision's flips outside the previous
  frame's objects, grown by their margin;
- :func:`learn_samples` and :func:`update_samples` (with :func:`due_pixels`,
  :func:`draw_integers` and :func:`write_samples`): the background samples' conservative update
  (the first with the mask's margin dilated, in place of OpenCV's dilation), the random draws
  made from the frame's PCG64 state as numpy's generator makes them (the same stream as the
  reference's);
- :func:`moving_background` (with :func:`fit_core`) and :func:`global_offset`: the frame's
  background (:mod:`core.streaming.frame_model`): the robust fit of the frame's core on the
  installed dictionary, its low-rank part added to ``M`` near the dynamic pixels, and the
  frame's global offset, in one call; the matrix products go to BLAS as numpy's do;
- :func:`postprocess` (with :func:`restore_rims` and :func:`fill_holes`): the mask's
  post-processing (:mod:`core.streaming.postprocess`) in one call, where the reference makes
  about ten calls to OpenCV and numpy: the opening, the solid blobs' rims, the closing and the
  hole filling of the plain and of the reported mask, on masks packed 64 pixels to a word;
- :func:`drop_specks`: the reported mask's small blobs over pixels that blinked lately dropped
  (:func:`core.streaming.postprocess.drop_specks`), its blobs found on the packed runs;
- :func:`ghost_evidence` and :func:`ghost_counts`: the ghost test's edges along each blob's
  contour (:mod:`core.streaming.ghosts`), the gradients taken at the contour's pixels alone, and
  the per-pixel counts a judgement leaves;
- :func:`remnant_state` and :func:`match_outside`: the ghosts' remnants' zones and held counts,
  and the remnants tested against the samples of the nearest background along their rows and
  columns (:meth:`core.streaming.samples.SampleSet.match_outside`);
- :func:`core.solver.fused.sweep`, loaded and cached with them: the element-wise steps of each
  sweep of a window refit's solver in one pass (the refits run it once these are loaded);
- :func:`components`: the reported mask's connected components and their statistics, for the
  worker's motion regions (:mod:`streamer.motion.regions`), at a sixth of the time of OpenCV's
  labelling with statistics; :func:`labels`, the same blobs as a label image, for the ghost test.

Compiled once and cached on disk (``cache=True``): in numba's default place beside this file
when it may be written, else where the environment variable ``NUMBA_CACHE_DIR`` says (the systemd
units and the Kubernetes pods set it, since their roots are read-only). Loading them from the cache
takes about 0.5 s; compiling them takes 15-20 s, so on an empty cache :func:`start` compiles them in
a child process while the model runs the numpy reference (the same masks), and :func:`ready` says
when the compiled steps take over (once a thread has loaded them from the filled cache).
"""

import pathlib
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from core.solver import fused
from core.streaming.samples import LEVELS as _LEVELS
from core.streaming.samples import STEP as _STEP

_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)
_HALF = np.float32(0.5)
#: How far ahead scattered reads are prefetched (:func:`_prefetch`): pixels of a list
#: (:func:`due_pixels`), and words of eight candidates (:func:`decide`'s consensus).
_AHEAD = 32
_AHEAD_WORDS = 16
#: A cache line, bytes: the samples' rows one prefetch brings.
_LINE = 64


def _prefetch_typer(typingctx, arr, index):  # type: ignore[no-untyped-def]  # pragma: no cover - compiled
    """:func:`_prefetch`'s signature and code: ask the CPU to bring element ``index`` of the
    C-contiguous 1-d or 2-d array ``arr`` (for 2-d, the first item of row ``index``) into the
    caches (LLVM's ``llvm.prefetch``: a read, kept in every level). A hint: it changes no value."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        aty = sig.args[0]
        a = context.make_array(aty)(context, builder, args[0])
        idx = context.cast(builder, args[1], sig.args[1], types.intp)
        stride = builder.extract_value(a.strides, 0)
        ptr = builder.gep(builder.bitcast(a.data, cgutils.voidptr_t), [builder.mul(idx, stride)])
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [cgutils.voidptr_t], fnty)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, index), codegen


#: ``_prefetch(arr, index)`` in a compiled function: :func:`_prefetch_typer`.
_prefetch: Any = intrinsic(_prefetch_typer)


@njit(cache=True, nogil=True)
def _matched(
    samples: np.ndarray, row: int, xv: np.float32, r: np.float32, matches: int
) -> bool:  # pragma: no cover - compiled
    """Whether at least ``matches`` samples of pixel ``row`` lie strictly within ``r`` of ``xv``
    (the samples stored as bytes, read as :func:`core.streaming.samples.to_values` reads them).

    Every sample is counted, without ViBe's stop at ``matches``: the loop then has no branch and
    runs on vector instructions, and the answer is the same. Most pixels that reach this test
    are foreground and match no sample, where the stop saves nothing."""
    c = 0
    for s in range(samples.shape[1]):
        c += int(abs(np.float32(samples[row, s]) * _STEP - xv) < r)
    return c >= matches


@njit(cache=True, nogil=True, inline="always")
def _neighbour(p: int, j: int, w: int, n: int) -> int:  # pragma: no cover - compiled
    """Pixel ``p``'s ``j``-th of 8 neighbours in a frame ``w`` pixels wide of ``n`` pixels
    (row-major indices, clipped at the border), in the order of
    :data:`core.streaming.samples.NEIGHBOURS` (``(dy, dx)`` row by row, the centre left out).

    Computed, not read from a table of ``n * 8`` indices: 4.7 MiB at 320 x 240, one cold cache line
    for each dynamic pixel a paced frame visits."""
    k = j + (j >= 4)  # the 3 x 3 square's cells, the centre (4) skipped
    r = p // w + k // 3 - 1
    c = p % w + k % 3 - 1
    r = min(max(r, 0), n // w - 1)
    c = min(max(c, 0), w - 1)
    return r * w + c


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
    w: int,
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
    samples : ndarray, shape (h * w, K), uint8
        The background samples (:class:`core.streaming.samples.SampleSet`).
    ready : bool
        Whether the samples are seeded (else nothing matches); False also without samples.
    radius : float32
        The samples' match radius before widening.
    matches : int
        Samples within the radius that make a match.
    dynamic_blink : float32
        Blink count above which a pixel may match a neighbour's samples.
    w : int
        The frame's width, pixels: a dynamic pixel's 8 neighbours (:func:`_neighbour`).
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
    # the candidates eight at a time (most words are empty); the samples' rows of the candidates
    # a few words ahead are prefetched: after a paced frame's wait the table is out of the caches,
    # and these rows, scattered, are too far apart for the hardware to guess
    c64 = cand[: n - n % 8].view(np.uint64)
    full = c64.shape[0]
    rows_per_line = max(1, _LINE // samples.shape[1])
    for k in range((n + 7) // 8):
        ahead = k + _AHEAD_WORDS
        if ahead < full and c64[ahead] != 0:
            for q in range(ahead * 8, ahead * 8 + 8, rows_per_line):
                _prefetch(samples, q)
        if k < full and c64[k] == 0:
            continue
        for i in range(k * 8, min(k * 8 + 8, n)):
            if not cand[i]:
                continue
            xi = x[i]
            r = radius * (v[i] * gain + _ONE) if gain != _ZERO else radius
            if _matched(samples, i, xi, r, matches):
                cand[i] = False
            elif v[i] > dynamic_blink:
                for j in range(8):
                    if _matched(samples, _neighbour(i, j, w, n), xi, r, matches):
                        cand[i] = False
                        break
            if not cand[i] and ratio[i]:
                shadowed -= 1
    return shadowed


@njit(cache=True, nogil=True)
def fit_core(
    A: np.ndarray,
    B: np.ndarray,
    P: np.ndarray,
    Q: np.ndarray,
    ab: np.ndarray,
    AtA_inv: np.ndarray,
    BtB_inv: np.ndarray,
    Xc: np.ndarray,
    eta: float,
    lam: float,
    alpha: float,
    mu_end: float,
    mu_ratio: float,
    rho: float,
    max_iter: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """:meth:`core.solver.frame_fit.FrameFitter.fit` in one call: the sparse core ``R`` of one frame.

    The same updates of Algorithm 1 in the same float32 operations and order; the matrix products
    go to BLAS as numpy's do (numba's ``np.dot``, in the reference's association), the
    element-wise steps are fused loops. ``A`` (m, r), ``B`` (n, r), ``P``, ``Q``, ``AtA_inv``,
    ``BtB_inv`` (r, r): the fitter's float32 arrays; ``ab`` (r, r) float64; ``Xc`` (m, n) float32,
    the frame minus ``M``; ``eta``: :data:`core.solver.penalty.ETA`; the rest as for
    :func:`core.solver.frame_fit.fit_cores`. Returns ``R`` (r, r) float32.
    """
    At, Bt, Pt, Qt = A.T, B.T, P.T, Q.T
    m, n = Xc.shape
    flat_x = Xc.reshape(-1)
    norm = float(np.sqrt(np.dot(flat_x, flat_x)))  # np.linalg.norm's way: the dot, its root
    mu = min(eta / norm, mu_end) if norm > 0 else mu_end
    K = np.dot(np.dot(AtA_inv, np.dot(np.dot(At, Xc), B)), BtB_inv)
    R = K.copy()
    Y = np.zeros_like(K)
    Lam = np.zeros_like(Xc)
    W = np.empty_like(Xc)
    LK = np.dot(np.dot(A, K), Bt)
    r1, r2 = K.shape
    for _ in range(max_iter):
        muK = mu / mu_ratio
        inv = np.float32(1.0 / mu)
        tau = np.float32(lam / mu)
        f = np.float32(mu)
        for i in range(m):
            for j in range(n):
                e = Lam[i, j] * inv
                e += Xc[i, j]
                e -= LK[i, j]
                e = e - min(max(e, -tau), tau)  # shrink(E, lam / mu)
                w = Xc[i, j] - e
                w *= f
                W[i, j] = w + Lam[i, j]  # S = mu (Xc - E) + Lambda
        C = np.dot(np.dot(At, W), B)
        fk = np.float32(muK)
        tau_r = np.float32(alpha / muK)
        for i in range(r1):
            for j in range(r2):
                C[i, j] = (C[i, j] + fk * R[i, j]) + Y[i, j]
        T = np.dot(np.dot(Pt, C), Q)
        for i in range(r1):
            for j in range(r2):
                T[i, j] /= np.float32(muK + mu * ab[i, j])
        K = np.dot(np.dot(P, T), Qt)
        for i in range(r1):
            for j in range(r2):
                d = K[i, j] - Y[i, j] / fk
                R[i, j] = d - min(max(d, -tau_r), tau_r)
        LK = np.dot(np.dot(A, K), Bt)
        for i in range(m):
            for j in range(n):
                Lam[i, j] = W[i, j] - f * LK[i, j]
        for i in range(r1):
            for j in range(r2):
                Y[i, j] += fk * (R[i, j] - K[i, j])
        if mu >= mu_end:
            break
        mu = min(mu_end, rho * mu)
    return R


@njit(cache=True, nogil=True)
def moving_background(
    x: np.ndarray,
    M: np.ndarray,
    objects: np.ndarray,
    dynamic: np.ndarray,
    near: np.ndarray,
    A: np.ndarray,
    B: np.ndarray,
    step: int,
    fA: np.ndarray,
    fB: np.ndarray,
    P: np.ndarray,
    Q: np.ndarray,
    ab: np.ndarray,
    AtA_inv: np.ndarray,
    BtB_inv: np.ndarray,
    eta: float,
    lam: float,
    alpha: float,
    mu_end: float,
    mu_ratio: float,
    rho: float,
    max_iter: int,
    offset_step: int,
    min_still: int,
) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`core.streaming.frame_model.moving_background` past its gate, and the global offset
    of :func:`core.streaming.frame_model.frame_background`, in one call.

    ``x``, ``M`` (h, w) float32; ``objects``, ``dynamic`` (h, w) bool, the previous mask and the
    dynamic pixels; ``near`` (h, w) uint8, 1 within ``fit_reach`` of a dynamic pixel (OpenCV's
    dilation: faster than a loop here); ``A`` (h, r), ``B`` (w, r) float32, the installed
    dictionary; ``step``: ``FIT_STEP``; ``fA`` to ``BtB_inv``: the
    :class:`core.solver.frame_fit.FrameFitter`'s arrays; ``eta`` to ``max_iter`` as for
    :func:`fit_core`; ``offset_step`` and ``min_still`` as for :func:`global_offset`, no offset
    when ``min_still`` < 0. Returns the background (h, w) float32, a new array: ``M + A R B^T``
    where ``near``, ``M`` elsewhere, plus the offset.
    """
    Xc = x[::step, ::step] - M[::step, ::step]
    o = objects[::step, ::step]
    for i in range(Xc.shape[0]):
        for j in range(Xc.shape[1]):
            if o[i, j]:
                Xc[i, j] = 0  # the previous objects held at M
    R = fit_core(fA, fB, P, Q, ab, AtA_inv, BtB_inv, Xc, eta, lam, alpha, mu_end, mu_ratio, rho, max_iter)
    low = np.dot(np.dot(A, R), B.T)
    h, w = M.shape
    if min_still < 0:
        for i in range(h):
            for j in range(w):
                low[i, j] = low[i, j] * np.float32(near[i, j]) + M[i, j]
        return low
    s = offset_step
    hs, ws = (h + s - 1) // s, (w + s - 1) // s
    sampled = np.empty((hs, ws), np.float32)  # the background at the offset's pixels
    for i in range(hs):
        for j in range(ws):
            sampled[i, j] = low[i * s, j * s] * np.float32(near[i * s, j * s]) + M[i * s, j * s]
    off = _median_offset(x[::s, ::s], sampled, objects[::s, ::s], dynamic[::s, ::s], min_still)
    for i in range(h):
        for j in range(w):
            low[i, j] = (low[i, j] * np.float32(near[i, j]) + M[i, j]) + off
    return low


@njit(cache=True, nogil=True)
def _median_offset(
    xs: np.ndarray, bs: np.ndarray, os: np.ndarray, ys: np.ndarray, min_still: int
) -> np.float32:  # pragma: no cover - compiled
    """The median of ``xs - bs`` (hs, ws) float32 over the pixels in neither ``os`` nor ``ys`` (hs,
    ws) bool when at least ``min_still`` are, else over all; equal to
    :func:`core.streaming.median.median` of the same values."""
    d = (xs - bs).reshape(-1)
    keep = np.empty(d.size, np.float32)
    n = 0
    k = 0
    for i in range(os.shape[0]):
        for j in range(os.shape[1]):
            if not (os[i, j] or ys[i, j]):
                keep[n] = d[k]
                n += 1
            k += 1
    values = keep[:n].copy() if n >= min_still else d.copy()
    size = values.size
    half = size // 2
    middle = _select(values, half)
    if size % 2:
        return middle
    below = values[:half].max()  # the (half - 1)-th smallest: _select left the smaller ones below
    return (below + middle) / np.float32(2)


@njit(cache=True, nogil=True)
def _select(a: np.ndarray, k: int) -> np.float32:  # pragma: no cover - compiled
    """The ``k``-th smallest value of ``a`` (1-D float32, reordered in place so that ``a[:k]`` holds
    values no larger): Hoare's quickselect, the middle element as pivot. ``np.partition``'s value
    (a selection has one answer), at a tenth of its compile time in numba."""
    lo, hi = 0, a.size - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            break
    return a[k]


@njit(cache=True, nogil=True)
def global_offset(
    x: np.ndarray, bg: np.ndarray, objects: np.ndarray, dynamic: np.ndarray, step: int, min_still: int
) -> np.ndarray:  # pragma: no cover - compiled
    """``bg`` plus the frame's median difference from it (``global_offset``), as
    :func:`core.streaming.frame_model.frame_background` takes it: over one pixel in each ``step``
    x ``step`` block, those in neither ``objects`` nor ``dynamic`` when at least ``min_still``
    are, else all of them. ``x``, ``bg`` (h, w) float32; ``objects``, ``dynamic`` (h, w) bool.
    Returns a new (h, w) float32 array."""
    s = step
    off = _median_offset(x[::s, ::s], bg[::s, ::s], objects[::s, ::s], dynamic[::s, ::s], min_still)
    out = np.empty_like(bg)
    h, w = bg.shape
    for i in range(h):
        for j in range(w):
            out[i, j] = bg[i, j] + off
    return out


@njit(cache=True, nogil=True)
def due_pixels(
    order: np.ndarray,
    start: int,
    step: int,
    under: np.ndarray,
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
    under : ndarray, shape (h * w,), uint8
        Pixels that may not be learnt (non-zero: the mask and its margin).
    dynamic : ndarray, shape (h * w,), bool
        The dynamic pixels.
    due, spread : ndarray, shape (m,), int64 (written)
        The due pixels, and those of them that are dynamic (they also write into a neighbour).

    Returns
    -------
    (int, int)
        How many of ``due`` and of ``spread`` were written.
    """
    nd = 0
    ns = 0
    phase = start  # the next position due whatever its dynamics (no division per pixel)
    m = order.shape[0]
    for j in range(m):
        if j + _AHEAD < m:
            _prefetch(under, order[j + _AHEAD])
        on_phase = j == phase
        if on_phase:
            phase += step
        p = order[j]
        if under[p]:
            continue
        dyn = dynamic[p]
        if dyn or on_phase:
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
    w: int,
) -> None:  # pragma: no cover - compiled
    """Write the due pixels' values into their samples, and the dynamic ones' into a neighbour's.

    ``samples`` (h * w, K) uint8 (written, as :func:`core.streaming.samples.to_bytes` stores
    values); ``x`` (h * w,) float32; ``due`` (nd,) and ``own``
    (nd,): pixel ``due[i]`` replaces its sample ``own[i]``; ``spread`` (ns,), ``nbr_pick`` (ns,),
    ``nbr_own`` (ns,): pixel ``spread[i]`` replaces sample ``nbr_own[i]`` of its neighbour
    number ``nbr_pick[i]`` (:func:`_neighbour` in a frame ``w`` pixels wide), in order (a later
    write wins, as numpy's fancy assignment).
    """
    n = samples.shape[0]
    for i in range(due.shape[0]):
        p = due[i]
        samples[p, own[i]] = _byte(x[p])
    for i in range(spread.shape[0]):
        p = spread[i]
        samples[_neighbour(p, nbr_pick[i], w, n), nbr_own[i]] = _byte(x[p])


#: PCG64's multiplier (the 128-bit LCG numpy's ``PCG64`` steps), its high and low 64 bits.
_PCG_MULT_HI = np.uint64(0x2360ED051FC65DA4)
_PCG_MULT_LO = np.uint64(0x4385DF649FCCF645)
_LOW32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def _mul64(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:  # pragma: no cover - compiled
    """The 128-bit product of two uint64, as (high, low) uint64: four 32-bit partial products."""
    s32 = np.uint64(32)
    a0, a1, b0, b1 = a & _LOW32, a >> s32, b & _LOW32, b >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p01 & _LOW32) + (p10 & _LOW32)
    return p11 + (p01 >> s32) + (p10 >> s32) + (mid >> s32), (p00 & _LOW32) | (mid << s32)


@njit(cache=True, nogil=True)
def _pcg64_next64(gen: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """The next 64 bits of a PCG64 stream (``gen``: see :func:`draw_integers`): the state
    stepped (``state * multiplier + inc`` modulo 2^128), then its XSL-RR output, as numpy's
    ``PCG64`` makes them."""
    hi, lo, inc_hi, inc_lo = gen[0], gen[1], gen[2], gen[3]
    p_hi, p_lo = _mul64(lo, _PCG_MULT_LO)
    p_hi = p_hi + lo * _PCG_MULT_HI + hi * _PCG_MULT_LO
    lo = p_lo + inc_lo
    hi = p_hi + inc_hi + (np.uint64(1) if lo < p_lo else np.uint64(0))
    gen[0], gen[1] = hi, lo
    v = hi ^ lo
    rot = hi >> np.uint64(58)
    return (v >> rot) | (v << ((np.uint64(64) - rot) & np.uint64(63)))


@njit(cache=True, nogil=True)
def _pcg64_next32(gen: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """The next 32 bits (as uint64): the high half of the last 64 drawn when one is kept, else the
    low half of a new draw (numpy's ``PCG64`` next_uint32, with its kept half in ``gen[4:6]``)."""
    if gen[4] != 0:
        gen[4] = np.uint64(0)
        return gen[5]
    v = _pcg64_next64(gen)
    gen[4], gen[5] = np.uint64(1), v >> np.uint64(32)
    return v & _LOW32


@njit(cache=True, nogil=True)
def draw_integers(gen: np.ndarray, high: int, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """Fill ``out`` (int64) with integers in ``[0, high)``, as ``Generator(PCG64).integers(0,
    high, out.size)`` draws them from the same state: numpy's bounded draw for a range under
    2^32 (Lemire's multiply and shift of 32 random bits, with its rejection of the biased ones).

    Parameters
    ----------
    gen : ndarray, shape (6,), uint64 (advanced)
        A PCG64 state: the LCG state's high and low 64 bits, the increment's high and low 64 bits,
        whether a 32-bit half is kept (0 or 1) and that half
        (:func:`core.streaming.samples.pcg64_words` reads them from numpy's generator).
    high : int
        The bound, 1 to 2^32; ``high == 1`` draws nothing (all zeros), as numpy's.
    out : ndarray, shape (n,), int64 (written)
    """
    rng = np.uint64(high - 1)
    if rng == 0:
        out[:] = 0
        return
    excl = rng + np.uint64(1)
    threshold = (_LOW32 - rng) % excl
    for i in range(out.shape[0]):
        m = _pcg64_next32(gen) * excl
        leftover = m & _LOW32
        if leftover < excl:
            while leftover < threshold:
                m = _pcg64_next32(gen) * excl
                leftover = m & _LOW32
        out[i] = np.int64(m >> np.uint64(32))


@njit(cache=True, nogil=True)
def update_samples(
    samples: np.ndarray,
    x: np.ndarray,
    order: np.ndarray,
    start: int,
    step: int,
    under: np.ndarray,
    dynamic: np.ndarray,
    w: int,
    due: np.ndarray,
    spread: np.ndarray,
    gen: np.ndarray,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """One frame's update of the background samples in one call: :func:`due_pixels`, the random
    draws of :meth:`core.streaming.samples.SampleSet.update` from the frame's generator in the
    same order (:func:`draw_integers`: each due pixel's sample, then each dynamic one's
    neighbour, then that neighbour's sample), and :func:`write_samples`.

    ``samples`` (h * w, K) uint8 (written); ``x`` (h * w,) float32; ``order`` to ``spread`` as
    for :func:`due_pixels` (``due`` and ``spread`` written); ``w`` the frame's width (pixels); ``gen``
    (6,) uint64 the frame's PCG64 state (advanced). Returns how many pixels were due and how
    many of them dynamic.
    """
    nd, ns = due_pixels(order, start, step, under, dynamic, due, spread)
    own = np.empty(nd, np.int64)
    draw_integers(gen, samples.shape[1], own)
    pick = np.empty(ns, np.int64)
    nbr_own = np.empty(ns, np.int64)
    if ns:
        draw_integers(gen, 8, pick)
        draw_integers(gen, samples.shape[1], nbr_own)
    write_samples(samples, x, due[:nd], own, spread[:ns], pick, nbr_own, w)
    return nd, ns


@njit(cache=True, nogil=True)
def learn_samples(
    mask: np.ndarray,
    margin: int,
    under: np.ndarray,
    samples: np.ndarray,
    x: np.ndarray,
    order: np.ndarray,
    start: int,
    step: int,
    dynamic: np.ndarray,
    w: int,
    due: np.ndarray,
    spread: np.ndarray,
    gen: np.ndarray,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """:meth:`core.streaming.samples.SampleSet.update_outside` in one call: ``mask`` (h, w) uint8
    0 or 1 dilated by a ``margin`` x ``margin`` square (:func:`_extreme`, OpenCV's dilation; at
    most 1: the mask itself) into ``under`` (h, w) uint8 (written), then :func:`update_samples`
    with it; the other arguments are :func:`update_samples`'. Returns what it returns."""
    if margin > 1:
        _extreme(mask, np.empty_like(mask), under, margin, True)
    else:
        under[:, :] = mask
    return update_samples(samples, x, order, start, step, under.ravel(), dynamic, w, due, spread, gen)


@njit(cache=True, nogil=True)
def blend_entry(
    x: np.ndarray,
    bg: np.ndarray,
    under: np.ndarray,
    clear: np.ndarray,
    dynamic: np.ndarray,
    skip_dynamic: bool,
    reach: int,
    w_still: np.float32,
    w_moving: np.float32,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """The frame a window entry holds under the conditional update, in one pass: ``out = w bg +
    (1 - w) x`` at the pixels of ``under`` that are in ``clear`` (and, with ``skip_dynamic``, not
    in ``dynamic``), ``x`` elsewhere, with ``w = w_moving`` within the ``reach`` x ``reach`` square
    around a dynamic pixel (OpenCV's dilation, :func:`_extreme`) and ``w_still`` beyond it (the
    model's ``_learn``: the same float32 operations, to the bit).

    ``x``, ``bg``, ``out`` (h, w) float32 (``out`` written); ``under`` (h, w) bool: the mask
    dilated by the update margin; ``clear`` (h, w) bool (pixels in no suspected ghost blob), or
    empty: every pixel; ``dynamic`` (h, w) uint8 0 or 1, or empty: no pixel is dynamic (the
    dilation is skipped then, and when ``w_moving == w_still``)."""
    h, w = x.shape
    n = h * w
    X, B, U, Y = x.ravel(), bg.ravel(), under.ravel(), out.ravel()
    one = np.float32(1)
    if dynamic.size == 0 or w_moving == w_still:
        near = np.zeros(0, np.uint8)
    else:
        grown = np.empty((h, w), np.uint8)
        _extreme(dynamic, np.empty((h, w), np.uint8), grown, reach, True)
        near = grown.ravel()
    D = dynamic.ravel()
    C = clear.ravel()
    for i in range(n):
        blend = U[i] and (C.size == 0 or C[i]) and not (skip_dynamic and D.size > 0 and D[i] != 0)
        if blend:
            wi = w_moving if near.size > 0 and near[i] != 0 else w_still
            Y[i] = wi * B[i] + (one - wi) * X[i]
        else:
            Y[i] = X[i]


@njit(cache=True, nogil=True)
def _byte(v: np.float32) -> np.uint8:  # pragma: no cover - compiled
    """A sample value as stored: :func:`core.streaming.samples.to_bytes` of one value."""
    return np.uint8(min(max(v * _LEVELS + _HALF, _ZERO), _LEVELS))


@njit(cache=True, nogil=True)
def _root(parent: np.ndarray, r: int) -> int:  # pragma: no cover - compiled
    """The root of run ``r`` in the union-find forest, halving the path on the way."""
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


@njit(cache=True, nogil=True)
def _join_rows(
    start: np.ndarray, end: np.ndarray, parent: np.ndarray, edge: np.ndarray, a: int, b: int, k: int, reach: int
) -> None:  # pragma: no cover - compiled
    """Join each run ``a .. b - 1`` of a row with the runs ``b .. k - 1`` of the next that share a
    column with it (``reach`` 0) or touch it diagonally too (``reach`` 1), in one merge of the two
    rows' runs (each ``[start, end)``). The smaller index stays the root (the first run in raster
    order), and a root's ``edge`` is the OR of its runs'."""
    b_start = b
    while a < b_start and b < k:
        if start[a] < end[b] + reach and start[b] < end[a] + reach:
            ra, rb = _root(parent, a), _root(parent, b)
            if ra != rb:
                lo, hi = min(ra, rb), max(ra, rb)
                parent[hi] = lo
                edge[lo] = edge[lo] or edge[hi]
        if end[a] <= end[b]:
            a += 1
        else:
            b += 1


# ---------------------------------------------------------------------------- packed masks
# The post-processing works on masks packed 64 pixels to a word (bit j of word k of a row is the
# pixel 64 k + j; the bits past the row's end are 0): a 7 x 7 closing is then a few shifts and ORs
# a word, and the runs of a row come out of its words' bit transitions, where the byte masks
# took a pass over every pixel (docs/design.md, "The compiled per-frame pass").

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ONE64 = np.uint64(1)


@njit(cache=True, nogil=True)
def _pack(src: np.ndarray, bits: np.ndarray) -> None:  # pragma: no cover - compiled
    """``src`` (h, w), any dtype, nonzero = set, packed into ``bits`` (h, ceil(w / 64)) uint64."""
    h, w = src.shape
    nw = bits.shape[1]
    S, P = src.ravel(), bits.ravel()
    for i in range(h):
        row = np.uint64(i * w)
        for k in range(nw):
            base = row + np.uint64(64 * k)
            v = np.uint64(0)
            for b in range(np.uint64(min(64, w - 64 * k))):
                v |= np.uint64(S[base + b] != 0) << b
            P[i * nw + k] = v


@njit(cache=True, nogil=True)
def _unpack(bits: np.ndarray, dst: np.ndarray) -> None:  # pragma: no cover - compiled
    """Packed ``bits`` (h, ceil(w / 64)) uint64 into ``dst`` (h, w) uint8, 0 or 1."""
    h, w = dst.shape
    nw = bits.shape[1]
    D, P = dst.ravel(), bits.ravel()
    for i in range(h):
        row = np.uint64(i * w)
        for k in range(nw):
            base = row + np.uint64(64 * k)
            v = P[i * nw + k]
            for b in range(np.uint64(min(64, w - 64 * k))):
                D[base + b] = np.uint8((v >> b) & _ONE64)


@njit(cache=True, nogil=True)
def _last_word(w: int, nw: int) -> np.uint64:  # pragma: no cover - compiled
    """The bits of a packed row's last word that hold pixels (``w`` pixels in ``nw`` words)."""
    n = w - 64 * (nw - 1)
    return _ALL if n == 64 else (_ONE64 << np.uint64(n)) - _ONE64


@njit(cache=True, nogil=True)
def _packed_extreme(
    src: np.ndarray, tmp: np.ndarray, dst: np.ndarray, w: int, side: int, grow: bool
) -> None:  # pragma: no cover - compiled
    """:func:`_extreme` on packed masks (``w`` pixels a row): a ``side`` x ``side`` square dilation
    (``grow``) or erosion with OpenCV's anchor and neutral border, along the rows into ``tmp``
    (each word ORed or ANDed with itself shifted by each offset, the neighbouring words' bits
    carried in), then down the columns into ``dst`` (which may be ``src``)."""
    h, nw = src.shape
    a = side // 2
    b = side - 1 - a  # offsets -a .. b
    last = _last_word(w, nw)
    fill = np.uint64(0) if grow else _ALL  # outside the frame: neutral
    S, T, D = src.ravel(), tmp.ravel(), dst.ravel()
    pad = np.empty(nw + 2, np.uint64)  # one row, a neutral word at each end
    pad[0] = pad[nw + 1] = fill
    unw, two, w64 = np.uint64(nw), np.uint64(2), np.uint64(64)
    for i in range(h):
        row = np.uint64(i * nw)
        for k in range(unw):
            pad[k + _ONE64] = S[row + k]
        pad[nw] = (pad[nw] & last) | (fill & ~last)  # the pad bits neutral too
        for k in range(unw):
            cur, prev, nxt = pad[k + _ONE64], pad[k], pad[k + two]
            acc = cur
            for off in range(1, a + 1):  # the pixel off to the left: the bits shifted up
                u = np.uint64(off)
                s = (cur << u) | (prev >> (w64 - u))
                acc = acc | s if grow else acc & s
            for off in range(1, b + 1):
                u = np.uint64(off)
                s = (cur >> u) | (nxt << (w64 - u))
                acc = acc | s if grow else acc & s
            T[row + k] = acc
        T[row + unw - _ONE64] &= last
    for i in range(h):
        row = np.uint64(i * nw)
        lo, hi = max(i - a, 0), min(i + b + 1, h)
        for k in range(unw):
            acc = T[np.uint64(lo * nw) + k]
            for ii in range(lo + 1, hi):
                acc = acc | T[np.uint64(ii * nw) + k] if grow else acc & T[np.uint64(ii * nw) + k]
            D[row + k] = acc


@njit(cache=True, nogil=True)
def _popcount(v: np.uint64) -> int:  # pragma: no cover - compiled
    """The set bits of a word (the classic SWAR count)."""
    v = v - ((v >> _ONE64) & np.uint64(0x5555555555555555))
    v = (v & np.uint64(0x3333333333333333)) + ((v >> np.uint64(2)) & np.uint64(0x3333333333333333))
    v = (v + (v >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return int((v * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, nogil=True)
def _ctz(v: np.uint64) -> int:  # pragma: no cover - compiled
    """The trailing zero bits of a nonzero word (one instruction)."""
    return int(trailing_zeros(v))  # type: ignore[call-arg]


@njit(cache=True, nogil=True)
def _runs(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """The runs of set pixels of a packed mask, row by row, in raster order: ``start``, ``end``
    (each (n,) int32, ``[start, end)`` columns) and ``first`` ((h + 1,) int32, row ``i``'s runs
    are ``first[i] .. first[i + 1] - 1``). A run starts at a set bit whose left neighbour is
    clear and ends at one whose right neighbour is; the words' trailing zeros find them."""
    h, nw = bits.shape
    n = 0
    for i in range(h):  # the runs' count first: each one's start bit
        carry = np.uint64(0)  # the last pixel of the word before (none at the row's start)
        for k in range(nw):
            f = bits[i, k]
            n += _popcount(f & ~((f << _ONE64) | carry))
            carry = f >> np.uint64(63)
    start = np.empty(n, np.int32)
    end = np.empty(n, np.int32)
    first = np.empty(h + 1, np.int32)
    r = 0
    for i in range(h):
        first[i] = r
        carry = np.uint64(0)
        for k in range(nw):
            f = bits[i, k]
            if f == 0:
                carry = np.uint64(0)
                continue
            starts = f & ~((f << _ONE64) | carry)
            nxt = bits[i, k + 1] if k + 1 < nw else np.uint64(0)
            ends = f & ~((f >> _ONE64) | (nxt << np.uint64(63)))
            while ends != 0:  # each end closes the open run; a start before it opens it
                ze = _ctz(ends)
                if starts != 0 and _ctz(starts) <= ze:
                    start[r] = 64 * k + _ctz(starts)
                    starts &= starts - _ONE64
                end[r] = 64 * k + ze + 1
                ends &= ends - _ONE64
                r += 1
            if starts != 0:  # a run that goes on into the next word
                start[r] = 64 * k + _ctz(starts)
            carry = f >> np.uint64(63)
    first[h] = r
    return start, end, first


@njit(cache=True, nogil=True)
def _blobs(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # pragma: no cover
    """The 8-connected blobs of a packed mask as runs: :func:`_runs`' ``start``, ``end`` and
    ``first``, and ``parent`` ((n,) int32), the union-find forest that joins the runs of adjacent
    rows that overlap or touch diagonally (a blob's root, :func:`_root`, is its first run in
    raster order)."""
    start, end, first = _runs(bits)
    n = start.shape[0]
    parent = np.arange(n).astype(np.int32)
    edge = np.zeros(n, np.bool_)  # unused here: _join_rows keeps it for the hole filling
    for i in range(1, bits.shape[0]):
        _join_rows(start, end, parent, edge, first[i - 1], first[i], first[i + 1], 1)
    return start, end, first, parent


@njit(cache=True, nogil=True)
def _blob_boxes(
    start: np.ndarray, end: np.ndarray, first: np.ndarray, parent: np.ndarray, w: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """Each run's blob and each blob's box and area, from :func:`_blobs`: ``root`` (n,) int64,
    the root of run ``r``'s blob, and ``box`` (n, 5) int64, at a root's row ``left, top, right,
    bottom, area`` (right and bottom exclusive; pixels), the other rows unused."""
    n, h = start.shape[0], first.shape[0] - 1
    root = np.empty(n, np.int64)
    box = np.zeros((n, 5), np.int64)
    box[:, 0], box[:, 1] = w, h  # the smallest column and row, lowered below
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            q = _root(parent, r)
            root[r] = q
            box[q, 0] = min(box[q, 0], start[r])
            box[q, 1] = min(box[q, 1], i)
            box[q, 2] = max(box[q, 2], end[r])
            box[q, 3] = i + 1  # rows come in order
            box[q, 4] += end[r] - start[r]
    return root, box


@njit(cache=True, nogil=True)
def _range_mask(s: int, k: int, e: int) -> tuple[np.uint64, int]:  # pragma: no cover - compiled
    """The bits of word ``k`` that pixels ``[s, e)`` cover (``s`` in that word), and the next ``s``."""
    lo, hi = s & 63, min(e - 64 * k, 64)
    return (_ALL >> np.uint64(64 - (hi - lo))) << np.uint64(lo), 64 * k + hi


@njit(cache=True, nogil=True)
def _count_range(bits: np.ndarray, i: int, s: int, e: int) -> int:  # pragma: no cover - compiled
    """How many of row ``i``'s pixels ``[s, e)`` are set."""
    c = 0
    while s < e:
        k = s >> 6
        m, s = _range_mask(s, k, e)
        c += _popcount(bits[i, k] & m)
    return c


@njit(cache=True, nogil=True)
def _set_range(bits: np.ndarray, i: int, s: int, e: int) -> None:  # pragma: no cover - compiled
    """Set row ``i``'s pixels ``[s, e)``."""
    while s < e:
        k = s >> 6
        m, s = _range_mask(s, k, e)
        bits[i, k] |= m


@njit(cache=True, nogil=True)
def _packed_restore(
    raw: np.ndarray, exclude: np.ndarray, opened: np.ndarray, solidity: float, out: np.ndarray
) -> int:  # pragma: no cover - compiled
    """:func:`restore_rims` on packed masks: the blobs of ``raw`` without ``exclude`` are its runs
    joined row by row when they touch (8-connected, a union-find); each blob's size and the pixels
    ``opened`` kept of it are summed over its runs; a blob that lost pixels and kept at least
    ``solidity`` of them is set whole in ``out`` (a copy of ``opened``). Returns how many pixels
    were restored."""
    h, nw = raw.shape
    free = np.empty((h, nw), np.uint64)
    for i in range(h):
        for k in range(nw):
            free[i, k] = raw[i, k] & ~exclude[i, k]
    start, end, first, parent = _blobs(free)
    n = start.shape[0]
    size, kept, kept_run = np.zeros(n, np.int64), np.zeros(n, np.int64), np.empty(n, np.int64)
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            kept_run[r] = _count_range(opened, i, start[r], end[r])
            root = _root(parent, r)
            size[root] += end[r] - start[r]
            kept[root] += kept_run[r]
    restored = 0
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            root = _root(parent, r)
            if kept[root] < size[root] and kept[root] >= solidity * size[root]:
                _set_range(out, i, start[r], end[r])
                restored += end[r] - start[r] - kept_run[r]
    return restored


@njit(cache=True, nogil=True)
def _packed_fill(bits: np.ndarray, w: int) -> int:  # pragma: no cover - compiled
    """:func:`fill_holes` on a packed mask (``w`` pixels a row), in place: the background's runs
    joined row by row where they share a column (4-connected, a union-find, each root flagged
    when a run of its region touches the border); the runs of unflagged regions are set.
    Returns how many pixels were filled."""
    h, nw = bits.shape
    last = _last_word(w, nw)
    bg = np.empty((h, nw), np.uint64)
    for i in range(h):
        for k in range(nw):
            bg[i, k] = ~bits[i, k]
        bg[i, nw - 1] &= last
    start, end, first = _runs(bg)
    n = start.shape[0]
    parent = np.arange(n).astype(np.int32)
    edge = np.empty(n, np.bool_)
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            edge[r] = i == 0 or i == h - 1 or start[r] == 0 or end[r] == w
        if i > 0:
            _join_rows(start, end, parent, edge, first[i - 1], first[i], first[i + 1], 0)
    filled = 0
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            if not edge[_root(parent, r)]:
                _set_range(bits, i, start[r], end[r])
                filled += end[r] - start[r]
    return filled


@njit(cache=True, nogil=True)
def drop_specks(
    mask: np.ndarray, v: np.ndarray, max_pixels: int, min_share: float, reach: int
) -> int:  # pragma: no cover - compiled
    """:func:`core.streaming.postprocess.drop_specks` in place: the blobs (8-connected) are the
    packed mask's runs joined row by row (a union-find); each blob's pixels, those of them with
    ``v > 0`` and its bounding box are summed over its runs, and the runs of the small blobs that
    blinked and lie far from every large blob's box are cleared.

    Parameters
    ----------
    mask : ndarray, shape (h, w), uint8 (0 or 1; changed)
    v : ndarray, shape (h, w), float32
        The blink counts.
    max_pixels : int
        Blobs of at least this many pixels are kept.
    min_share : float
        Share of a small blob's pixels with ``v > 0`` that makes it a speck.
    reach : int
        A small blob within ``reach`` pixels of a large blob's box is kept (boxes, pixels).

    Returns
    -------
    int
        How many pixels were cleared.
    """
    h, w = mask.shape
    bits = np.empty((h, (w + 63) // 64), np.uint64)
    _pack(mask, bits)
    start, end, first, parent = _blobs(bits)
    n = start.shape[0]
    root, box = _blob_boxes(start, end, first, parent, w)
    blinked = np.zeros(n, np.int64)
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            for j in range(start[r], end[r]):
                blinked[root[r]] += v[i, j] > 0
    speck = np.zeros(n, np.bool_)
    large = np.empty(n, np.int64)
    n_large = 0
    for r in range(n):
        if root[r] == r and box[r, 4] >= max_pixels:
            large[n_large] = r
            n_large += 1
    for r in range(n):
        if root[r] != r or box[r, 4] >= max_pixels or blinked[r] < min_share * box[r, 4]:
            continue
        speck[r] = True
        if reach > 0:
            for q in large[:n_large]:
                if (
                    box[r, 0] - reach < box[q, 2]
                    and box[q, 0] < box[r, 2] + reach
                    and box[r, 1] - reach < box[q, 3]
                    and box[q, 1] < box[r, 3] + reach
                ):
                    speck[r] = False
                    break
    cleared = 0
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            if speck[root[r]]:
                for j in range(start[r], end[r]):
                    mask[i, j] = 0
                cleared += end[r] - start[r]
    return cleared


@njit(cache=True, nogil=True)
def restore_rims(
    raw: np.ndarray, exclude: np.ndarray, opened: np.ndarray, solidity: float, out: np.ndarray
) -> int:  # pragma: no cover - compiled
    """:func:`core.streaming.postprocess.restore_rims`: each blob of ``raw`` without ``exclude``
    (8-connected) that lost pixels to the opening is written into ``out`` whole when ``opened``
    kept at least ``solidity`` of it (:func:`_packed_restore`).

    Parameters
    ----------
    raw, opened : ndarray, shape (h, w), uint8 (0 or 1)
        The mask before the opening, and after it.
    exclude : ndarray, shape (h, w), bool
        Pixels left out of the blobs (the reference's ``exclude``; all False for none).
    solidity : float
        The share of a blob the opening must have kept.
    out : ndarray, shape (h, w), uint8 (written)
        ``opened`` with the restored blobs set.

    Returns
    -------
    int
        How many pixels were restored (0: ``out`` equals ``opened``).
    """
    h, w = raw.shape
    nw = (w + 63) // 64
    rb, eb, ob = np.empty((h, nw), np.uint64), np.empty((h, nw), np.uint64), np.empty((h, nw), np.uint64)
    _pack(raw, rb)
    _pack(exclude, eb)
    _pack(opened, ob)
    res = ob.copy()
    restored = _packed_restore(rb, eb, ob, solidity, res)
    _unpack(res, out)
    return restored


@njit(cache=True, nogil=True)
def fill_holes(mask: np.ndarray, out: np.ndarray) -> int:  # pragma: no cover - compiled
    """:func:`core.streaming.postprocess.fill_holes`: the background regions (4-connected) that do
    not touch the image border set to foreground (:func:`_packed_fill`).

    Parameters
    ----------
    mask : ndarray, shape (h, w), uint8 (nonzero = foreground)
    out : ndarray, shape (h, w), uint8 (written, 0 or 1)
        ``mask`` with its holes filled (``out`` may be ``mask``).

    Returns
    -------
    int
        How many pixels were filled.
    """
    h, w = mask.shape
    bits = np.empty((h, (w + 63) // 64), np.uint64)
    _pack(mask, bits)
    filled = _packed_fill(bits, w)
    _unpack(bits, out)
    return filled


@njit(cache=True, nogil=True)
def labels(mask: np.ndarray, out: np.ndarray) -> int:  # pragma: no cover - compiled
    """The 8-connected components of a mask as a label image: OpenCV's ``connectedComponents``
    blobs (:func:`_blobs`), numbered from 1 in the raster order of their first pixel (OpenCV
    numbers them by 2 x 2 blocks; the ghost test reads each blob as a whole).

    Parameters
    ----------
    mask : ndarray, shape (h, w), uint8
        Foreground where nonzero.
    out : ndarray, shape (h, w), int32 (written)
        0 on the background, a blob's number on its pixels.

    Returns
    -------
    int
        The number of labels, the background's included (blobs + 1).
    """
    h, w = mask.shape
    bits = np.empty((h, (w + 63) // 64), np.uint64)
    _pack(mask, bits)
    start, end, first, parent = _blobs(bits)
    number = np.zeros(start.shape[0], np.int32)
    count = 0
    for i in range(h):
        for j in range(w):
            out[i, j] = 0
        for r in range(first[i], first[i + 1]):
            q = _root(parent, r)  # a blob's root is its first run: numbered before its others
            if q == r:
                count += 1
                number[r] = count
            else:
                number[r] = number[q]
            for j in range(start[r], end[r]):
                out[i, j] = number[r]
    return count + 1


@njit(cache=True, nogil=True)
def components(mask: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    """The 8-connected components of a mask and their statistics, as OpenCV's
    ``connectedComponentsWithStats`` gives them, in one call and without a label image.

    The foreground is cut into runs along the rows (:func:`_runs`, on the packed mask); two runs
    of adjacent rows that overlap or touch diagonally are one component (a union-find over the
    runs, as :func:`_packed_fill` does for the background); each run then adds its pixels' count,
    coordinate sums and extent to its component's. The components come in the order of their
    first pixel in a raster scan, as OpenCV numbers its labels.

    Parameters
    ----------
    mask : ndarray, shape (h, w), uint8
        Foreground where nonzero.

    Returns
    -------
    ndarray, shape (n, 7), int64
        One row a component: ``left, top, width, height, area`` (pixels, OpenCV's
        ``CC_STAT_*`` order), then the sums of its pixels' column and row indices (the
        centroid is each sum over the area, as OpenCV's).
    """
    h, w = mask.shape
    bits = np.empty((h, (w + 63) // 64), np.uint64)
    _pack(mask, bits)
    start, end, first, parent = _blobs(bits)
    n = start.shape[0]
    root, box = _blob_boxes(start, end, first, parent, w)
    label = np.full(n, -1, np.int32)
    count = 0
    for r in range(n):  # a component's number: its root's rank among the roots, in raster order
        if root[r] == r:
            label[r] = count
            count += 1
    out = np.zeros((count, 7), np.int64)
    for r in range(n):
        c = label[r]
        if c >= 0:
            out[c, 0], out[c, 1], out[c, 4] = box[r, 0], box[r, 1], box[r, 4]
            out[c, 2], out[c, 3] = box[r, 2] - box[r, 0], box[r, 3] - box[r, 1]
    for i in range(h):
        for r in range(first[i], first[i + 1]):
            c = label[root[r]]
            s, e = np.int64(start[r]), np.int64(end[r])
            out[c, 5] += (s + e - 1) * (e - s) // 2
            out[c, 6] += np.int64(i) * (e - s)
    return out


@njit(cache=True, nogil=True)
def _reflect_in(p: int, lo: int, hi: int) -> int:  # pragma: no cover - compiled
    """Index ``p`` mapped into ``[lo, hi)`` as numpy's ``pad(mode="reflect")`` maps it (OpenCV's
    ``BORDER_REFLECT_101``; a single index maps to itself)."""
    if hi - lo == 1:
        return lo
    if p < lo:
        return 2 * lo - p
    if p >= hi:
        return 2 * (hi - 1) - p
    return p


@njit(cache=True, nogil=True)
def _sobel_l1(a: np.ndarray, i: int, j: int, y0: int, y1: int, x0: int, x1: int) -> np.float32:  # pragma: no cover
    """:func:`core.streaming.ghosts.gradient` of ``a[y0:y1, x0:x1]`` at ``(i, j)``, the same float32
    additions in the same order."""
    im, ip = _reflect_in(i - 1, y0, y1), _reflect_in(i + 1, y0, y1)
    jm, jp = _reflect_in(j - 1, x0, x1), _reflect_in(j + 1, x0, x1)
    two = np.float32(2)
    gx = ((a[im, jp] - a[im, jm]) + (a[ip, jp] - a[ip, jm])) + (a[i, jp] - a[i, jm]) * two
    gy = ((a[ip, jm] + a[ip, jp]) + a[ip, j] * two) - ((a[im, jm] + a[im, jp]) + a[im, j] * two)
    return abs(gx) + abs(gy)


@njit(cache=True, nogil=True)
def ghost_evidence(
    x: np.ndarray, bg: np.ndarray, labels: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - compiled
    """:func:`core.streaming.ghosts.contour_evidence` in one call: each blob's mean frame-only and
    background-only edge strength over its contour band, the gradients taken at the band's pixels
    alone (the reference takes them over the blobs' bounding box), the same float32 arithmetic and
    float64 sums in the same order.

    ``x``, ``bg`` (h, w) float32; ``labels`` (h, w) int32, ``cv2.connectedComponents``' labels
    (``n`` of them, the background's included). Returns ``(frame_only, bg_only)``, each (n,) float64.
    """
    h, w = labels.shape
    r0, r1, c0, c1 = h, -1, w, -1
    flat_labels = labels.ravel()
    for i in range(h):  # the blobs' bounding box: a row's OR first (a vector loop), then its ends
        row = np.uint64(i * w)
        any_label = np.int32(0)
        for j in range(np.uint64(w)):
            any_label |= flat_labels[row + j]
        if any_label == 0:
            continue
        r0, r1 = min(r0, i), i
        first, last = 0, w - 1
        while flat_labels[row + np.uint64(first)] == 0:
            first += 1
        while flat_labels[row + np.uint64(last)] == 0:
            last -= 1
        c0, c1 = min(c0, first), max(c1, last)
    pos, neg = np.zeros(n), np.zeros(n)
    count = np.zeros(n, np.int64)
    if r1 < 0:
        return pos, neg
    y0, y1, x0, x1 = max(r0 - 2, 0), min(r1 + 3, h), max(c0 - 2, 0), min(c1 + 3, w)
    bh, bw = y1 - y0, x1 - x0
    blobs = np.empty((bh, bw), np.uint8)
    B = blobs.ravel()
    for i in range(bh):
        src, dst = np.uint64((y0 + i) * w + x0), np.uint64(i * bw)
        for j in range(np.uint64(bw)):
            B[dst + j] = flat_labels[src + j] > 0
    tmp, grown, shrunk = np.empty((bh, bw), np.uint8), np.empty((bh, bw), np.uint8), np.empty((bh, bw), np.uint8)
    _extreme(blobs, tmp, grown, 3, True)  # the band: the 3 x 3 square neither all blob nor all background
    _extreme(blobs, tmp, shrunk, 3, False)
    G, S = grown.ravel(), shrunk.ravel()
    for q in range(np.uint64(bh * bw)):
        G[q] ^= S[q]  # 1 on the band
    for i in range(y0, y1):
        row = np.uint64((i - y0) * bw)
        for chunk in range(0, bw, 32):  # 32 pixels at a time: most hold no band pixel and are skipped at once
            chunk_end = min(chunk + 32, bw)
            on_band = np.uint8(0)
            for q in range(np.uint64(chunk), np.uint64(chunk_end)):
                on_band |= G[row + q]
            if on_band == 0:
                continue
            for j in range(x0 + chunk, x0 + chunk_end):
                if G[row + np.uint64(j - x0)] != 0:
                    _band_pixel(x, bg, labels, i, j, y0, y1, x0, x1, pos, neg, count)
    for k in range(n):
        pos[k] /= max(count[k], 1)
        neg[k] /= max(count[k], 1)
    pos[0] = neg[0] = 0.0
    return pos, neg


@njit(cache=True, nogil=True)
def ghost_counts(
    labels: np.ndarray, ghost: np.ndarray, count: np.ndarray, period: int, frames: int, absorb: np.ndarray
) -> int:  # pragma: no cover - compiled
    """The ghost test's per-pixel counts after a judgement, in place, in one pass
    (:meth:`core.streaming.ghosts.GhostTracker.update`): ``count + period`` (saturating at 255)
    where the pixel's blob was judged a ghost, 0 elsewhere; where that reaches ``frames`` the
    pixel is absorbed and its count starts over.

    ``labels`` (h, w) int32 (:func:`labels`); ``ghost`` (n,) bool, each label's judgement (0: the
    background, False); ``count`` (h, w) uint8 (changed); ``absorb`` (h, w) bool (written).
    Returns how many pixels are absorbed.
    """
    L, C, A = labels.ravel(), count.ravel(), absorb.ravel()
    absorbed = 0
    for i in range(L.shape[0]):
        c = int(C[i]) + period if ghost[L[i]] else 0
        if c > 255:
            c = 255
        if 0 < c and c >= frames:
            A[i] = True
            C[i] = 0
            absorbed += 1
        else:
            A[i] = False
            C[i] = c
    return absorbed


@njit(cache=True, nogil=True)
def _band_pixel(
    x: np.ndarray,
    bg: np.ndarray,
    labels: np.ndarray,
    i: int,
    j: int,
    y0: int,
    y1: int,
    x0: int,
    x1: int,
    pos: np.ndarray,
    neg: np.ndarray,
    count: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """One band pixel's share of :func:`ghost_evidence`'s sums, added to its blob's."""
    near = 0  # the band's outer pixels take their neighbouring blob's label (the largest)
    for ii in range(max(i - 1, y0), min(i + 2, y1)):
        for jj in range(max(j - 1, x0), min(j + 2, x1)):
            near = max(near, labels[ii, jj])
    d = _sobel_l1(x, i, j, y0, y1, x0, x1) - _sobel_l1(bg, i, j, y0, y1, x0, x1)
    pos[near] += np.float64(max(d, np.float32(0)))
    neg[near] += np.float64(max(-d, np.float32(0)))
    count[near] += 1


@njit(cache=True, nogil=True)
def _extreme(src: np.ndarray, tmp: np.ndarray, dst: np.ndarray, side: int, grow: bool) -> None:  # pragma: no cover
    """A ``side`` x ``side`` square dilation (``grow``: OR over the square) or erosion (AND) of a
    0-or-1 mask, with OpenCV's anchor (``side // 2``) and its neutral border: along the rows into
    ``tmp``, then along the columns into ``dst`` (``dst`` may be ``src``; all C-contiguous).

    Each shift is one loop over a row's bytes with unsigned indices: numba then emits no
    negative-index check and the compiler turns the loop into vector instructions (ten times
    faster than the same loop on signed indices: 0.035 ms for a 7 x 7 dilation at 320 x 240)."""
    h, w = src.shape
    a = side // 2
    S, T, D = src.ravel(), tmp.ravel(), dst.ravel()
    for i in range(h):
        row = np.uint64(i * w)
        for j in range(np.uint64(w)):
            T[row + j] = S[row + j]
        for t in range(side):
            off = t - a
            if off == 0:
                continue
            lo, hi = max(0, -off), min(w, w - off)
            d0, s0 = np.uint64(i * w + lo), np.uint64(i * w + lo + off)
            if grow:
                for j in range(np.uint64(hi - lo)):
                    T[d0 + j] |= S[s0 + j]
            else:
                for j in range(np.uint64(hi - lo)):
                    T[d0 + j] &= S[s0 + j]
    for i in range(h):
        row = np.uint64(i * w)
        for j in range(np.uint64(w)):
            D[row + j] = T[row + j]
        for t in range(side):
            ii = i + t - a
            if ii == i or ii < 0 or ii >= h:
                continue
            s0 = np.uint64(ii * w)
            if grow:
                for j in range(np.uint64(w)):
                    D[row + j] |= T[s0 + j]
            else:
                for j in range(np.uint64(w)):
                    D[row + j] &= T[s0 + j]


@njit(cache=True, nogil=True)
def postprocess(
    raw: np.ndarray,
    exclude: np.ndarray,
    open_size: int,
    close_size: int,
    fill: bool,
    solidity: float,
    plain: np.ndarray,
    reported: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """:func:`core.streaming.postprocess.postprocess_restored` in one call, on packed masks: the
    opening, the solid blobs' rims restored (:func:`_packed_restore`), then the closing and the
    hole filling (:func:`_packed_fill`) of both masks. The same masks as the reference's OpenCV
    morphology and flood fill, without a return to the interpreter between the steps.

    Parameters
    ----------
    raw : ndarray, shape (h, w), uint8 (0 or 1)
        The raw mask.
    exclude : ndarray, shape (h, w), bool
        Pixels never restored (all False for none).
    open_size, close_size : int
        Sides of the opening's and the closing's squares, pixels; 0 or 1 skips the step.
    fill : bool
        Fill the holes.
    solidity : float
        ``open_restore``; 0 restores nothing.
    plain, reported : ndarray, shape (h, w), uint8 (written)
        The plain mask, and the one with the rims restored (written only when a pixel was restored).

    Returns
    -------
    int
        How many pixels the opening's rims gave back (0: the reported mask is ``plain``, and
        ``reported`` holds nothing of use).
    """
    h, w = raw.shape
    nw = (w + 63) // 64
    raw_bits, tmp, opened = np.empty((h, nw), np.uint64), np.empty((h, nw), np.uint64), np.empty((h, nw), np.uint64)
    _pack(raw, raw_bits)
    if open_size > 1:
        _packed_extreme(raw_bits, tmp, opened, w, open_size, False)
        _packed_extreme(opened, tmp, opened, w, open_size, True)
    else:
        opened[:, :] = raw_bits
    restored = 0
    rims = np.empty((h, nw), np.uint64)
    if open_size > 1 and solidity > 0:
        ex_bits = np.empty((h, nw), np.uint64)
        _pack(exclude, ex_bits)
        rims[:, :] = opened
        restored = _packed_restore(raw_bits, ex_bits, opened, solidity, rims)
    out = np.empty((h, nw), np.uint64)
    for k in range(2 if restored else 1):
        src = opened if k == 0 else rims
        if close_size > 1:
            _packed_extreme(src, tmp, out, w, close_size, True)
            _packed_extreme(out, tmp, out, w, close_size, False)
        else:
            out[:, :] = src
        if fill:
            _packed_fill(out, w)
        _unpack(out, plain if k == 0 else reported)
    return restored


@njit(cache=True, nogil=True)
def _reflect101(p: int, n: int) -> int:  # pragma: no cover - compiled
    """Index ``p`` mapped into ``[0, n)`` as OpenCV's ``BORDER_REFLECT_101`` maps it (``gfedcb|abcdefgh|gfedcba``)."""
    if n == 1:
        return 0
    while p < 0 or p >= n:
        p = -p if p < 0 else 2 * (n - 1) - p
    return p


@njit(cache=True, nogil=True)
def _row_sums(row: np.ndarray, k: int, pad: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """The ``k``-wide sums along one float32 row, in float64 into ``out``, as OpenCV's box filter
    takes them (:func:`_box_mean`): ``row`` padded by ``BORDER_REFLECT_101`` into ``pad``
    (length ``w + k - 1``), then a plain sum left to right for ``k`` of 3 and 5, a running one
    for other sides."""
    w = row.shape[0]
    a = k // 2
    start = np.uint64(a)
    for j in range(np.uint64(w)):
        pad[start + j] = row[j]
    for j in range(a):
        pad[j] = row[_reflect101(j - a, w)]
    for j in range(w + a, w + k - 1):
        pad[j] = row[_reflect101(j - a, w)]
    if k == 3:
        for j in range(np.uint64(w)):
            out[j] = pad[j] + pad[j + np.uint64(1)] + pad[j + np.uint64(2)]
    elif k == 5:
        for j in range(np.uint64(w)):
            out[j] = (
                pad[j] + pad[j + np.uint64(1)] + pad[j + np.uint64(2)] + pad[j + np.uint64(3)] + pad[j + np.uint64(4)]
            )
    else:
        t = 0.0
        for d in range(k):
            t += pad[d]
        out[0] = t
        for j in range(1, w):
            t += pad[j + k - 1] - pad[j - 1]
            out[j] = t


@njit(cache=True, nogil=True)
def _box_mean(src: np.ndarray, k: int, dst: np.ndarray) -> None:  # pragma: no cover - compiled
    """``cv2.blur(src, (k, k))`` of a float32 (h, w) array into ``dst`` (not ``src``), to the bit.

    OpenCV's box filter of float32 sums in float64: along each row (:func:`_row_sums`), then down
    the columns (a running sum: the new row added, the output scaled by ``1 / k^2``, the oldest
    row taken off), with its anchor (``k // 2``) and its default border (``BORDER_REFLECT_101`` of
    ``src`` itself). The same additions in the same order give the same float64 sums, hence the
    same float32 means. Each loop runs along a row, so that it vectorises."""
    h, w = src.shape
    a = k // 2
    pad = np.empty(w + k - 1, np.float64)
    # the bordered rows enter in order, row t being src's row reflect101(t - a); the last k rows'
    # sums are kept in a ring (in cache, where a frame's would not be)
    ring = np.empty((k, w), np.float64)
    acc = np.zeros(w, np.float64)
    for t in range(k - 1):
        _row_sums(src[_reflect101(t - a, h)], k, pad, ring[t % k])
        for j in range(w):
            acc[j] += ring[t % k, j]
    scale = 1.0 / (k * k)
    for i in range(h):
        new, old, out = ring[(i + k - 1) % k], ring[i % k], dst[i]
        _row_sums(src[_reflect101(i + k - 1 - a, h)], k, pad, new)
        for j in range(w):
            t = acc[j] + new[j]
            out[j] = np.float32(t * scale)
            acc[j] = t - old[j]


@njit(cache=True, nogil=True)
def uniform_shadow(
    x: np.ndarray,
    bg: np.ndarray,
    ratio: np.ndarray,
    cand: np.ndarray,
    smooth: int,
    window: int,
    spread2: np.float32,
) -> int:  # pragma: no cover - compiled
    """The shadow test's uniformity (:meth:`core.streaming.decision.PixelDecision.shadow`) in one
    call: of the pixels of ``ratio``, those whose ratio ``x / bg`` (smoothed over ``smooth`` x
    ``smooth``) varies by less than ``sqrt(spread2)`` over ``window`` x ``window`` leave ``cand``.
    The same pixels as the reference's erosion, bounding box and four OpenCV box filters: the
    means are OpenCV's to the bit (:func:`_box_mean`).

    Parameters
    ----------
    x, bg : ndarray, shape (h, w), float32
        The frame and its background, intensity in [0, 1].
    ratio : ndarray, shape (h, w), bool
        The candidates: below the band, ``x / bg`` within the shadow's bounds (not changed).
    cand : ndarray, shape (h, w), bool (changed)
        The raw foreground; the shadows found are cleared from it.
    smooth, window : int
        ``shadow_smooth`` and ``shadow_window``, pixels.
    spread2 : float32
        ``shadow_spread ** 2``.

    Returns
    -------
    int
        How many pixels the test found to be shadows (in ``ratio`` and uniform).
    """
    h, w = x.shape
    # the bounding box of the candidates that survive a 3 x 3 erosion (OpenCV's: outside counts as set)
    seeds = np.empty((h, w), np.uint8)
    _extreme(ratio.view(np.uint8), np.empty((h, w), np.uint8), seeds, 3, False)
    r0, r1, c0, c1 = h, -1, w, -1
    for i in range(h):
        row = seeds[i]
        first, last = w, -1
        for j in range(w):
            if row[j]:
                first = j
                break
        if first == w:
            continue
        for j in range(w - 1, -1, -1):
            if row[j]:
                last = j
                break
        r0, r1, c0, c1 = min(r0, i), i, min(c0, first), max(c1, last)
    if r1 < 0:
        return 0
    m = window // 2 + smooth // 2 + 1
    y0, y1, x0, x1 = max(r0 - m, 0), min(r1 + 1 + m, h), max(c0 - m, 0), min(c1 + 1 + m, w)
    bh, bw = y1 - y0, x1 - x0
    # the ratio over the box, smoothed
    r = np.empty((bh, bw), np.float32)
    floor = np.float32(1 / 255)
    for i in range(bh):
        xr, br, rr = x[y0 + i, x0:x1], bg[y0 + i, x0:x1], r[i]
        for j in range(bw):
            rr[j] = xr[j] / max(br[j], floor)
    if smooth > 1:
        smoothed = np.empty((bh, bw), np.float32)
        _box_mean(r, smooth, smoothed)
        r = smoothed
    # the window's means of the ratio and of its square
    mean, mean_sq = np.empty((bh, bw), np.float32), np.empty((bh, bw), np.float32)
    for i in range(bh):  # the squares, in ``mean`` until its own turn
        rr, qr = r[i], mean[i]
        for j in range(bw):
            qr[j] = rr[j] * rr[j]
    _box_mean(mean, window, mean_sq)
    _box_mean(r, window, mean)
    ratio8, cand8 = ratio.view(np.uint8), cand.view(np.uint8)
    found = 0
    for i in range(bh):
        mr, qr, rat, cr = mean[i], mean_sq[i], ratio8[y0 + i, x0:x1], cand8[y0 + i, x0:x1]
        for j in range(bw):  # branch-free, so that it vectorises
            shade = rat[j] & np.uint8(qr[j] - mr[j] * mr[j] < spread2)
            cr[j] &= shade ^ np.uint8(1)
            found += shade
    return found


@njit(cache=True, nogil=True)
def light_moments(
    x: np.ndarray, bg: np.ndarray, objects: np.ndarray, step: int
) -> tuple[int, float, float, float, float]:  # pragma: no cover - compiled
    """The light test's sampled background pixels (:func:`core.streaming.light.unchanged`): one in
    each ``step`` x ``step`` block (the top-left one), outside ``objects``, and their
    :func:`core.streaming.light.moments` (float64), where the reference makes a dozen numpy calls.

    Parameters
    ----------
    x, bg : ndarray, shape (h, w), float32
        The frame and its background.
    objects : ndarray, shape (h, w), bool
        The previous frame's mask.
    step : int
        :func:`core.streaming.light.sample_step`.
    """
    h, w = x.shape
    n, sx, sb, sbb, sbx = 0, 0.0, 0.0, 0.0, 0.0
    for i in range(0, h, step):
        for j in range(0, w, step):
            if not objects[i, j]:
                xv, bv = np.float64(x[i, j]), np.float64(bg[i, j])
                n += 1
                sx += xv
                sb += bv
                sbb += bv * bv
                sbx += bv * xv
    return n, sx, sb, sbb, sbx


@njit(cache=True, nogil=True)
def remnant_state(
    zone: np.ndarray,
    held: np.ndarray,
    mask: np.ndarray,
    adopted: np.ndarray,
    held_min: int,
    tested: np.ndarray,
    outside: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """One judgement of the ghosts' remnants' state (:meth:`core.streaming.ghosts.GhostTracker._remnant`)
    in one pass, in place: each zone counts down, a zone pixel under the mask adds one to its held
    count (saturating at 255), any other pixel's count starts over; the pixels held for
    ``held_min`` judgements are the ones to test, and those neither under the mask nor adopted the
    ones whose samples they are tested against.

    Parameters
    ----------
    zone, held : ndarray, shape (h, w), uint8 (updated)
    mask, adopted : ndarray, shape (h, w), bool
    held_min : int
        :data:`core.streaming.ghosts.REMNANT_HELD`.
    tested, outside : ndarray, shape (h, w), bool (written)

    Returns
    -------
    int
        How many pixels are to be tested.
    """
    h, w = zone.shape
    n = 0
    for i in range(h):
        for j in range(w):
            z = zone[i, j]
            under = mask[i, j]
            if z > 0:
                zone[i, j] = z - 1
            c = held[i, j]
            c = (c + 1 if c < 255 else c) if (z > 0 and under) else 0
            held[i, j] = c
            t = c >= held_min
            tested[i, j] = t
            n += t
            outside[i, j] = not under and not adopted[i, j]
    return n


@njit(cache=True, nogil=True)
def _ray_matched(
    samples: np.ndarray,
    outside: np.ndarray,
    i: int,
    j: int,
    di: int,
    dj: int,
    reach: int,
    xv: np.float32,
    r: np.float32,
    matches: int,
) -> bool:  # pragma: no cover - compiled
    """Whether the nearest ``outside`` pixel from (i, j) along (di, dj), within ``reach`` steps,
    has ``matches`` samples strictly within ``r`` of ``xv`` (False when there is none)."""
    h, w = outside.shape
    for step in range(1, reach + 1):
        y, x = i + di * step, j + dj * step
        if y < 0 or y >= h or x < 0 or x >= w:
            return False
        if outside[y, x]:
            return _matched(samples, y * w + x, xv, r, matches)
    return False


@njit(cache=True, nogil=True)
def match_outside(
    samples: np.ndarray,
    x: np.ndarray,
    pixels: np.ndarray,
    outside: np.ndarray,
    reach: int,
    radius: np.float32,
    matches: int,
    out: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """:meth:`core.streaming.samples.SampleSet.match_outside` in one pass: each tested pixel against
    the samples of the nearest ``outside`` pixel along its row and its column (left, right, up,
    down), where the reference takes running extrema over the tested pixels' box.

    Parameters
    ----------
    samples : ndarray, shape (h * w, K), uint8
        The background samples.
    x : ndarray, shape (h, w), float32
        The frame, intensity in [0, 1].
    pixels, outside : ndarray, shape (h, w), bool
        The pixels tested, and the pixels whose samples they may match.
    reach : int
        Longest ray, pixels.
    radius : float32
        The still match radius.
    matches : int
        Samples within the radius that make a match.
    out : ndarray, shape (h, w), bool (written)
        The tested pixels that match; False elsewhere.

    Returns
    -------
    int
        How many matched.
    """
    h, w = x.shape
    n = 0
    for i in range(h):
        for j in range(w):
            hit = False
            if pixels[i, j]:
                xv = x[i, j]
                hit = (
                    _ray_matched(samples, outside, i, j, 0, -1, reach, xv, radius, matches)
                    or _ray_matched(samples, outside, i, j, 0, 1, reach, xv, radius, matches)
                    or _ray_matched(samples, outside, i, j, -1, 0, reach, xv, radius, matches)
                    or _ray_matched(samples, outside, i, j, 1, 0, reach, xv, radius, matches)
                )
            out[i, j] = hit
            n += hit
    return n


@njit(cache=True, nogil=True)
def feedback(
    raw: np.ndarray,
    prev_raw: np.ndarray,
    prev_obj: np.ndarray,
    margin: int,
    inside: bool,
    v: np.ndarray,
    down: np.float32,
    up_down: np.float32,
    top: np.float32,
    dynamic_blink: np.float32,
    dynamic: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """:meth:`core.streaming.decision.PixelDecision.feedback` in one call, in place: the previous
    frame's objects grown by a ``margin`` x ``margin`` square (:func:`_extreme`, OpenCV's
    dilation), or none with ``inside``; then ``v -= down``, ``v += up_down`` where ``raw !=
    prev_raw`` outside those objects, ``v`` clipped to ``[0, top]``, and ``dynamic`` (written)
    ``v > dynamic_blink``. ``raw``, ``prev_raw``, ``prev_obj``, ``dynamic``: bool (h, w); ``v``:
    float32 (h, w); the four numbers float32."""
    h, w = raw.shape
    objects = np.zeros((h, w), np.uint8)
    if not inside:
        if margin > 1:
            _extreme(prev_obj.view(np.uint8), np.empty((h, w), np.uint8), objects, margin, True)
        else:
            objects[:, :] = prev_obj.view(np.uint8)
    r, pr, ob, vf, dyn = raw.ravel(), prev_raw.ravel(), objects.ravel(), v.ravel(), dynamic.ravel()
    for i in range(vf.shape[0]):
        flip = (r[i] != pr[i]) & (ob[i] == 0)
        a = min(max(vf[i] - down + (up_down if flip else _ZERO), _ZERO), top)
        vf[i] = a
        dyn[i] = a > dynamic_blink


_warm = False
#: The child process compiling the kernels into the cache (:func:`start`), and why it failed.
_child: subprocess.Popen | None = None
_child_err: IO[bytes] | None = None
_failure: str | None = None
#: The thread loading the kernels from the cache once the child has filled it.
_loader: threading.Thread | None = None

#: What the child runs: the package's root on its path, then :func:`warm`.
_CHILD = "import sys; sys.path.insert(0, {root!r}); from core.streaming import kernels; kernels.warm()"


def cached() -> bool:
    """Whether numba's cache holds every kernel compiled from this very source (then :func:`warm`
    only loads them). Reads numba's cache index (its private API: any error counts as not cached)."""
    try:
        entries: tuple[Any, ...] = (
            decide,
            update_samples,
            learn_samples,
            moving_background,
            global_offset,
            restore_rims,
            fill_holes,
            postprocess,
            drop_specks,
            uniform_shadow,
            light_moments,
            feedback,
            components,
            ghost_evidence,
            ghost_counts,
            fused.sweep,
        )
        return all(f._cache._cache_file._load_index() for f in entries)
    except Exception:  # noqa: BLE001 - numba's internals changed: compile as if uncached
        return False


def start() -> None:
    """Make the kernels usable as soon as possible without holding up the caller.

    With a filled cache a thread loads them (:func:`warm`, about 0.5 s idle, longer on a loaded
    machine; a restarted worker does not wait for them). With an empty or stale one a child
    process compiles them into the cache (15-20 s of one core) and :func:`ready` starts that
    thread once the child has finished. Either way this returns at once and the
    model's steps run the numpy reference (the same masks) until the kernels are loaded. Once
    per process.
    """
    global _child, _child_err, _loader
    if _warm or _child is not None or _loader is not None:
        return
    if cached():
        _loader = threading.Thread(target=_load, name="kernels-load", daemon=True)
        _loader.start()
        return
    root = str(pathlib.Path(__file__).resolve().parents[2])
    _child_err = tempfile.TemporaryFile()  # a file, not a pipe: a child's long output cannot block it
    cmd = [sys.executable, "-c", _CHILD.format(root=root)]
    _child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=_child_err)


def ready() -> bool:
    """Whether the compiled kernels are loaded; called by the model's steps at each frame.

    False while :func:`start`'s child compiles (the steps run the numpy reference meanwhile), and
    while a thread then loads the kernels from the cache it filled (about 0.5 s: on the caller's
    thread that would stall a frame, and a live source's frames would be dropped). False for good
    when the child failed (:func:`failure` says why).
    """
    global _failure, _loader
    if _warm:
        return True
    if _child is None or _failure is not None or _loader is not None or _child.poll() is None:
        return False
    if _child.returncode == 0 and cached():
        _loader = threading.Thread(target=_load, name="kernels-load", daemon=True)
        _loader.start()
        return False
    tail: list[str] = []
    if _child_err is not None:
        _child_err.seek(0)
        tail = _child_err.read().decode(errors="replace").strip().splitlines()[-1:]
    _failure = f"the compiling process exited with status {_child.returncode}: {' '.join(tail) or 'no message'}"
    return False


def _load() -> None:
    """:func:`warm` on the loader thread; an error becomes :func:`failure`'s reason."""
    global _failure
    try:
        warm()
    except Exception as exc:  # noqa: BLE001 - whatever numba raised: the model stays on numpy
        _failure = f"loading the compiled kernels failed: {type(exc).__name__}: {exc}"


def compiling() -> bool:
    """Whether :func:`start`'s child process is compiling the kernels now (an empty or stale cache)."""
    return _child is not None and _child.poll() is None


def failure() -> str | None:
    """Why the kernels could not be compiled in the background (the model stays on the numpy
    reference), or None."""
    return _failure


def warm() -> None:
    """Compile the kernels (or load them from numba's cache) now, on a few pixels, rather than at
    the first frame that needs them. Once per process; a second call returns at once. Takes 15-20
    s with an empty cache, about 0.5 s with a filled one."""
    global _warm
    if _warm:
        return
    f32, b = np.zeros(4, np.float32), np.zeros(4, bool)
    samples = np.zeros((4, 2), np.uint8)
    one = np.float32(1)
    decide(f32, f32, f32, f32, one, samples, True, one, 1, one, 2, one, one, b.copy(), b.copy())
    order = np.arange(4, dtype=np.int64)
    gen = np.array([0, 1, 0, 1, 0, 0], np.uint64)  # a stream that moves (an all-zero state stays 0)
    u8 = np.zeros(4, np.uint8)
    update_samples(samples, f32, order, 0, 1, u8, b, 2, np.empty(4, np.int64), np.empty(4, np.int64), gen)
    draw_integers(gen, 3, np.empty(2, np.int64))
    square4 = np.zeros((2, 2), np.uint8)
    learn_samples(
        square4, 3, square4.copy(), samples, f32, order, 0, 1, b, 2, np.empty(4, np.int64), np.empty(4, np.int64), gen
    )
    img, on, near = np.ones((8, 8), np.float32), np.zeros((8, 8), bool), np.ones((8, 8), np.uint8)
    dic, core = np.ones((8, 2), np.float32), np.eye(2, dtype=np.float32)
    moving_background(
        img, img, on, on, near, dic, dic, 4, dic[::4].copy(), dic[::4].copy(), core, core, np.eye(2), core, core,
        1.0, 0.1, 0.1, 1.0, 1.0, 2.0, 1, 4, 1,
    )  # fmt: skip
    global_offset(img, img, on, on, 4, 1)
    blend_entry(img, img, on, on, near, True, 3, one, np.float32(0.5), img.copy())
    blend_entry(img, img, on, np.zeros((0, 0), bool), np.zeros((0, 0), np.uint8), False, 3, one, one, img.copy())
    blob = np.ones((4, 4), np.uint8)
    restore_rims(blob, np.zeros((4, 4), bool), blob, 0.8, blob.copy())
    fill_holes(blob, blob.copy())
    postprocess(blob, np.zeros((4, 4), bool), 3, 7, True, 0.8, blob.copy(), blob.copy())
    drop_specks(blob.copy(), np.ones((4, 4), np.float32), 20, 0.25, 3)
    uniform_shadow(img, img, on, on.copy(), 3, 5, np.float32(0.0025))
    light_moments(img, img, on, 2)
    # every array C-contiguous, as the model passes them: a view (layout 'A') is another
    # signature, which the model's first call would then load or compile on its own thread
    small, quarter = np.zeros((2, 2), bool), np.zeros((4, 4), bool)
    match_outside(samples, img[:2, :2].copy(), small, small, 2, one, 1, small.copy())
    remnant_state(blob.copy(), blob.copy(), quarter, quarter, 8, quarter.copy(), quarter.copy())
    feedback(on, on, on, 3, False, img.copy(), one, one, one, one, on.copy())
    components(blob)
    labels(blob, np.empty((4, 4), np.int32))
    ghost_evidence(img, img, blob.astype(np.int32), 2)
    ghost_counts(blob.astype(np.int32), np.zeros(2, bool), blob.copy(), 4, 10, np.empty((4, 4), bool))
    fused.warm()
    _warm = True
