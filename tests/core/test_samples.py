"""The background sample set (core.streaming.samples): consensus, conservative update, seeding."""

import numpy as np
import pytest

from core.streaming.samples import (
    DYNAMIC_SPEEDUP,
    NEIGHBOUR_GATHER_ROWS,
    RNG_BLOCK,
    SampleParams,
    SampleSet,
    to_bytes,
    to_values,
    window_samples,
)


def seeded(shape, values, **knobs):
    """A sample set whose every pixel holds ``values`` (K,) as its samples."""
    params = SampleParams(k=len(values), **knobs)
    s = SampleSet(shape, params)
    s.seed(np.tile(np.asarray(values, np.float32), (shape[0] * shape[1], 1)))
    return s


def test_a_bimodal_pixel_matches_both_modes_and_nothing_between():
    # leaf (0.2) and sky (0.8) in half the samples each: either value is background
    s = seeded((4, 5), [0.2] * 5 + [0.8] * 5, matches=2, radius=0.03)
    every = np.ones((4, 5), bool)
    still = np.zeros((4, 5), bool)
    for value in (0.2, 0.8, 0.2 + 0.029, 0.8 - 0.029):
        assert s.match(np.full((4, 5), value, np.float32), every, None, still).all(), value
    for value in (0.5, 0.2 + 0.031, 0.9):  # the radius is strict: 0.031 away matches no sample
        assert not s.match(np.full((4, 5), value, np.float32), every, None, still).any(), value
    # only candidates are tested
    cand = np.zeros((4, 5), bool)
    cand[1, 2] = True
    assert s.match(np.full((4, 5), 0.2, np.float32), cand, None, still).sum() == 1


def test_consensus_needs_matches_samples_and_widen_scales_the_radius():
    # one sample at 0.5, the rest far away: N = 2 is not reached, N = 1 is
    values = [0.5] + [0.0] * 9
    x = np.full((3, 3), 0.5, np.float32)
    every, still = np.ones((3, 3), bool), np.zeros((3, 3), bool)
    assert not seeded((3, 3), values, matches=2).match(x, every, None, still).any()
    assert seeded((3, 3), values, matches=1).match(x, every, None, still).all()
    # 0.05 away from two samples: outside radius 0.03, inside it widened by 2
    s = seeded((3, 3), [0.5, 0.5] + [0.0] * 8, matches=2, radius=0.03)
    x = np.full((3, 3), 0.55, np.float32)
    assert not s.match(x, every, np.ones((3, 3), np.float32), still).any()
    assert s.match(x, every, np.full((3, 3), 2.0, np.float32), still).all()


def test_the_count_holds_up_to_255_samples_and_more_are_refused():
    # the consensus counts matches in uint8: at K = 255 every sample matching must still reach
    # N = 255 (a wrapped count would be 255 + 1 = 0 at 256, hence the refusal)
    x, every, still = np.full((2, 2), 0.5, np.float32), np.ones((2, 2), bool), np.zeros((2, 2), bool)
    assert seeded((2, 2), [0.5] * 255, matches=255).match(x, every, None, still).all()
    assert not seeded((2, 2), [0.5] * 254 + [0.0], matches=255).match(x, every, None, still).any()
    with pytest.raises(ValueError, match="samples per pixel"):
        SampleSet((2, 2), SampleParams(k=256))


def test_a_dynamic_pixel_matches_a_neighbours_samples_and_a_still_one_does_not():
    shape = (5, 5)
    s = seeded(shape, [0.2] * 10)
    s.samples[np.ravel_multi_index((2, 3), shape)] = to_bytes(
        np.float32(0.8)
    )  # the swaying edge: the neighbour shows 0.8
    x = np.full(shape, 0.2, np.float32)
    x[2, 2] = 0.8  # the centre now shows what its right neighbour's background is
    cand = np.zeros(shape, bool)
    cand[2, 2] = True
    dynamic = np.zeros(shape, bool)
    assert not s.match(x, cand, None, dynamic).any()
    dynamic[2, 2] = True
    assert s.match(x, cand, None, dynamic)[2, 2]
    # a value no neighbour has is still foreground for a dynamic pixel
    x[2, 2] = 0.5
    assert not s.match(x, cand, None, dynamic).any()


#: The 8 neighbours' offsets (dy, dx), for the reference below.
NEIGHBOURS = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]


def reference_match(s, x, candidates, widen, dynamic):
    """The consensus pixel by pixel: its own samples, then (dynamic) each of its 3 x 3 neighbourhood."""
    h, w = s.shape
    p = s.params
    out = np.zeros(s.shape, bool)
    for i, j in zip(*np.nonzero(candidates), strict=True):
        r = np.float32(p.radius) * (np.float32(1) if widen is None else widen[i, j])
        near = [(i, j)]
        if dynamic[i, j]:
            near += [(min(max(i + dy, 0), h - 1), min(max(j + dx, 0), w - 1)) for dy, dx in NEIGHBOURS]
        out[i, j] = any(
            np.count_nonzero(np.abs(to_values(s.samples[a * w + b]) - x[i, j]) < r) >= p.matches for a, b in near
        )
    return out


@pytest.mark.parametrize("n_dynamic, gathered", [(40, True), (2400, False)])
def test_the_consensus_agrees_pixel_by_pixel_with_few_and_many_dynamic_pixels(n_dynamic, gathered):
    # A dynamic pixel unmatched by its own samples tries its neighbours': in one gather when few
    # (at most NEIGHBOUR_GATHER_ROWS rows, 8 a pixel), neighbour by neighbour when many. Both must
    # give what the rule gives pixel by pixel. The samples are random near the pixels' values, so
    # that about half the candidates match on their own and a part of the rest on a neighbour.
    rng = np.random.default_rng(3)
    shape = (48, 64)
    x = rng.random(shape, dtype=np.float32)
    s = SampleSet(shape, SampleParams(k=10, matches=2, radius=0.03))
    s.seed((x.reshape(-1, 1) + rng.normal(0, 0.15, (x.size, 10))).astype(np.float32))
    candidates = rng.random(shape) < 0.9
    dynamic = np.zeros(x.size, bool)
    dynamic[rng.choice(np.flatnonzero(candidates), n_dynamic, replace=False)] = True
    dynamic = dynamic.reshape(shape)
    widen = (1 + rng.random(shape)).astype(np.float32)
    for wd in (None, widen):
        got = s.match(x, candidates, wd, dynamic)
        own = s.match(x, candidates, wd, np.zeros(shape, bool))
        assert np.array_equal(got, reference_match(s, x, candidates, wd, dynamic))
        assert 0.2 < own[candidates].mean() < 0.8  # both outcomes are common
        assert (got & ~own).sum() >= 5  # and some dynamic pixels match only on a neighbour
        # the path this case is for: the unmatched dynamic pixels' rows against the limit
        assert ((dynamic & candidates & ~own).sum() * 8 <= NEIGHBOUR_GATHER_ROWS) == gathered


def test_nothing_matches_and_nothing_is_learnt_before_seeding():
    s = SampleSet((4, 4), SampleParams(k=4))
    x = np.zeros((4, 4), np.float32)
    assert not s.match(x, np.ones((4, 4), bool), None, np.zeros((4, 4), bool)).any()
    for t in range(32):
        s.update(np.full((4, 4), 0.7, np.float32), np.ones((4, 4), bool), np.ones((4, 4), bool), t)
    assert not s.ready and (s.samples == 0).all()


def test_update_is_conservative_and_follows_the_period():
    shape, k, period = (16, 16), 8, 16
    s = seeded(shape, [0.0] * k, period=period)
    learn = np.ones(shape, bool)
    learn[:8] = False  # the top half is under the mask
    still = np.zeros(shape, bool)
    x = np.full(shape, 1.0, np.float32)
    for t in range(period):
        s.update(x, learn, still, t)
    written = (s.samples == 255).sum(axis=1).reshape(shape)
    assert (written[:8] == 0).all()  # never learnt under the mask
    # one period: each still pixel has had exactly one turn, one sample replaced
    assert (written[8:] == 1).all()


def test_a_dynamic_pixel_is_updated_four_times_as_often_and_feeds_its_neighbours():
    shape, k, period = (16, 16), 50, 16
    s = seeded(shape, [0.0] * k, period=period)
    dynamic = np.zeros(shape, bool)
    dynamic[4:12, 4:12] = True
    x = np.full(shape, 1.0, np.float32)
    for t in range(period):
        s.update(x, np.ones(shape, bool), dynamic, t)
    own = (s.samples == 255).sum(axis=1).reshape(shape)
    # inside the dynamic block, DYNAMIC_SPEEDUP turns each, plus what neighbours wrote (K = 50:
    # a slot is rarely drawn twice)
    assert own[6:10, 6:10].mean() > DYNAMIC_SPEEDUP
    assert (own[0:2] == 1).all()  # far from the block: still pixels, one turn
    # the block's border ring receives propagated values: more than one write on average
    ring = own[3, 4:12]
    assert ring.mean() > 1.2


def test_the_update_is_a_function_of_seed_and_frame_counter():
    shape = (12, 12)
    rng = np.random.default_rng(3)
    frames = rng.random((40, *shape), dtype=np.float32)
    dyn = rng.random(shape) < 0.3

    def run(seed, start_state=None, start=0):
        s = seeded(shape, [0.5] * 10, seed=seed)
        if start_state is not None:
            s.load(start_state)
        for t in range(start, 40):
            s.update(frames[t], np.ones(shape, bool), dyn, t)
            if t == 19 and start_state is None:
                mid = {k: v.copy() for k, v in s.state().items()}
        return s.samples, mid if start_state is None else None

    full, mid = run(0)
    resumed, _ = run(0, mid, start=20)
    np.testing.assert_array_equal(full, resumed)  # a restored set continues exactly
    other, _ = run(1)
    assert not np.array_equal(full, other)


def reference_update(samples, x, learn, dynamic, t, p):
    """The update's rule written plainly (the model's own code until issue 26's twelfth step):
    the permutation of the pixels whole, a frame-sized turn mask, ``default_rng((seed, t))`` made
    at the frame, neighbours clipped at the border. ``samples`` (h * w, K) is updated in place."""
    h, w = x.shape
    order = np.random.default_rng(p.seed).permutation(h * w)
    fast = p.period // DYNAMIC_SPEEDUP
    offsets = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if dy or dx]
    rows, cols = np.divmod(np.arange(h * w), w)
    nbr = np.stack([np.clip(rows + dy, 0, h - 1) * w + np.clip(cols + dx, 0, w - 1) for dy, dx in offsets], axis=1)
    turn = dynamic.ravel().copy()
    turn[order[t % p.period :: p.period]] = True
    turn &= learn.ravel()
    due = order[t % fast :: fast]
    due = due[turn[due]]
    rng = np.random.default_rng((p.seed, t))
    samples[due, rng.integers(0, p.k, due.size)] = to_bytes(x.ravel()[due])
    spread = due[dynamic.ravel()[due]]
    if spread.size:
        q = nbr[spread, rng.integers(0, len(offsets), spread.size)]
        samples[q, rng.integers(0, p.k, spread.size)] = to_bytes(x.ravel()[spread])


def test_the_update_agrees_element_by_element_with_the_rule_written_plainly():
    # Random frames, masks and dynamic pixels; the frame counter runs on, jumps, and starts over
    # (a reset), so the generators made ahead (RNG_BLOCK frames at a time) are handed out in and
    # out of their order.
    shape, p = (23, 31), SampleParams(k=12, period=16, seed=5)
    rng = np.random.default_rng(8)
    s = SampleSet(shape, p)
    s.seed(rng.random((shape[0] * shape[1], p.k), dtype=np.float32))
    want = s.samples.copy()
    counters = [*range(150), *range(400, 430), *range(0, 70), 66, 67]  # 66 and 67 again: made afresh
    for t in counters:
        x = rng.random(shape, dtype=np.float32)
        learn, dynamic = rng.random(shape) < 0.7, rng.random(shape) < 0.2
        s.update(x, learn, dynamic, t)
        reference_update(want, x, learn, dynamic, t, p)
        np.testing.assert_array_equal(s.samples, want, err_msg=f"frame {t}")
    assert len(counters) > 2 * RNG_BLOCK


def test_window_samples_keeps_flicker_and_replaces_runs_by_M():
    N, m, n = 6, 2, 3
    X = np.stack([np.full((m, n), 0.1 * (i + 1), np.float32) for i in range(N)])
    M = np.full((m, n), 0.05, np.float32)
    E = np.zeros_like(X)
    E[1, 0, 0] = 0.5  # pixel (0, 0): flagged once (a leaf): kept
    E[2:4, 0, 1] = 0.5  # pixel (0, 1): flagged in entries 2 and 3 (an object staying): M
    E[0, 0, 2] = E[2, 0, 2] = 0.5  # pixel (0, 2): flagged in 0 and 2, not in a row: kept
    out = window_samples(X, M, E, e_cut=0.1, k=N)
    assert out.dtype == np.uint8
    p = np.arange(m * n).reshape(m, n)
    np.testing.assert_array_equal(out[p[0, 0]], to_bytes(X[:, 0, 0]))
    np.testing.assert_array_equal(out[p[0, 1]], to_bytes(np.float32([0.1, 0.2, 0.05, 0.05, 0.5, 0.6])))
    np.testing.assert_array_equal(out[p[0, 2]], to_bytes(X[:, 0, 2]))
    # K < N: the newest K entries; K > N: the entries again, oldest first
    np.testing.assert_array_equal(window_samples(X, M, E, 0.1, 2)[p[1, 1]], to_bytes(np.float32([0.5, 0.6])))
    every = np.float32([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.1, 0.2])
    np.testing.assert_array_equal(window_samples(X, M, E, 0.1, 8)[p[1, 1]], to_bytes(every))


def test_samples_are_stored_as_bytes_and_a_frames_own_levels_come_back_to_the_bit():
    # the model's frames are byte / 255 in float32 (core.streaming.background): stored and read
    # back, each of the 256 levels is the same float32; any value within half a level of itself
    levels = np.arange(256, dtype=np.uint8)
    frame = np.multiply(levels, np.float32(1 / 255), dtype=np.float32)
    np.testing.assert_array_equal(to_bytes(frame), levels)
    np.testing.assert_array_equal(to_values(to_bytes(frame)), frame)
    v = np.random.default_rng(3).random(10_000, dtype=np.float32)
    assert np.abs(to_values(to_bytes(v)) - v).max() <= 0.5 / 255 + 1e-7
    np.testing.assert_array_equal(to_bytes(np.float32([-0.2, 1.3])), [0, 255])  # clipped
    # a checkpoint written when the samples were float32 restores, stored as bytes
    s = SampleSet((2, 2), SampleParams(k=2))
    s.load({"samples": np.full((4, 2), 0.2, np.float32), "ready": np.asarray(True)})
    assert s.ready and s.samples.dtype == np.uint8 and (s.samples == 51).all()


def test_light_mapping_and_refused_state():
    s = seeded((2, 2), [0.5, 0.25])
    s.map_light(0.6, 0.02)
    # stored as bytes: within a gray level of 0.6 * (0.5, 0.25) + 0.02 (each end rounds by half of one)
    np.testing.assert_allclose(to_values(s.samples), np.tile([0.32, 0.17], (4, 1)), atol=1 / 255)
    with pytest.raises(ValueError, match="do not fit"):
        s.load({"samples": np.zeros((3, 2), np.float32), "ready": np.asarray(True)})
    with pytest.raises(ValueError, match="uint8 or finite floats"):
        s.load({"samples": np.zeros((4, 2), np.int16), "ready": np.asarray(True)})
    with pytest.raises(ValueError, match="finite"):
        s.load({"samples": np.full((4, 2), np.nan, np.float32), "ready": np.asarray(True)})
    with pytest.raises(ValueError, match="do not fit"):
        s.seed(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match="matches"):
        SampleSet((2, 2), SampleParams(k=4, matches=5))
    with pytest.raises(ValueError, match="multiple of 4"):
        SampleSet((2, 2), SampleParams(period=6))
