"""Mask post-processing with OpenCV's morphology and flood fill: opening (with its blobs' rims
restored), closing, hole filling.

Equivalent to separable min/max filters with the image edges neutral (an object touching the
border is not eroded away) and to ``scipy.ndimage.binary_fill_holes`` with its default
4-connected background (tests/core/test_decision.py checks the masks are identical), at about a
twentieth of their cost (measured at 320 x 240: 0.2 ms against 4 ms). This is the reference; with
``compiled``, :func:`core.streaming.kernels.postprocess` does every step in one call, to the same
masks (tests/core/test_kernels.py).
"""

import cv2
import numpy as np

_SQUARES: dict[int, np.ndarray] = {}


def square(side: int) -> np.ndarray:
    """A ``side`` x ``side`` square structuring element, uint8 (cached)."""
    if side not in _SQUARES:
        _SQUARES[side] = cv2.getStructuringElement(cv2.MORPH_RECT, (side, side))
    return _SQUARES[side]


def grow(mask: np.ndarray, side: int) -> np.ndarray:
    """``mask`` (h, w) bool dilated by a ``side`` x ``side`` square (OpenCV's), bool (h, w); ``mask``
    itself (not a copy) when ``side`` is at most 1."""
    return mask if side <= 1 else cv2.dilate(mask.view(np.uint8), square(side)).view(bool)


def fill_holes(mask: np.ndarray, compiled: bool = False) -> np.ndarray:
    """Set the background regions not 4-connected to the image border to foreground.

    Parameters
    ----------
    mask : ndarray, shape (h, w), uint8 (0 or 1)
    compiled : bool
        Run :func:`core.streaming.kernels.fill_holes` (the kernels loaded), to the same mask: the
        background's runs, found in the packed mask's words, joined row by row, where this flood
        fill and its copies pass over the pixels several times (0.026 against 0.044 ms a frame on
        highway's closed masks, back to back; a one-off timing).

    Returns
    -------
    ndarray, shape (h, w), uint8 (0 or 1)
    """
    if compiled:
        from core.streaming import kernels

        filled = np.empty_like(mask)
        kernels.fill_holes(mask, filled)
        return filled
    # A hole lies inside the foreground's bounding box. Outside it the background is one region
    # that touches the image border, so the box's ring of padding stands for it: the flood runs
    # over the box only (on the motorway video, 0.7 of the frame at the median).
    c0, r0, w, h = cv2.boundingRect(mask)
    out = mask.copy()
    if w == 0:
        return out
    padded = np.zeros((h + 2, w + 2), np.uint8)
    padded[1:-1, 1:-1] = mask[r0 : r0 + h, c0 : c0 + w]
    flood = np.zeros((h + 4, w + 4), np.uint8)
    # flood the background from the padded border; what it cannot reach is a hole
    cv2.floodFill(padded, flood, (0, 0), 2, flags=4)
    out[r0 : r0 + h, c0 : c0 + w] = padded[1:-1, 1:-1] != 2
    return out


def restore_rims(
    raw: np.ndarray, opened: np.ndarray, solidity: float, exclude: np.ndarray | None = None, compiled: bool = False
) -> np.ndarray:
    """Opening by reconstruction, for solid blobs only: a blob of the mask before the opening
    that the opening left mostly whole gets back the rim it nibbled.

    A blob is an 8-connected component of ``raw`` without ``exclude``. It is restored whole when
    the opening kept at least ``solidity`` of its pixels: the opening then took only its thin
    parts (an object's rim, a limb, a mirror), which are foreground. A cluster of specks (leaves
    in the wind, noise around a blob) loses most of itself to the opening and stays opened, so
    that its specks do not come back with the blob they touch (docs/algorithm.md, "Rims").

    Parameters
    ----------
    raw : ndarray, shape (h, w), uint8 (0 or 1)
        The mask before the opening.
    opened : ndarray, shape (h, w), uint8 (0 or 1)
        The same after the opening.
    solidity : float
        Share of a blob, in (0, 1], that must survive the opening.
    exclude : ndarray, shape (h, w), bool, optional
        Pixels never restored, nor counted in a blob (those that look like a cast shadow, whose
        specks would otherwise come back with the person who casts them).
    compiled : bool
        Run :func:`core.streaming.kernels.restore_rims` (the kernels loaded), to the same mask:
        the blobs are the packed mask's runs joined row by row, where OpenCV's labelling and
        numpy's counts pass over every pixel (0.067 against 0.30 ms a frame on highway's masks,
        back to back; a one-off timing).

    Returns
    -------
    ndarray, shape (h, w), uint8 (0 or 1)
        ``opened`` with the restored blobs (``opened`` itself when none is).
    """
    if compiled:
        from core.streaming import kernels

        out = opened.copy()
        ex = np.zeros(raw.shape, bool) if exclude is None else exclude
        return out if kernels.restore_rims(raw, ex, opened, float(solidity), out) else opened
    allow = raw if exclude is None else cv2.bitwise_and(raw, 1 - exclude.view(np.uint8))
    lost = np.flatnonzero(cv2.subtract(allow, opened))  # the blobs' pixels the opening took
    if lost.size == 0:
        return opened
    # the labels alone, the areas by counting: OpenCV's statistics cost 0.7 ms a frame, these 0.2
    n, labels = cv2.connectedComponents(allow, connectivity=8)
    area = np.bincount(labels[allow.view(bool)], minlength=n)
    kept = np.bincount(labels[opened.view(bool)], minlength=n)
    whole = kept >= np.float64(solidity) * area
    whole[0] = False  # the background of allow
    back = lost[whole[labels.reshape(-1)[lost]]]
    if back.size == 0:
        return opened
    out = opened.copy()
    out.reshape(-1)[back] = 1
    return out


def postprocess(mask: np.ndarray, open_size: int = 3, close_size: int = 7, fill: bool = True) -> np.ndarray:
    """Clean a binary foreground mask: opening, then closing, then hole filling.

    Parameters
    ----------
    mask : ndarray, shape (h, w), bool or uint8
        Foreground where nonzero.
    open_size, close_size : int
        Sides in pixels of the square structuring elements; 0 or 1 skips the step. The
        opening removes specks smaller than the square; the closing joins the parts of an
        object split where it matches the background.
    fill : bool
        Fill the holes of the blobs (the uniform inside of a vehicle scores low against the
        background but is foreground).

    Returns
    -------
    ndarray, shape (h, w), bool
    """
    return postprocess_restored(mask, open_size, close_size, fill)[0]


def postprocess_restored(
    mask: np.ndarray,
    open_size: int = 3,
    close_size: int = 7,
    fill: bool = True,
    restore: float = 0.0,
    exclude: np.ndarray | None = None,
    compiled: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`postprocess`, and the same with the solid blobs' rims restored after the opening.

    Parameters
    ----------
    mask, open_size, close_size, fill
        As :func:`postprocess`.
    restore : float
        The :func:`restore_rims` share (``open_restore``); 0 = none.
    exclude : ndarray, shape (h, w), bool, optional
        Pixels :func:`restore_rims` never restores.
    compiled : bool
        Run :func:`core.streaming.kernels.postprocess` (the kernels loaded): every step in one
        compiled call on masks packed 64 pixels to a word, to the same masks (0.14 against 0.49
        ms a frame on highway's raw masks, back to back; a one-off timing).

    Returns
    -------
    (ndarray, ndarray), each shape (h, w), bool
        The plain mask (what the model learns from) and the restored one (what it reports); the
        same array when no blob was restored.
    """
    a = np.asarray(mask)
    if compiled:
        from core.streaming import kernels

        raw = a.view(np.uint8) if a.dtype == bool else (a != 0).view(np.uint8)
        ex = np.zeros(raw.shape, bool) if exclude is None else exclude
        plain, reported = np.empty_like(raw), np.empty_like(raw)
        n = kernels.postprocess(raw, ex, open_size, close_size, fill, float(restore), plain, reported)
        plain_mask = plain.view(bool)
        return plain_mask, reported.view(bool) if n else plain_mask
    # a new array of 0 and 1 (a != 0 on bools costs ten times astype's 4 us)
    m: np.ndarray = a.astype(np.uint8) if a.dtype == bool else (a != 0).view(np.uint8)
    restored = None
    if open_size > 1:
        opened = cv2.morphologyEx(m, cv2.MORPH_OPEN, square(open_size))
        if restore > 0:
            restored = restore_rims(m, opened, restore, exclude)
            if restored is opened:
                restored = None
        m = opened
    plain = _close_fill(m, close_size, fill)
    return plain, plain if restored is None else _close_fill(restored, close_size, fill)


def _close_fill(m: np.ndarray, close_size: int, fill: bool) -> np.ndarray:
    """The closing and the hole filling of an opened mask (uint8 0 or 1), as bool."""
    if close_size > 1:
        m = cv2.morphologyEx(m, cv2.MORPH_CLOSE, square(close_size))
    if fill:
        m = fill_holes(m)
    return m.view(bool)  # still a new array of 0 and 1 (OpenCV's or fill_holes'): no copy needed


def drop_specks(
    mask: np.ndarray,
    v: np.ndarray,
    max_pixels: int,
    min_share: float,
    reach: int = 0,
    compiled: bool = False,
) -> np.ndarray:
    """The mask without its specks: the blobs (8-connected) of fewer than ``max_pixels`` pixels of
    which at least ``min_share`` have blinked lately (a blink count above 0), and whose bounding
    box is not near a large blob's.

    A leaf, a wave or a ripple that swings further than it has while the model watched it makes a
    small blob where the background has been flickering; an object is larger, or lies where the
    background has been still; a part of an object that the decision split off (a player's arm
    over a flickering court line) lies beside the rest of it (docs/algorithm.md, "Specks").

    Parameters
    ----------
    mask : ndarray, shape (h, w), bool
        The reported mask (not changed).
    v : ndarray, shape (h, w), float32
        The decision's blink counts (:class:`core.streaming.decision.PixelDecision`).
    max_pixels : int
        A blob of at least this many pixels is kept, pixels; 0 keeps every blob.
    min_share : float
        Share of a small blob's pixels with ``v > 0`` that makes it a speck.
    reach : int
        A small blob is kept when the bounding box of a blob of at least ``max_pixels`` pixels
        lies fewer than ``reach`` pixels from its own (fewer than ``reach`` columns and fewer than
        ``reach`` rows between the two boxes), pixels; 0 spares none.
    compiled : bool
        Run :func:`core.streaming.kernels.drop_specks` (the kernels loaded), to the same mask: the
        blobs are the packed mask's runs joined row by row.

    Returns
    -------
    ndarray, shape (h, w), bool
        ``mask`` itself when nothing is dropped, else a new array.
    """
    if max_pixels <= 0 or not mask.any():
        return mask
    if compiled:
        from core.streaming import kernels

        out = mask.copy()
        cleared = kernels.drop_specks(out.view(np.uint8), v, max_pixels, float(min_share), int(reach))
        return out if cleared else mask
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.view(np.uint8), connectivity=8)
    area = stats[:, cv2.CC_STAT_AREA]
    blinked = np.bincount(labels[v > 0], minlength=n)  # each blob's pixels that blinked lately
    speck = (area < max_pixels) & (blinked >= min_share * area)
    speck[0] = False  # the background
    large = area >= max_pixels
    large[0] = False
    if reach > 0 and speck.any() and large.any():
        x0, y0 = stats[:, cv2.CC_STAT_LEFT], stats[:, cv2.CC_STAT_TOP]
        x1, y1 = x0 + stats[:, cv2.CC_STAT_WIDTH], y0 + stats[:, cv2.CC_STAT_HEIGHT]  # exclusive
        big = np.flatnonzero(large)
        for i in np.flatnonzero(speck):
            near = (x0[i] - reach < x1[big]) & (x0[big] < x1[i] + reach)
            near &= (y0[i] - reach < y1[big]) & (y0[big] < y1[i] + reach)
            speck[i] = not near.any()
    if not speck.any():
        return mask
    return mask & ~speck[labels]
