"""A background-only sample set per pixel, beside the solver's window: the model's memory of modes.

The window holds every ``window_stride``-th frame, objects included; its robust mean ``M`` and
spread give each pixel one band. A pixel whose background has several modes (a leaf and the sky
behind it, a wave's crest and trough) leaves that band although it shows a value its
background often takes. The sample set keeps, per pixel, ``K`` values that the model itself
called background, at the frame rate (ViBe's conservative update: Barnich and Van Droogenbroeck,
IEEE TIP 2011), and a pixel matches its background when at least ``N`` of them lie within a
radius of its value (sample consensus). The radius and the update follow how the pixel's
decision behaves, as in SuBSENSE (St-Charles, Bilodeau and Bergevin, IEEE TIP 2015); the rules
here are our own:

- the radius widens with the pixel's blink count, by the same factor as its band;
- a *dynamic* pixel (blink count above ``dynamic_blink``, :mod:`core.streaming.decision`) may
  match the samples of any pixel of its 3 x 3 neighbourhood (a swaying edge), is updated four
  times as often, and writes its value into a neighbour's samples too (ViBe's spatial
  propagation, which dissolves a stuck region of moving background from its edges); a still
  pixel does none of these, so a person who stands still is never learnt from the edges inwards;
- pixels near the mask (within ``update_margin``) are not updated: an object's missed edge does
  not enter the memory.

The samples start from the solver's window, not from the first frames (which may hold a slow
object in most of them): every cold refit seeds them with the window's samples, the robust mean
``M`` in place of those KDRSDL saw as an object (:func:`window_samples`).

Randomness is a function of the seed and the frame counter, so a model restored from a
checkpoint continues exactly as it would have.
"""

from dataclasses import dataclass

import cv2
import numpy as np

from core.streaming.postprocess import grow

#: A dynamic pixel is updated this many times as often as a still one.
DYNAMIC_SPEEDUP = 4
#: Offsets (dy, dx) of the 8 neighbours, in the order every neighbour index refers to
#: (:meth:`SampleSet.neighbours`, :func:`core.streaming.kernels._neighbour`).
NEIGHBOURS = np.array([(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx], np.int64)
#: Rows (pixels times neighbours) up to which the dynamic pixels' neighbours are counted in one
#: gather rather than neighbour by neighbour. Few pixels: the eight rounds' numpy calls cost more
#: than the rows a round skips (motorway video, 20-190 pixels: 0.45 against 0.52 ms a match, cold
#: caches). Many: the rounds read fewer rows, since a pixel leaves them at its first match (fall,
#: 1,600-2,800 pixels: all in one gather costs 1.51 against 1.30 ms).
#: docs/results.md, "Cameras per core".
NEIGHBOUR_GATHER_ROWS = 4096
#: A sample is kept as a byte, ``round(255 v)`` for a value ``v`` in [0, 1] (:func:`to_bytes`), and
#: read back as ``byte * (1 / 255)`` in float32 (:func:`to_values`): a frame's own gray levels
#: (``x = byte / 255``, as the model reads an 8-bit frame) come back to the bit, and any other
#: value within half a gray level (0.002 of a match radius of 0.03). A quarter of float32's bytes,
#: which matters after a 30-fps frame's wait, when the table (1.5 MB at 320 x 240 instead of 6) is
#: out of the caches: docs/results.md, "Speed".
LEVELS = np.float32(255)
#: ``1 / LEVELS`` in float32, as the frame's values are made (``core.streaming.background``).
STEP = np.float32(1 / 255)


def to_bytes(v: np.ndarray) -> np.ndarray:
    """Sample values (float32, any shape, intensity) as stored: ``uint8(clip(255 v + 0.5, 0, 255))``,
    in float32 as :func:`core.streaming.kernels.write_samples` computes it."""
    return np.clip(np.asarray(v, np.float32) * LEVELS + np.float32(0.5), np.float32(0), LEVELS).astype(np.uint8)


def to_values(q: np.ndarray) -> np.ndarray:
    """Stored samples (uint8, any shape) as values: ``float32(q) * STEP`` (float32, intensity)."""
    return q.astype(np.float32) * STEP


#: Frames whose random generators are made at once. ``default_rng((seed, t))`` made at each
#: frame cost 0.14 ms of a 30-fps frame's CPU (its code cold after the wait); made 64 at a time,
#: 0.02 ms a frame (docs/results.md, "Cameras per core").
RNG_BLOCK = 64


@dataclass(frozen=True)
class SampleParams:
    """Knobs of :class:`SampleSet` (model knobs ``samples``, ``sample_matches``, ``sample_radius``,
    ``sample_period``).

    Attributes
    ----------
    k : int
        Samples per pixel K.
    matches : int
        Samples within the radius that make a match N (<= K).
    radius : float
        Match radius of a still pixel, intensity in [0, 1].
    period : int
        A still background pixel replaces one of its samples every ``period`` frames, a dynamic
        one every ``period / 4`` frames; a multiple of 4.
    seed : int
        Seed of the update's random choices.
    compiled : bool
        Run the update as compiled loops (:mod:`core.streaming.kernels`; the same samples to
        the bit).
    """

    k: int = 20
    matches: int = 2
    radius: float = 0.03
    period: int = 16
    seed: int = 0
    compiled: bool = False


def window_samples(
    X: np.ndarray,
    M: np.ndarray,
    E: np.ndarray,
    e_cut: float,
    k: int,
    fg: np.ndarray | None = None,
    far: np.ndarray | None = None,
) -> np.ndarray:
    """Background samples from a solved window: its frames, but ``M`` where KDRSDL saw an object.

    A window sample is an object's when ``|E| > e_cut`` there and in the window entry before or
    after it (the entries are ``window_stride`` frames apart): an object stays, a moving
    background (leaves, water) flickers in and out of ``E`` and is kept, since it is what the
    samples are for (docs/algorithm.md, "Background samples": leaving every flagged sample out starves the trees'
    samples; keeping every one seeds periodic objects into the background).

    Parameters
    ----------
    X : ndarray, shape (N, m, n), float32
        The window's frames, intensity in [0, 1], oldest first.
    M : ndarray, shape (m, n)
        The window's robust mean.
    E : ndarray, shape (N, m, n)
        KDRSDL's sparse part of the window.
    e_cut : float
        Intensity above which a sample of ``E`` is flagged.
    k : int
        Samples per pixel.
    fg : ndarray, shape (N, m, n), bool, optional
        Window samples the model itself called foreground when they entered (the warm-up's
        learning): ``M`` in their place too.
    far : ndarray, shape (N, m, n), bool, optional
        Samples flagged as ``E``'s are (a still pixel's beyond ``pixel_floor`` from ``M``,
        :func:`core.streaming.refit.solve_window`).

    Returns
    -------
    ndarray, shape (m * n, k), uint8
        As stored (:func:`to_bytes`). Sample ``s`` of each pixel comes from the window's frame
        ``N - k + s`` (the newest k) when ``N >= k``, else from frame ``s mod N``.
    """
    N = X.shape[0]
    out = np.empty((X.shape[1] * X.shape[2], k), np.uint8)
    flagged = (E > e_cut) | (E < -e_cut)  # |E| > e_cut, without a window-sized float array
    if far is not None:
        flagged |= far
    # an object stays: flagged in two window entries in a row; a moving background flickers
    run = np.zeros_like(flagged)
    run[1:] |= flagged[1:] & flagged[:-1]
    run[:-1] |= flagged[:-1] & flagged[1:]
    if fg is not None:
        run |= fg
    for s in range(k):
        j = N - k + s if N >= k else s % N
        out[:, s] = to_bytes(np.where(run[j], M, X[j]).ravel())
    return out


class SampleSet:
    """K background samples per pixel, their consensus and their conservative update.

    Parameters
    ----------
    shape : (int, int)
        Frame shape (h, w), pixels.
    params : SampleParams

    Attributes
    ----------
    samples : ndarray, shape (h * w, K), uint8
        Row p holds pixel p's samples (row-major pixel index), as bytes (:func:`to_bytes`).
    ready : bool
        The samples were seeded (:meth:`seed`): before that, nothing matches and nothing is
        learnt.
    """

    def __init__(self, shape: tuple[int, int], params: SampleParams) -> None:
        if not 1 <= params.k <= 255:  # K within a byte's range (the knob allows up to 200)
            raise ValueError(f"samples per pixel must be in [1, 255], got {params.k}")
        if not 1 <= params.matches <= params.k:
            raise ValueError(f"sample matches must be in [1, {params.k}], got {params.matches}")
        if params.period < DYNAMIC_SPEEDUP or params.period % DYNAMIC_SPEEDUP:
            raise ValueError(f"sample period must be a multiple of {DYNAMIC_SPEEDUP}, got {params.period}")
        self.shape = shape
        self.params = params
        h, w = shape
        self.samples = np.zeros((h * w, params.k), np.uint8)
        self.ready = False
        # each pixel's update phase: pixel order[j] is due at frames t with t % period == j % period.
        # Kept split by j % (period / DYNAMIC_SPEEDUP), each part contiguous and in the order of j.
        order = np.random.default_rng(params.seed).permutation(h * w)
        fast = params.period // DYNAMIC_SPEEDUP
        self._order = [np.ascontiguousarray(order[a::fast]) for a in range(fast)]
        self._bitgens: dict[int, np.random.PCG64] = {}  # frame t -> its unused generator (_rng)
        self._kernels = None  # core.streaming.kernels when the update runs compiled
        self._due: np.ndarray | None = None  # the compiled update's buffers of due pixels
        if params.compiled:
            from core.streaming import kernels  # imported here: numba costs memory a numpy model never needs

            self._kernels = kernels

    def neighbours(self, idx: np.ndarray) -> np.ndarray:
        """The 8 neighbours of pixels ``idx`` (n,) int (row-major indices), clipped at the border, in
        the order of :data:`NEIGHBOURS`: (n, 8) intp. Computed for the pixels asked about, not kept
        for every pixel (4.7 MiB at 320 x 240)."""
        h, w = self.shape
        rows, cols = np.divmod(np.asarray(idx, np.intp)[:, None], w)
        rows = np.clip(rows + NEIGHBOURS[:, 0], 0, h - 1)
        cols = np.clip(cols + NEIGHBOURS[:, 1], 0, w - 1)
        out: np.ndarray = (rows * w + cols).astype(np.intp, copy=False)
        return out

    # ----------------------------------------------------------------- checkpoints
    def state(self) -> dict[str, np.ndarray]:
        """The learnt state as named arrays: ``samples`` (h * w, K) uint8 and ``ready`` (); not copied."""
        return {"samples": self.samples, "ready": np.asarray(self.ready)}

    def load(self, state: dict[str, np.ndarray]) -> None:
        """Take back what :meth:`state` gave (or a checkpoint's float32 samples, written before the
        samples were kept as bytes: stored as :func:`to_bytes` makes them).

        Raises
        ------
        ValueError
            If an array is missing, of another shape or dtype, or non-finite.
        """
        samples = self._stored(np.asarray(state["samples"]))
        self.samples, self.ready = samples, bool(state["ready"])

    def seed(self, samples: np.ndarray) -> None:
        """Start over from ``samples`` (h * w, K): uint8 as stored (:func:`window_samples`), or
        float32 values (stored as :func:`to_bytes` makes them).

        Raises
        ------
        ValueError
            If ``samples`` is of another shape or dtype, or non-finite.
        """
        self.samples, self.ready = self._stored(samples), True

    def _stored(self, samples: np.ndarray) -> np.ndarray:
        """A copy of ``samples`` as stored (uint8), checked (see :meth:`load`)."""
        if samples.shape != self.samples.shape:
            raise ValueError(f"samples of shape {samples.shape} do not fit frames of {self.shape}")
        if samples.dtype == np.uint8:
            return samples.copy()
        if samples.dtype.kind != "f" or not np.isfinite(samples).all():
            raise ValueError(f"samples must be uint8 or finite floats, got {samples.dtype}")
        return to_bytes(samples)

    # ----------------------------------------------------------------- consensus
    def match(self, x: np.ndarray, candidates: np.ndarray, widen: np.ndarray | None, dynamic: np.ndarray) -> np.ndarray:
        """The candidates whose value matches their background samples.

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        candidates : ndarray, shape (h, w), bool
            Pixels to test (those the bands call foreground); the others are not matched.
        widen : ndarray, shape (h, w), float32, or None
            Each pixel's radius factor (its band's blink widening, >= 1); None = 1.
        dynamic : ndarray, shape (h, w), bool
            Dynamic pixels, which may also match a neighbour's samples.

        Returns
        -------
        ndarray, shape (h, w), bool
            True where at least ``matches`` samples of the pixel (or, for a dynamic pixel, of one
            pixel of its 3 x 3 neighbourhood) lie strictly within the radius of its value.
        """
        out = np.zeros(self.shape, bool)
        if not self.ready:
            return out
        idx = np.flatnonzero(candidates)
        if idx.size == 0:
            return out
        p = self.params
        xv = x.ravel()[idx, None]
        r: np.ndarray = (
            np.full((1, 1), p.radius, np.float32) if widen is None else (p.radius * widen.ravel()[idx])[:, None]
        )
        ok = self._count(idx, xv, r) >= p.matches
        # dynamic pixels not matched by their own samples: any one neighbour's samples
        again = ~ok & dynamic.ravel()[idx]
        if again.any():
            todo = np.flatnonzero(again)
            nbr = self.neighbours(idx[todo])  # row j: pixel idx[todo[j]]'s
            n_nbr = len(NEIGHBOURS)
            if todo.size * n_nbr <= NEIGHBOUR_GATHER_ROWS:
                # every neighbour of every such pixel in one gather: (pixel, neighbour) rows
                rows = nbr.ravel()
                rk = r if r.size == 1 else np.repeat(r[todo], n_nbr, axis=0)
                hits = self._count(rows, np.repeat(xv[todo], n_nbr, axis=0), rk) >= p.matches
                ok[todo[hits.reshape(-1, n_nbr).any(axis=1)]] = True
            else:
                # each neighbour in turn, for the pixels no earlier neighbour matched
                for k in range(n_nbr):
                    rk = r if r.size == 1 else r[todo]
                    hit = self._count(nbr[:, k], xv[todo], rk) >= p.matches
                    ok[todo[hit]] = True
                    todo, nbr = todo[~hit], nbr[~hit]
                    if not todo.size:
                        break
        out.ravel()[idx[ok]] = True
        return out

    def match_outside(self, x: np.ndarray, pixels: np.ndarray, outside: np.ndarray, reach: int) -> np.ndarray:
        """The ``pixels`` whose value matches the samples of the nearest ``outside`` pixel on a ray.

        From each tested pixel, along its row and its column in both directions, the nearest pixel
        of ``outside`` within ``reach`` steps; the pixel matches when at least ``matches`` samples
        of one of those (up to four) lie strictly within ``radius`` of its value (the still radius,
        not widened). A pixel that shows what the background beside its blob shows: the remnant of
        a ghost (:mod:`core.streaming.ghosts`).

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        pixels : ndarray, shape (h, w), bool
            Pixels to test; none of them in ``outside``.
        outside : ndarray, shape (h, w), bool
            Pixels whose samples may be matched.
        reach : int
            Longest ray, pixels.

        Returns
        -------
        ndarray, shape (h, w), bool

        With the kernels loaded, :func:`core.streaming.kernels.match_outside` (the same pixels).
        """
        if self._kernels is not None and self._kernels.ready() and self.ready:
            out = np.empty(self.shape, bool)
            p = self.params
            self._kernels.match_outside(
                self.samples, np.ascontiguousarray(x), pixels, outside, reach, np.float32(p.radius), p.matches, out
            )
            return out
        out = np.zeros(self.shape, bool)
        ys, xs = np.nonzero(pixels)
        if not self.ready or ys.size == 0:
            return out
        h, w = self.shape
        # the rays over the tested pixels' bounding box grown by the reach
        y0, y1 = max(int(ys.min()) - reach, 0), min(int(ys.max()) + reach + 1, h)
        x0, x1 = max(int(xs.min()) - reach, 0), min(int(xs.max()) + reach + 1, w)
        box = outside[y0:y1, x0:x1]
        bh, bw = box.shape
        cols = np.broadcast_to(np.arange(bw), box.shape)
        rows = np.broadcast_to(np.arange(bh)[:, None], box.shape)
        ty, tx = ys - y0, xs - x0
        # the nearest outside column at or before / after each pixel (a tested pixel is not outside)
        left = np.maximum.accumulate(np.where(box, cols, -(2 * reach + 2)), axis=1)[ty, tx]
        right = np.minimum.accumulate(np.where(box, cols, bw + 2 * reach + 2)[:, ::-1], axis=1)[:, ::-1][ty, tx]
        up = np.maximum.accumulate(np.where(box, rows, -(2 * reach + 2)), axis=0)[ty, tx]
        down = np.minimum.accumulate(np.where(box, rows, bh + 2 * reach + 2)[::-1], axis=0)[::-1][ty, tx]
        p = self.params
        xv, r = x[ys, xs][:, None], np.full((1, 1), p.radius, np.float32)
        ok = np.zeros(ys.size, bool)
        for qy, qx, dist in (
            (ys, left + x0, tx - left),
            (ys, right + x0, right - tx),
            (up + y0, xs, ty - up),
            (down + y0, xs, down - ty),
        ):
            todo = np.flatnonzero(~ok & (dist <= reach))
            if todo.size:
                q = qy[todo] * w + qx[todo]
                ok[todo[self._count(q, xv[todo], r) >= p.matches]] = True
        out[ys[ok], xs[ok]] = True
        return out

    def _count(self, idx: np.ndarray, xv: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Samples of pixels ``idx`` (n,) within ``r`` ((n, 1) or (1, 1)) of ``xv`` (n, 1): int32 (n,)."""
        d = to_values(np.take(self.samples, idx, axis=0))  # np.take: as self.samples[idx], and faster
        d -= xv
        np.abs(d, out=d)
        # a row sum of bytes by OpenCV: 3x faster than count_nonzero(axis=1), and faster than
        # numpy's einsum by 13 us warm, 0.01 ms a call at a 30-fps frame
        return cv2.reduce((d < r).view(np.uint8), 1, cv2.REDUCE_SUM, dtype=cv2.CV_32S).ravel()

    # ----------------------------------------------------------------- update
    def update(self, x: np.ndarray, learn: np.ndarray, dynamic: np.ndarray, t: int) -> None:
        """Let frame ``t``'s background pixels replace samples (ViBe's conservative update).

        Once the samples are seeded, every pixel in ``learn`` whose turn it is (every ``period``
        frames; a dynamic one every ``period / 4``) replaces one random sample of its own by its
        value; a dynamic one also replaces a random sample of a random neighbour.

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        learn : ndarray, shape (h, w), bool
            Pixels that may be learnt (called background, away from the mask).
        dynamic : ndarray, shape (h, w), bool
            Dynamic pixels.
        t : int
            The frame counter (drives the schedule and the random choices).
        """
        if not self.ready:
            return
        xf, dyn_all, learn_all = x.ravel(), dynamic.ravel(), learn.ravel()
        p = self.params
        fast = p.period // DYNAMIC_SPEEDUP
        # pixel order[j] is due when j = t (mod period), or j = t (mod fast) if it is dynamic,
        # and it may be learnt; the due pixels are taken in the order of j. Among the j = t
        # (mod fast), held in the order of j, those with j = t (mod period) are every
        # (period / fast)-th from the ((t mod period) // fast)-th.
        order = self._order[t % fast]
        if self._kernels is not None and self._kernels.ready():
            self._update_compiled(xf, np.logical_not(learn_all).view(np.uint8), dyn_all, t)
            return
        turn = (dyn_all & learn_all)[order]
        phase = slice((t % p.period) // fast, None, p.period // fast)
        turn[phase] = learn_all[order[phase]]
        due = order[turn]
        dyn = dyn_all[due]
        rng = self._rng(t)
        # written through flat indices (row * K + sample): the same elements as samples[rows,
        # cols], at half the cost of numpy's two-array indexing. The samples are C-contiguous
        # (made by zeros or copy), so the flat array is a view and the writes land in them.
        assert self.samples.flags.c_contiguous
        flat = self.samples.reshape(-1)
        flat[due * p.k + rng.integers(0, p.k, due.size)] = to_bytes(xf[due])
        spread = due[dyn]
        if spread.size:
            pick = rng.integers(0, len(NEIGHBOURS), spread.size)
            q = np.take_along_axis(self.neighbours(spread), pick[:, None], axis=1)[:, 0]
            flat[q * p.k + rng.integers(0, p.k, spread.size)] = to_bytes(xf[spread])

    def update_outside(self, x: np.ndarray, mask: np.ndarray, margin: int, dynamic: np.ndarray, t: int) -> np.ndarray:
        """:meth:`update` with the pixels away from ``mask`` as those that may be learnt: outside
        its dilation by a ``margin`` x ``margin`` square (OpenCV's; at most 1, the mask itself).

        Parameters
        ----------
        x : ndarray, shape (h, w), float32
            The frame, intensity in [0, 1].
        mask : ndarray, shape (h, w), bool
            The frame's mask.
        margin : int
            The side of the dilation's square, pixels (``update_margin``).
        dynamic : ndarray, shape (h, w), bool
            Dynamic pixels.
        t : int
            The frame counter.

        Returns
        -------
        ndarray, shape (h, w), bool
            The dilated mask: the pixels not learnt (``mask`` itself when ``margin`` is at most 1).
            Compiled (the kernels loaded and the samples seeded), the dilation and the update are
            one call (:func:`core.streaming.kernels.learn_samples`), to the same bits.
        """
        if margin > 1 and self.ready and self._kernels is not None and self._kernels.ready():
            under = np.empty(mask.shape, np.uint8)
            self._update_compiled(np.ravel(x), under, flat(dynamic), t, mask.view(np.uint8), margin)
            return under.view(bool)
        under = grow(mask, margin)
        self.update(x, ~under, dynamic, t)
        return under

    def _update_compiled(
        self,
        xf: np.ndarray,
        under: np.ndarray,
        dynamic: np.ndarray,
        t: int,
        mask: np.ndarray | None = None,
        margin: int = 0,
    ) -> None:
        """:meth:`update` by :mod:`core.streaming.kernels`: the same due pixels in the same order,
        the same random draws (the frame's generator's stream, drawn in the kernel), the same
        writes. ``xf`` (h * w,) float32; ``dynamic`` (h * w,) bool. Without ``mask``, ``under``
        (h * w,) uint8 holds the pixels not learnt (:func:`core.streaming.kernels.update_samples`);
        with it, ``under`` (h, w) uint8 receives ``mask`` (h, w) uint8 dilated by ``margin``
        first (:func:`core.streaming.kernels.learn_samples`)."""
        assert self._kernels is not None
        p = self.params
        fast = p.period // DYNAMIC_SPEEDUP
        order = self._order[t % fast]
        if self._due is None or self._due.shape[1] < order.size:  # kept: 150 KB each at 320 x 240
            self._due = np.empty((2, order.size), np.int64)
        args = (
            self.samples,
            np.ascontiguousarray(xf),
            order,
            (t % p.period) // fast,
            p.period // fast,
        )
        rest = (dynamic, self.shape[1], self._due[0], self._due[1], pcg64_words(self._bit_generator(t)))
        if mask is None:
            self._kernels.update_samples(*args, flat(under), *rest)
        else:
            self._kernels.learn_samples(np.ascontiguousarray(mask), margin, under, *args, *rest)

    def _rng(self, t: int) -> np.random.Generator:
        """Frame ``t``'s random generator, the same stream as ``np.random.default_rng((seed, t))``."""
        return np.random.Generator(self._bit_generator(t))

    def _bit_generator(self, t: int) -> np.random.PCG64:
        """Frame ``t``'s PCG64 bit generator, seeded by ``(seed, t)``.

        The generators of :data:`RNG_BLOCK` frames from ``t`` on are made together, and each is
        handed out once: a frame counter that starts over (a reset) gets fresh ones.
        """
        bitgen = self._bitgens.pop(t, None)
        if bitgen is None:
            seed = self.params.seed
            self._bitgens = {u: np.random.PCG64(np.random.SeedSequence((seed, u))) for u in range(t + 1, t + RNG_BLOCK)}
            bitgen = np.random.PCG64(np.random.SeedSequence((seed, t)))
        return bitgen

    def adopt(self, where: np.ndarray, x: np.ndarray, t: int) -> None:
        """Start pixels ``where`` (h, w) bool over from frame ``t``'s values ``x`` (h, w) float32:
        each of their samples takes the value of a random pixel of its 3 x 3 neighbourhood (the pixel
        included), as ViBe initialises its samples from one frame, so that they hold the
        neighbourhood's spread. For an uncovered ghost (:mod:`core.streaming.ghosts`)."""
        if not self.ready:
            return
        idx = np.flatnonzero(where)
        if not idx.size:
            return
        k, n_nbr = self.params.k, len(NEIGHBOURS)
        rng = np.random.default_rng((self.params.seed, t, 1))
        pick = rng.integers(0, n_nbr + 1, (idx.size, k))  # n_nbr: the pixel itself
        nbr = np.concatenate([self.neighbours(idx), idx[:, None]], axis=1)
        self.samples[idx] = to_bytes(x.ravel()[np.take_along_axis(nbr, pick, axis=1)])

    def map_light(self, gain: float, offset: float) -> None:
        """Bring the samples to a new light: ``s -> gain * s + offset`` (:mod:`core.streaming.light`),
        stored again as bytes."""
        values = to_values(self.samples)
        values *= np.float32(gain)
        values += np.float32(offset)
        self.samples = to_bytes(values)


def flat(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous 1-D array (a view when it is contiguous already), for the compiled
    kernels (:mod:`core.streaming.kernels`)."""
    return np.ascontiguousarray(a).reshape(-1)


_WORD = (1 << 64) - 1


def pcg64_words(bitgen: np.random.PCG64) -> np.ndarray:
    """A PCG64 bit generator's state as :func:`core.streaming.kernels.draw_integers` advances it.

    Parameters
    ----------
    bitgen : numpy.random.PCG64
        Not advanced: the kernel draws from a copy of its state (a frame's generator is used once).

    Returns
    -------
    ndarray, shape (6,), uint64
        The 128-bit LCG state's high and low words, the increment's high and low words, whether a
        32-bit half of the last draw is kept (``has_uint32``) and that half (``uinteger``), as
        ``bitgen.state`` gives them.
    """
    st = bitgen.state
    state, inc = st["state"]["state"], st["state"]["inc"]
    return np.array([state >> 64, state & _WORD, inc >> 64, inc & _WORD, st["has_uint32"], st["uinteger"]], np.uint64)
