"""The per-pixel decision (core.streaming.decision) and the OpenCV post-processing (core.streaming.postprocess)."""

import cv2
import numpy as np
import pytest
import scipy.ndimage

from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.decision import DecisionParams, PixelDecision, pixel_spread
from core.streaming.params import BackgroundParams
from core.streaming.postprocess import drop_specks, fill_holes, postprocess, postprocess_restored, restore_rims, square


def test_pixel_spread_recovers_each_pixels_noise_and_ignores_foreground_in_E():
    rng = np.random.default_rng(0)
    N, m, n = 400, 8, 10
    sigma = np.linspace(0.005, 0.05, m * n, dtype=np.float32).reshape(m, n)
    M = np.full((m, n), 0.5, np.float32)
    X = (M + sigma * rng.standard_normal((N, m, n))).astype(np.float32)
    E = np.zeros_like(X)
    X[::5, 2:4, 3:6] = 0.95  # an object in a fifth of the frames, which KDRSDL put in E
    E[::5, 2:4, 3:6] = 0.45
    est = pixel_spread(X, M, E, e_cut=0.05)
    # 400 samples (320 where the object was): the sigma estimate's relative standard error is
    # about 0.76 / sqrt(320) = 4%; 15% is over three of those.
    np.testing.assert_allclose(est, sigma, rtol=0.15)
    # every sample left out: 0, so the floor applies
    assert (pixel_spread(X, M, np.ones_like(E), e_cut=0.05) == 0).all()


def test_band_tolerance_absorbs_a_one_pixel_shift_of_an_edge():
    bg = np.zeros((20, 20), np.float32)
    bg[:, 10:] = 0.8  # a vertical edge
    shifted = np.zeros_like(bg)
    shifted[:, 11:] = 0.8  # the camera moved one pixel
    sigma = np.full_like(bg, 0.01)
    strict = PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0))
    everywhere = DecisionParams(tolerance=3, tolerance_blink=0, blink_gain=0)
    tolerant = PixelDecision(bg.shape, everywhere)
    assert strict.raw(shifted, bg, sigma)[:, 10].all()  # the edge column lights up without tolerance
    assert not tolerant.raw(shifted, bg, sigma).any()  # it matches its neighbour's band with it
    # a real object is still found with tolerance
    obj = bg.copy()
    obj[5:9, 2:6] = 0.9
    assert tolerant.raw(obj, bg, sigma)[5:9, 2:6].sum() >= 4


def test_tolerance_applies_where_the_background_blinks_not_over_a_still_one():
    bg = np.zeros((20, 20), np.float32)
    bg[:, 10:] = 0.8
    sigma = np.full_like(bg, 0.01)
    shifted = np.zeros_like(bg)
    shifted[:, 11:] = 0.8  # the edge moved one pixel
    gated = PixelDecision(bg.shape, DecisionParams(tolerance=3, tolerance_blink=0.5, blink_gain=0))
    # over a still background (v = 0 everywhere) the tolerance is off: the moved edge is seen, as an
    # object's edge over a still background is (the tolerance would erode it by a pixel)
    assert gated.raw(shifted, bg, sigma)[:, 10].all()
    # where the pixels have been blinking (a shaking camera), it is on
    gated.v[:, 8:13] = 1.0
    assert not gated.raw(shifted, bg, sigma).any()
    # a pixel whose blink count is at the threshold, not above it, has no tolerance
    gated.v[:, 8:13] = 0.5
    assert gated.raw(shifted, bg, sigma)[:, 10].all()


def test_a_cast_shadow_is_vetoed_an_object_of_the_same_darkness_is_not():
    rng = np.random.default_rng(1)
    bg = (0.5 + 0.3 * rng.random((40, 40))).astype(np.float32)  # a textured background
    sigma = np.full_like(bg, 0.01)
    x = bg.copy()
    x[5:15, 5:15] *= 0.75  # a shadow: the background's texture, scaled by 0.75
    x[25:35, 25:35] = 0.4  # an object about as dark as the shadow (0.49 on average), without the texture
    dec = PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0, shadow=True))
    mask = dec.raw(x, bg, sigma)
    assert not mask[7:13, 7:13].any()
    # the shadow's 2-pixel rim stays (its 5 x 5 neighbourhoods straddle the shadow's edge) ...
    assert mask[5:15, 5:15].sum() == 100 - 36
    # ... and the opening of the post-processing removes it (thinner than 3 pixels)
    assert not postprocess(mask, 3, 0, False)[5:15, 5:15].any()
    # the object replaces the texture (its ratio x / bg spreads by about 0.09, not < 0.03): kept
    assert mask[25:35, 25:35].all()
    off = PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0, shadow=False))
    assert off.raw(x, bg, sigma)[5:15, 5:15].all()  # without the test, the shadow is foreground
    # too dark for a shadow (ratio 0.5 < 0.6): foreground even with a uniform ratio
    x2 = bg.copy()
    x2[5:15, 5:15] *= 0.5
    assert (
        PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0, shadow=True))
        .raw(x2, bg, sigma)[5:15, 5:15]
        .all()
    )


def test_blink_feedback_widens_the_band_where_decisions_flicker_not_under_objects():
    shape = (30, 30)
    bg = np.full(shape, 0.5, np.float32)
    sigma = np.full(shape, 0.01, np.float32)
    dec = PixelDecision(shape, DecisionParams(tolerance=1, floor=0.06))
    for t in range(40):
        x = bg.copy()
        x[2:6, 2:6] = 0.5 + (0.1 if t % 2 else 0.0)  # flickering background (water, leaves)
        x[15:25, 15:25] = 0.9  # an object that stays
        raw = dec.raw(x, bg, sigma)
        dec.feedback(raw, raw)  # no post-processing: the objects are the raw mask
    # Only the on-flips count (an off-flip is inside the previous frame's detection): v climbs
    # until the band covers the flicker, 0.06 (1 + 0.1 v) > 0.1 at v > 6.7, and the firing stops.
    assert dec.v[2:6, 2:6].min() > 6.7
    assert dec.v[15:25, 15:25].max() == 0  # the object's pixels never flip
    # the flicker no longer fires once its band has widened: 0.06 * (1 + 0.1 * v) > 0.1
    x = bg.copy()
    x[2:6, 2:6] = 0.6
    assert not dec.raw(x, bg, sigma)[2:6, 2:6].any()


@pytest.mark.parametrize("seed", range(5))
def test_postprocess_equals_the_scipy_reference(seed):
    """OpenCV's morphology and flood fill give exactly scipy's min/max filters and binary_fill_holes."""
    rng = np.random.default_rng(seed)
    mask = scipy.ndimage.binary_dilation(rng.random((60, 80)) < 0.02, iterations=3) ^ (rng.random((60, 80)) < 0.05)
    m = mask.astype(np.uint8)
    m = scipy.ndimage.maximum_filter(scipy.ndimage.minimum_filter(m, 3), 3)
    m = scipy.ndimage.minimum_filter(scipy.ndimage.maximum_filter(m, 7), 7)
    want = scipy.ndimage.binary_fill_holes(m.astype(bool))
    np.testing.assert_array_equal(postprocess(mask, 3, 7, True), want)


def test_fill_holes_over_the_bounding_box_equals_the_scipy_reference():
    """The flood runs over the foreground's bounding box only: the same holes as scipy's flood of
    the whole frame, with blobs touching the border or the box's edge, nested rings, an empty
    and a full mask."""
    rng = np.random.default_rng(11)
    masks = [np.zeros((30, 40), bool), np.ones((30, 40), bool)]
    ring = np.zeros((30, 40), bool)
    ring[5:25, 8:30] = True
    ring[8:22, 11:27] = False  # a hole
    ring[11:19, 14:24] = True  # an island in it, with a hole of its own
    ring[13:17, 17:21] = False
    masks.append(ring)
    open_ring = ring.copy()
    open_ring[8:10, 8:11] = False  # the hole opens onto the box's edge: not a hole any more
    masks.append(open_ring)
    corner = np.zeros((30, 40), bool)
    corner[:10, :12] = True  # a blob in the corner, its hole 1 pixel from the frame's border
    corner[1:4, 1:4] = False
    masks.append(corner)
    for density in (0.02, 0.1, 0.4, 0.6):
        for _ in range(10):
            masks.append(scipy.ndimage.binary_dilation(rng.random((37, 53)) < density / 4, iterations=2))
            masks.append(rng.random((37, 53)) < density)
    for mask in masks:
        got = fill_holes(mask.astype(np.uint8))
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got.astype(bool), scipy.ndimage.binary_fill_holes(mask))
    assert fill_holes(ring.astype(np.uint8))[9, 12] == 1 and fill_holes(open_ring.astype(np.uint8))[9, 12] == 0


def still_object_recalls(update_blend, frames, seed=1, **knobs):
    """Each frame's recall on an object that walks in at frame 100 and stands still (``seed``: the
    scene's; ``knobs``: the model's other knobs)."""
    rng = np.random.default_rng(seed)
    bg = (0.3 + 0.2 * rng.random((48, 64))).astype(np.float32)
    sub = KDRSDLBackgroundSubtractor(update_blend=update_blend, **knobs)
    for t in range(frames):
        x = bg + 0.01 * rng.standard_normal(bg.shape).astype(np.float32)
        if t >= 100:
            x[10:30, 20:40] = 0.9
        yield float((sub.apply(np.clip(x, 0, 1))[10:30, 20:40] > 0).mean())


def still_object_recall(update_blend, frames=300, **knobs):
    """Recall on the still object of :func:`still_object_recalls` at frame ``frames - 1``."""
    return list(still_object_recalls(update_blend, frames, **knobs))[-1]


#: The model's default weight of the conditional update (update_blend).
DEFAULT_BLEND = BackgroundParams().update_blend


def still_object_fade(seed, frames=3000, update_blend=DEFAULT_BLEND, **knobs):
    """The first frame from 300 on at which the still object's recall is below 0.1, or None."""
    for t, recall in enumerate(still_object_recalls(update_blend, frames, seed, **knobs)):
        if t >= 300 and recall < 0.1:
            return t
    return None


def test_a_still_object_stays_foreground_longer_with_the_conditional_update():
    # The default window spans 240 frames. Learnt as it is, the object is background 200 frames
    # after it stopped (measured recall 0.0); learnt at 0.2 per window entry it is still whole
    # (1.0). It fades in the end all the same, as a ghost must (the test below).
    assert still_object_recall(DEFAULT_BLEND) > 0.9
    assert still_object_recall(0.0) < 0.1


def test_a_still_object_fades_in_the_end_on_every_scene():
    # The conditional update slows the fade; it must not stop it, or a ghost stays for good.
    # Measured at the defaults (update_blend 0.8) on five scenes: gone at frames 1886, 2473, 2504,
    # 2473 and 2236 (63-83 s at 30 fps); at 0.7, the default before 2026-11-30, at 1193, 1033,
    # 1193, 793 and 953; at 0.85 at 2646-3433. Coarse refits kept it for good on one or two of
    # these (tests/core/test_coarse.py). Learnt as it is (update_blend 0) it is gone before frame
    # 300; at update_blend 0.95 it stays on every scene.
    fades = [still_object_fade(seed) for seed in range(1, 6)]
    assert all(f is not None for f in fades), fades
    # issue 44: a stopped object stays foreground at least as long as v3 kept it (the shortest
    # of v3's five, 793 frames)
    assert min(fades) >= 793, fades


def test_a_noisy_cast_shadow_is_vetoed_thin_dark_limbs_are_not():
    # CDnet's shadows on pedestrians: the ratio x / bg at 0.72-0.79, but its 5 x 5 spread 0.048 at
    # the median (JPEG and sensor noise), so the unsmoothed test (< 0.03) fired on 10% of them.
    rng = np.random.default_rng(3)
    bg = np.full((60, 60), 0.6, np.float32)
    sigma = np.full_like(bg, 0.03)  # the background's own noise, as the window measures it
    x = bg.copy()
    x[10:40, 10:40] *= 0.8  # a shadow ...
    x += 0.03 * rng.standard_normal(bg.shape).astype(np.float32)  # ... and the noise (ratio spread 0.05)
    x[45:58, 20:22] = 0.3  # a leg: 2 pixels wide, ratio 0.5
    x[45:58, 30:32] = 0.48  # an arm as dark as the shadow (ratio 0.8), 2 pixels wide
    raw = PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0)).raw(x, bg, sigma)
    unsmoothed = PixelDecision(bg.shape, DecisionParams(tolerance=1, blink_gain=0, shadow_smooth=1, shadow_spread=0.03))
    # measured share of the shadow's inside flagged: 0.014 with the ratio smoothed over 3 x 3 (the
    # few pixels whose noisy ratio leaves (0.7, 0.92), specks that the opening removes); 0.86 with
    # each pixel's own ratio and the old spread 0.03
    assert raw[14:36, 14:36].mean() < 0.05
    assert unsmoothed.raw(x, bg, sigma)[14:36, 14:36].mean() > 0.7
    # the limbs' neighbourhoods straddle their edges, so their ratio is not uniform: foreground
    assert raw[47:56, 20:22].all() and raw[47:56, 30:32].all()


def test_restore_rims_gives_a_solid_blob_its_thin_parts_back_and_leaves_specks_and_shadows_out():
    raw = np.zeros((40, 60), np.uint8)
    raw[10:20, 10:20] = 1  # a car's body: 100 pixels, all kept by a 3 x 3 opening
    raw[14, 20:26] = 1  # its mirror, 1 pixel thin: 6 pixels, lost to the opening
    raw[20, 12] = 1  # a pixel of its rim
    raw[15, 0:10] = 1  # a shadow's edge from its side, 1 pixel thin
    shaded = np.zeros(raw.shape, bool)
    shaded[15, 0:10] = True  # darker than the background within the shadow ratio
    raw[10:13, 40:43] = 1  # a cluster of leaves: a 3 x 3 core the opening keeps ...
    rows, cols = np.mgrid[13:20, 38:47]
    raw[rows, cols] |= ((rows + cols) % 2 == 0).astype(np.uint8)  # ... and a field of specks, 8-connected to it
    opened = cv2.morphologyEx(raw, cv2.MORPH_OPEN, square(3))
    assert opened.sum() == 100 + 9 and opened[10:20, 10:20].all() and opened[10:13, 40:43].all()

    got = restore_rims(raw, opened, 0.8, shaded).view(bool)
    car = np.zeros(raw.shape, bool)
    car[10:20, 10:20] = car[14, 20:26] = car[20, 12] = True  # 107 pixels, 100 kept by the opening: 0.93
    np.testing.assert_array_equal(got[:, :30], car[:, :30])  # the mirror and the rim back, not the shadow's edge
    # the leaves: 9 of 9 + 31 pixels kept (0.23 < 0.8): only the opened core stays
    np.testing.assert_array_equal(got[:, 30:], opened[:, 30:].view(bool))
    # a share low enough takes the specks back too; without the exclusion, the shadow's edge
    # joins the car (100 of 117 pixels kept: 0.85)
    assert restore_rims(raw, opened, 0.2, shaded)[13:20, 38:47].sum() == 31
    assert restore_rims(raw, opened, 0.8)[15, 0:10].all()
    # the plain and the restored masks from the same opening; the same array when nothing is restored
    plain, restored = postprocess_restored(raw, 3, 0, False, 0.8, shaded)
    np.testing.assert_array_equal(plain, postprocess(raw, 3, 0, False))
    np.testing.assert_array_equal(restored, got)
    plain, restored = postprocess_restored(opened, 3, 7, True, 0.8)
    assert restored is plain


def test_a_small_blob_that_blinked_is_a_speck_and_an_object_is_not():
    """drop_specks drops a small blob over pixels that blinked lately (leaves that swung further),
    keeps one of the same size over still pixels (a small object), and keeps a large blob over
    blinking pixels (an object passing in front of leaves)."""
    mask = np.zeros((60, 80), bool)
    v = np.zeros((60, 80), np.float32)
    mask[5:10, 5:10] = True  # 25 pixels, every one blinked
    v[3:12, 3:12] = 2.0
    mask[5:10, 40:45] = True  # 25 pixels over a still background
    mask[30:50, 20:60] = True  # 800 pixels, half of them blinked
    v[30:40, 20:60] = 1.0
    out = drop_specks(mask, v, max_pixels=100, min_share=0.25)
    assert not out[5:10, 5:10].any()
    assert out[5:10, 40:45].all() and out[30:50, 20:60].all()
    assert np.count_nonzero(out) == np.count_nonzero(mask) - 25
    # a small blob of which a fifth blinked stays at a quarter
    v2 = np.zeros_like(v)
    v2[5, 5:10] = 1.0
    assert drop_specks(mask, v2, 100, 0.25) is mask
    assert not drop_specks(mask, v2, 100, 0.2)[5:10, 5:10].any()
    assert drop_specks(mask, v, 0, 0.25) is mask  # 0: the rule is off


def test_a_speck_beside_an_object_is_part_of_it():
    """With a reach, a small blinking blob whose box lies fewer than ``reach`` rows and columns from
    a large blob's box is kept (an arm the decision split off the body), and one further away is
    dropped: the boundary is exact (two empty rows between the boxes: kept at reach 3, dropped at
    2)."""
    mask = np.zeros((60, 80), bool)
    v = np.ones((60, 80), np.float32)  # every pixel blinked
    mask[30:50, 20:60] = True  # the object, 800 pixels
    mask[52:55, 25:30] = True  # 15 pixels, rows 50 and 51 between it and the object
    mask[5:10, 5:10] = True  # 25 pixels, 20 rows from the object
    kept = drop_specks(mask, v, max_pixels=100, min_share=0.25, reach=3)
    assert kept[52:55, 25:30].all() and not kept[5:10, 5:10].any()
    assert np.count_nonzero(kept) == np.count_nonzero(mask) - 25
    dropped = drop_specks(mask, v, 100, 0.25, reach=2)
    assert not dropped[52:55, 25:30].any() and not dropped[5:10, 5:10].any()
    assert dropped[30:50, 20:60].all()
    # the same with the compiled rule, on the same masks
    np.testing.assert_array_equal(drop_specks(mask, v, 100, 0.25, 3, compiled=True), kept)
    np.testing.assert_array_equal(drop_specks(mask, v, 100, 0.25, 2, compiled=True), dropped)
