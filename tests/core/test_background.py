"""The streaming background model (issue 3): accuracy on generated and real video, API, errors."""

import io

import cv2
import numpy as np
import pytest
from conftest import HIGHWAY, cdnet_counts, need

from core.evaluation.metrics import Confusion, cdnet_labels, confusion
from core.evaluation.scene import SyntheticScene
from core.streaming.background import KDRSDLBackgroundSubtractor
from core.streaming.params import BackgroundParams
from core.streaming.snapshot import settings
from core.streaming.window import WindowSchedule


def test_synthetic_scene_f_measure_after_first_window():
    scene = SyntheticScene(240, 320)
    sub = KDRSDLBackgroundSubtractor()
    mog2 = cv2.createBackgroundSubtractorMOG2(detectShadows=False)
    ours, theirs = Confusion(0, 0, 0, 0), Confusion(0, 0, 0, 0)
    for t in range(300):
        frame = scene.frame_uint8(t)
        mask, mask2 = sub.apply(frame), mog2.apply(frame)
        assert mask.dtype == np.uint8 and mask.shape == (240, 320) and set(np.unique(mask)) <= {0, 255}
        if t >= 100:  # the window has been solved on its first full span by then
            ours = ours + confusion(mask, scene.fgmask(t))
            theirs = theirs + confusion(mask2, scene.fgmask(t))
    # Measured 0.818 (MOG2 0.584). The global threshold of v1 scored 1.000 here: this scene's
    # objects are periodic, so at the window's stride they sit in the same place in most window
    # entries, and the conditional update (0.3 of each foreground pixel is learnt) leaves soft
    # ghosts in M and widens the spread along the lanes. On real video the same update is worth
    # +0.15 mean F (README ablation). 0.75 leaves room for timing of the cold fits.
    assert ours.f_measure > 0.75
    assert ours.f_measure > theirs.f_measure + 0.15


# measured F with the per-pixel decision: mean 0.864, last 0.901, fit 0.583 ("fit" absorbs part of
# the objects into L: tests/bench/bench_fit.py measures 40% of the foreground on CDnet highway);
# "moving" is "mean" on this scene, whose background does not move
@pytest.mark.parametrize("frame_model, bar", [("moving", 0.8), ("mean", 0.8), ("last", 0.8), ("fit", 0.5)])
def test_every_frame_model_runs_and_detects(frame_model, bar):
    scene = SyntheticScene(120, 160, seed=6)
    sub = KDRSDLBackgroundSubtractor(frame_model=frame_model)
    total = Confusion(0, 0, 0, 0)
    for t in range(300):
        mask = sub.apply(scene.frame_uint8(t))
        if t >= 150:
            total = total + confusion(mask, scene.fgmask(t))
    assert total.f_measure > bar, (frame_model, total.f_measure)


def test_background_image_is_the_scene_background():
    scene = SyntheticScene(120, 160, seed=3)
    sub = KDRSDLBackgroundSubtractor()
    assert sub.getBackgroundImage() is None
    for t in range(200):
        sub.apply(scene.frame_uint8(t))
    bg = sub.getBackgroundImage().astype(float) / 255
    assert bg.shape == (120, 160)
    # within 4 gray levels of the true background on average (noise 2.5, drift up to 5%)
    assert np.mean(np.abs(bg - scene.background)) < 4 / 255 + 0.05 * scene.background.mean()


def test_the_score_is_the_frames_distance_from_its_background_made_when_asked():
    # The score is made at its first access from the frame and background the result holds; with
    # the per-pixel bands deciding (threshold None) the model itself never reads it.
    scene = SyntheticScene(60, 80, seed=4)
    sub = KDRSDLBackgroundSubtractor(mask_resolution="processing")
    for t in range(120):
        frame = scene.frame_uint8(t)
        res = sub.process(frame)
        if t in (5, 119):  # before the first solution (the global threshold) and after it
            np.testing.assert_array_equal(res.frame_processing, frame * np.float32(1 / 255))
            want = np.abs(res.frame_processing - res.background_processing)
            np.testing.assert_array_equal(res.score_processing, want)
            assert res.score_processing is res.score_processing and res.score.shape == frame.shape
    assert res.threshold is None
    assert 0 < (res.score_processing > 0.1).mean() < 0.5  # the scene's objects, not every pixel


def test_shape_change_resets_and_bad_frames_raise():
    sub = KDRSDLBackgroundSubtractor()
    for _ in range(5):
        sub.apply(np.full((40, 60), 100, np.uint8))
    assert sub.apply(np.full((30, 50), 100, np.uint8)).shape == (30, 50)
    assert sub.n_frames == 1
    with pytest.raises(ValueError, match=r"non-empty \(h, w\) gray or \(h, w, 3\) BGR"):
        sub.apply(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="non-empty"):
        sub.apply(np.zeros((0, 4), np.uint8))
    with pytest.raises(ValueError, match="non-finite"):
        sub.apply(np.full((30, 50), np.nan, np.float32))
    with pytest.raises(ValueError, match=r"window must be an integer in \[2, 1000\], got 1"):
        KDRSDLBackgroundSubtractor(window=1)
    with pytest.raises(ValueError, match="unknown parameter 'windw'"):
        KDRSDLBackgroundSubtractor(windw=3)


def test_one_import_a_factory_and_bgr_frames_as_opencv_takes_them():
    import core

    scene = SyntheticScene(60, 80, seed=2)
    frames = [scene.frame_uint8(t) for t in range(60)]
    sub = core.createBackgroundSubtractorKDRSDL(window=8)
    assert isinstance(sub, core.KDRSDLBackgroundSubtractor) and sub.params.async_refit  # apply never waits
    assert sub.params.window == 8 and not core.KDRSDLBackgroundSubtractor().params.async_refit
    gray, bgr = core.KDRSDLBackgroundSubtractor(window=8), core.KDRSDLBackgroundSubtractor(window=8)
    for f in frames:
        colour = cv2.merge([f, f, f])  # a gray scene in BGR: cvtColor gives the same gray back
        np.testing.assert_array_equal(gray.apply(f), bgr.apply(colour))
    with pytest.raises(ValueError, match="unknown parameter"):
        core.createBackgroundSubtractorKDRSDL(windw=3)
    sub.close()


def test_async_refit_matches_sync_quality():
    # Threaded refits give the inline refits' quality when each lands before the next frame. The
    # test waits for it, as a live camera's frame period (33-50 ms) lets it land on an idle
    # machine. A 50 ms wait made the result depend on the machine's load (F 0.73 with two busy
    # loops at nice 0: the refit thread runs at nice +10 and yields to them by design); how late
    # refits land under load is measured by the benchmarks (bench_stream, bench_cameras).
    f, refits = {}, {}
    for threaded in (False, True):
        scene = SyntheticScene(120, 160, seed=4)
        sub = KDRSDLBackgroundSubtractor(async_refit=threaded)
        total, refits[threaded], pending = Confusion(0, 0, 0, 0), 0, False
        for t in range(300):
            res = sub.process(scene.frame_uint8(t))
            refits[threaded] += res.refit is not None
            assert not pending or res.refit is not None  # the refit waited for lands at this frame
            pending = sub.refit_running is not None
            if t >= 150:
                total = total + confusion(res.fgmask, scene.fgmask(t))
            # a refit of 160 x 120 takes 10-100 ms; 30 s leaves room for a tenth of a busy core
            assert sub.wait_refit(30.0)
        f[threaded] = total.f_measure
        sub.close()
    # the cold fits at 2, 4, 8, ... entries and the warm ones land from the thread as inline
    assert refits[True] == refits[False] >= 3
    # measured 0.8122 both ways; a threaded refit is installed one frame after the inline one
    assert f[True] > 0.75 and abs(f[True] - f[False]) <= 0.01


def test_a_refit_finished_after_the_last_frame_lands_without_another_frame():
    # A camera that falls silent just after a refit started: collect_refit installs the solution
    # (the worker calls it when a poll brings no frame), where before only a next frame did.
    scene = SyntheticScene(120, 160, seed=1)
    sub = KDRSDLBackgroundSubtractor(async_refit=True)
    t = 0
    while sub.refit_running is None:  # the first (cold) refit starts at the window's second entry
        sub.process(scene.frame_uint8(t))
        t += 1
        assert t < 100, "no refit started"
    assert sub.state is None  # no solution until it lands
    assert sub.wait_refit(30.0)  # a 160 x 120 refit takes 10-100 ms; 30 s for a busy machine
    report = sub.collect_refit()
    assert report is not None and not report.warm and not report.reset
    assert sub.state is not None and sub.refit_running is None
    assert sub.collect_refit() is None  # once
    assert sub.process(scene.frame_uint8(t)).refit is None  # and the next frame does not repeat it
    sub.close()


@pytest.mark.shared_data
def test_highway_beats_mog2_and_knn():
    # CDnet highway 320 x 240, frames 470-1700, CDnet scoring, OpenCV defaults with shadows off.
    # Measured: kdrsdl-stream 0.894, MOG2 0.811, KNN 0.831 (`kdrsdl evaluate` also runs both with
    # our post-processing). The margin over KNN is 0.063: the test fails if the model slips below.
    d = need(HIGHWAY)
    subs = {
        "ours": KDRSDLBackgroundSubtractor(),
        "mog2": cv2.createBackgroundSubtractorMOG2(detectShadows=False),
        "knn": cv2.createBackgroundSubtractorKNN(detectShadows=False),
    }
    total = {name: Confusion(0, 0, 0, 0) for name in subs}
    first, last = (int(v) for v in (d / "temporalROI.txt").read_text().split())
    for i in range(1, last + 1):
        frame = cv2.imread(str(d / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE)
        masks = {name: sub.apply(frame) for name, sub in subs.items()}
        if i >= first:
            valid, positive = cdnet_labels(cv2.imread(str(d / "groundtruth" / f"gt{i:06d}.png"), cv2.IMREAD_GRAYSCALE))
            for name, mask in masks.items():
                total[name] = total[name] + confusion(mask, positive, valid)
    f = {name: c.f_measure for name, c in total.items()}
    print(f"highway F-measure: {f}")
    assert f["mog2"] > 0.7 and f["knn"] > 0.7  # the peers themselves work here
    assert f["ours"] > f["mog2"] and f["ours"] > f["knn"]


@pytest.mark.parametrize("rebalance", [True, False])
def test_long_stream_keeps_the_factorisation_scale_bounded(rebalance):
    """Over many warm refits A R B^T's free scale drifts (A -> 0, R -> inf) unless rebalanced."""
    scene = SyntheticScene(120, 160, seed=7, drift=0.15, drift_period=300)
    sub = KDRSDLBackgroundSubtractor(rebalance=rebalance, refit_interval=10, window_stride=2)
    for t in range(1200):
        sub.process(scene.frame_uint8(t))
    st = sub.state
    if rebalance:  # measured max|R| 1.9e3, max|A| 0.40
        assert np.abs(st.R).max() < 1e4 and np.abs(st.A).max() > 5e-2
    else:  # measured max|R| 4e5, max|A| 8e-3 (and a reset): the drift that grows without bound
        assert np.abs(st.R).max() > 1e5 or sub.n_resets > 0


@pytest.mark.parametrize("frame_model", ["moving", "mean", "last", "fit"])
def test_checkpoint_restore_continues_exactly_as_uninterrupted(frame_model):
    # A model restored from a checkpoint (through numpy's npz, as the worker stores it)
    # must give bit-identical masks to one that never stopped, across warm refits.
    scene = SyntheticScene(60, 80, seed=4)
    knobs = dict(window=8, window_stride=2, rank=6, refit_interval=10, frame_model=frame_model)
    straight, first = KDRSDLBackgroundSubtractor(**knobs), KDRSDLBackgroundSubtractor(**knobs)
    for t in range(45):  # past the first full window (16 frames) and two warm refits
        straight.apply(scene.frame_uint8(t))
        first.apply(scene.frame_uint8(t))
    buf = io.BytesIO()
    np.savez(buf, **first.checkpoint())
    buf.seek(0)
    restored = KDRSDLBackgroundSubtractor(**knobs)
    with np.load(buf, allow_pickle=False) as f:
        assert restored.restore(dict(f)) is True
    warm_refits = 0
    for t in range(45, 90):
        a, b = straight.process(scene.frame_uint8(t)), restored.process(scene.frame_uint8(t))
        np.testing.assert_array_equal(a.fgmask, b.fgmask)
        assert (a.refit is None) == (b.refit is None)
        if b.refit is not None:
            assert b.refit.warm and b.refit.n_iter == a.refit.n_iter
            warm_refits += 1
    assert warm_refits >= 4


def test_the_installed_solution_and_its_checkpoint_hold_no_sparse_part():
    # A warm start does not read E; the model drops it when it installs a solution (a window of
    # float32: 8.8 MiB at 320 x 240 held between refits and written into every checkpoint). A
    # checkpoint made before, which holds state_E, still restores, to the same masks.
    scene = SyntheticScene(60, 80, seed=4)
    knobs = dict(window=8, window_stride=2, rank=6, refit_interval=10)
    straight, first = KDRSDLBackgroundSubtractor(**knobs), KDRSDLBackgroundSubtractor(**knobs)
    for t in range(45):
        straight.apply(scene.frame_uint8(t))
        first.apply(scene.frame_uint8(t))
    assert first.state is not None and first.state.E is None
    ckpt = first.checkpoint()
    assert "state_E" not in ckpt and ckpt["state_Lam"].shape == (first.state.n_slices, 60, 80)
    older = dict(ckpt, state_E=np.zeros_like(ckpt["state_Lam"]))  # the layout before: E saved too
    restored = KDRSDLBackgroundSubtractor(**knobs)
    assert restored.restore(older) is True and restored.state.E is None
    for t in range(45, 70):
        np.testing.assert_array_equal(straight.apply(scene.frame_uint8(t)), restored.apply(scene.frame_uint8(t)))


def test_a_checkpoint_made_before_the_first_solution_keeps_the_early_background():
    # A worker stopped before its first refit landed (a refit thread starved of CPU) checkpoints
    # the window with no solution. Restored, the model judged each frame against itself, an
    # empty mask, until a frame entered the window (a regression: tests/streamer/test_events.py
    # under load). It now judges them, as the uninterrupted model does, against the window's
    # median.
    rng = np.random.default_rng(2)
    bg = (0.3 + 0.2 * rng.random((48, 64))).astype(np.float32)
    first = KDRSDLBackgroundSubtractor(window=8, window_stride=4)
    first.apply(bg)  # one entry: no refit yet (the first runs at two)
    ckpt = first.checkpoint()
    assert first.state is None and ckpt is not None
    restored = KDRSDLBackgroundSubtractor(window=8, window_stride=4)
    assert restored.restore(ckpt) is False  # only the window came back
    x = bg.copy()
    x[10:30, 20:40] = 0.9
    for model in (first, restored):
        mask = model.apply(x)
        assert (mask[10:30, 20:40] > 0).mean() > 0.9 and not mask[35:, :].any()
    # The early background is the entries' median: an object in one entry of three leaves no
    # ghost (their mean would be 0.13 off there, over min_threshold's 0.10).
    three = dict(
        ckpt,
        window_frames=np.stack([bg, x, bg]),
        window_masks=np.zeros((3, 48, 64), bool),
        window_counters=np.array([0, 0, 3, 3, 0]),
    )
    again = KDRSDLBackgroundSubtractor(window=8, window_stride=4)
    assert again.restore(three) is False
    assert not again.apply(bg).any()


def test_a_checkpoint_keeps_its_frames_values_while_later_frames_run():
    # The worker writes a checkpoint on another thread while the frame thread goes on: every
    # array it was handed must hold the values of the frame it was taken at. The decision's,
    # samples' and ghost test's arrays are modified in place by later frames (measured here:
    # all three change within 20 frames of a moving scene), so the checkpoint holds copies.
    scene = SyntheticScene(60, 80, seed=4)
    model = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6, refit_interval=10)
    for t in range(45):
        model.apply(scene.frame_uint8(t))
    ckpt = model.checkpoint()
    frozen = {name: np.array(a) for name, a in ckpt.items()}
    in_place = [name for name in ckpt if name.split("_")[0] in ("decision", "samples", "ghosts")]
    assert {name.split("_")[0] for name in in_place} == {"decision", "samples", "ghosts"}
    for t in range(45, 65):
        model.apply(scene.frame_uint8(t))
    later = model.checkpoint()
    changed = [name for name in in_place if not np.array_equal(later[name], frozen[name])]
    assert {name.split("_")[0] for name in changed} == {"decision", "samples", "ghosts"}
    for name, a in ckpt.items():
        np.testing.assert_array_equal(a, frozen[name], err_msg=name)


def test_checkpoint_restore_refuses_other_settings_and_damage():
    scene = SyntheticScene(60, 80, seed=4)
    model = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6)
    assert model.checkpoint() is None  # nothing learnt yet
    for t in range(30):
        model.apply(scene.frame_uint8(t))
    ckpt = model.checkpoint()
    with pytest.raises(ValueError, match="other model settings"):
        KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=5).restore(ckpt)
    damaged = {
        "state_A": ckpt["state_A"][:-1],  # wrong shape
        "state_Lam": ckpt["state_Lam"] * np.nan,  # non-finite dual
        "window_frames": ckpt["window_frames"][:, :-1],  # frames of another size
        "samples_samples": ckpt["samples_samples"][:-1],  # background samples of another size
        "decision_v": np.full_like(ckpt["decision_v"], np.inf),  # non-finite blink counts
        "version": np.int64(99),
    }
    for key, value in damaged.items():
        fresh = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6)
        with pytest.raises(ValueError, match="checkpoint"):
            fresh.restore({**ckpt, key: value})
        assert fresh.shape is None and fresh.state is None  # left as new, still usable
        assert fresh.apply(scene.frame_uint8(0)).shape == (60, 80)
    with pytest.raises(ValueError, match="incomplete"):
        KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6).restore(
            {k: v for k, v in ckpt.items() if k != "counters"}
        )
    # blend_dynamic, update_blend, update_blend_moving, fit_refresh and fit_refresh_dynamic change
    # how later frames are judged and enter the window, not what a checkpoint holds: a checkpoint
    # restores warm under other values of them (so one made before these knobs existed, or before
    # update_blend's default moved from 0.7 to 0.8, loads)
    changed = (
        ("blend_dynamic", True),
        ("update_blend", 0.7),
        ("update_blend_moving", 0.5),
        ("fit_refresh", 1),
        ("fit_refresh_dynamic", 0.05),
    )
    for knob, value in changed:
        older = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6, **{knob: value})
        assert older.restore(ckpt) is True, knob


def test_refit_after_the_window_slid_past_the_whole_last_solution():
    # refit_interval > window * window_stride (or, in the worker, a refit slower than a whole
    # window of frames) slides the window past every slice of the last solution: the next refit
    # keeps the dictionary A, B, M and starts all cores afresh (a regression: it raised).
    scene = SyntheticScene(60, 80, seed=5)
    sub = KDRSDLBackgroundSubtractor(window=8, window_stride=1, rank=6, refit_interval=20)
    refits = []
    for t in range(120):
        res = sub.process(scene.frame_uint8(t))
        if res.refit is not None:
            refits.append(res.refit)
    assert [r.warm for r in refits[-4:]] == [True] * 4
    assert sub.state.n_slices == 8


def refit_frames(still_factor, change_at=150, frames=260):
    """The frames at which a model refits a still scene (noise only) in which a 20 x 20 patch
    brightens by 0.3 for good at frame ``change_at``."""
    rng = np.random.default_rng(3)
    bg = (0.3 + 0.2 * rng.random((48, 64))).astype(np.float32)
    sub = KDRSDLBackgroundSubtractor(
        window=8, window_stride=2, rank=6, refit_interval=10, refit_still_factor=still_factor
    )
    at = []
    for t in range(frames):
        x = bg + 0.01 * rng.standard_normal(bg.shape).astype(np.float32)
        if t >= change_at:
            x[10:30, 20:40] += 0.3
        if sub.process(np.clip(x, 0, 1)).refit is not None:
            at.append(t)
    return at


def test_refits_slow_down_while_the_background_holds_still_and_not_after_a_change():
    # Cold refits at 2, 4 and 8 entries (frames 2, 6, 14), then warm ones every refit_interval
    # (10) frames. Once two warm refits in a row left M where it was, every 3 x 10 frames.
    # The patch enters M (through the window's entries, at update_blend's 0.2 weight) from the
    # refit of frame 184, which brings the interval of 10 back (measured: 194, 204, then 30
    # apart again once M holds still; at update_blend 0.7, the default before 2026-11-30, the
    # interval came back at 214).
    at = refit_frames(still_factor=3)
    assert at[:10] == [2, 6, 14, 24, 34, 64, 94, 124, 154, 184]
    assert np.diff(at)[9:11].tolist() == [10, 10]
    # factor 1: the fixed interval, whatever the scene does
    assert refit_frames(still_factor=1) == [2, 6, *range(14, 260, 10)]


def test_the_still_count_survives_a_checkpoint_and_an_older_checkpoint_starts_it_at_0():
    sched = WindowSchedule(4, 1, 10, 30)  # a full window, solved: warm refits every 10 or 30

    def due_after(frames):
        sched.started_refit()
        sched.push(np.zeros((2, 3), np.float32))
        sched.since_refit = frames
        return sched.refit_due(4, True)

    for _ in range(4):
        sched.push(np.zeros((2, 3), np.float32))
    sched.settled(True)
    assert due_after(10)  # one still refit: the interval is still 10
    sched.settled(True)
    assert not due_after(29) and due_after(30)  # two in a row: 30
    state = sched.state()
    again = WindowSchedule(4, 1, 10, 30)
    again.load(state, (2, 3))
    assert again.still_refits == 2 and again.since_refit == 30
    older = WindowSchedule(4, 1, 10, 30)
    older.load({**state, "counters": state["counters"][:4]}, (2, 3))
    assert older.still_refits == 0 and older.since_refit == 30
    sched.settled(False)  # a refit that moved M starts the count over
    assert sched.still_refits == 0 and due_after(10)
    # the pace's knobs are not among those a checkpoint must match: one of the release before loads
    assert "refit_still" not in settings(BackgroundParams())
    assert settings(BackgroundParams(refit_still_factor=3)) == settings(BackgroundParams())


def test_an_adopted_ghost_reaches_the_frames_that_were_in_the_window_and_no_other():
    # WindowSchedule.adopt holds the values apart instead of rewriting the 30 frames: the window
    # it stacks must be what writing them into every frame then in the window would have given,
    # through later entries, a change of light, a view a refit holds, a checkpoint and the
    # adopted frames' leaving.
    rng = np.random.default_rng(0)
    sched, eager = WindowSchedule(4, 1, 10, 30), []

    def push(frame, fg=None):
        sched.push(frame, fg)
        eager.append((frame.copy(), None if fg is None else fg.copy()))
        del eager[:-4]

    def frame():
        return rng.random((5, 6)).astype(np.float32)

    for t in range(3):
        push(frame(), rng.random((5, 6)) < 0.5 if t == 1 else None)
    held = []
    for _ in range(2):  # a refit started before an adoption solves the window it saw
        where, x = rng.random((5, 6)) < 0.3, frame()
        held.append((sched.view(), sched.stack()))
        sched.adopt(where, x)
        eager = [(np.where(where, x, f), None if m is None else m & ~where) for f, m in eager]
    assert all(np.array_equal(view.stack(), stacked) for view, stacked in held)
    for _ in range(2):  # entries after the adoption keep their own values
        push(frame())
        np.testing.assert_array_equal(sched.stack(), np.stack([f for f, _ in eager]))
        masks = np.stack([np.zeros((5, 6), bool) if m is None else m for _, m in eager])
        np.testing.assert_array_equal(sched.stack_masks(), masks)
    sched.map(lambda f: np.float32(0.5) * f + np.float32(0.1))
    eager = [(np.float32(0.5) * f + np.float32(0.1), m) for f, m in eager]
    np.testing.assert_array_equal(sched.stack(), np.stack([f for f, _ in eager]))
    again = WindowSchedule(4, 1, 10, 30)
    again.load(sched.state(), (5, 6))
    np.testing.assert_array_equal(again.stack(), sched.stack())
    assert sched.adopted is not None
    for _ in range(2):  # the last frame that was in the window at the adoption leaves
        push(frame())
    assert sched.adopted is None and sched.until is None
    np.testing.assert_array_equal(sched.stack(), np.stack([f for f, _ in eager]))


def test_a_checkpoint_of_an_older_model_is_refused_not_used():
    # The background samples are not in a v2 checkpoint (nor the decision's state in a v1): the
    # worker logs the refusal and starts cold (streamer/processes/worker.py counts it as "mismatch").
    scene = SyntheticScene(60, 80, seed=4)
    model = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6)
    for t in range(30):
        model.apply(scene.frame_uint8(t))
    v2 = {k: v for k, v in model.checkpoint().items() if not k.startswith("samples_")}
    v2["version"] = np.int64(2)
    fresh = KDRSDLBackgroundSubtractor(window=8, window_stride=2, rank=6)
    with pytest.raises(ValueError, match="checkpoint layout version 2, expected 4"):
        fresh.restore(v2)
    v2["version"] = np.int64(4)  # relabelled: the missing part is named
    with pytest.raises(ValueError, match="samples state does not fit"):
        fresh.restore(v2)
    assert fresh.state is None and fresh.apply(scene.frame_uint8(0)).shape == (60, 80)


def test_a_refit_that_overflows_is_dropped_and_counted_as_a_reset():
    """Frames of huge finite values (float32 1e30: the solver's products overflow) make every
    window refit non-finite: each is dropped and counted as a reset (the worker's
    ``solver_resets_total``), no solution is installed, and every frame still gets a mask (the
    global threshold, as before any refit). The worker itself only takes uint8 frames, which
    cannot overflow: this is the model's side of that path."""
    rng = np.random.default_rng(0)
    sub = KDRSDLBackgroundSubtractor()
    with np.errstate(all="ignore"):
        for _ in range(120):
            res = sub.process((rng.random((24, 32)) * 1e30).astype(np.float32))
            assert res.fgmask.shape == (24, 32) and res.fgmask.dtype == np.uint8
    assert sub.n_resets == 3 and sub.state is None  # every refit of the 120 frames (3, measured) reset


@pytest.mark.shared_data
def test_restored_rims_are_reported_and_never_learnt_on_highway():
    # open_restore (docs/algorithm.md, "Rims"): the reported mask gets back the rims the
    # opening took from solid blobs; the model learns from the plain mask, so that a model without
    # the rule learns exactly the same (its masks are the plain ones, to the bit) and a ghost's edge
    # is still learnt. On the full sequence the rule lifts F from 0.938 to 0.953 (bench_ablation);
    # on frames 470-900 measured 0.954 -> 0.964, 160,229 pixels restored over the 900 frames.
    # The specks' rule is off in both: it drops small blobs of the reported mask, restored or not.
    d = need(HIGHWAY)
    restored = KDRSDLBackgroundSubtractor(speck_area=0.0)
    plain = KDRSDLBackgroundSubtractor(open_restore=0.0, speck_area=0.0)
    total = {"restored": Confusion(0, 0, 0, 0), "plain": Confusion(0, 0, 0, 0)}
    first = int((d / "temporalROI.txt").read_text().split()[0])
    grown = 0
    for i in range(1, 901):
        frame = cv2.imread(str(d / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE)
        a, b = restored.apply(frame), plain.apply(frame)
        np.testing.assert_array_equal(restored._decider.prev_obj, plain._decider.prev_obj)  # the same learning
        assert not (b & ~a).any()  # restoring only adds
        grown += int(np.count_nonzero(a)) - int(np.count_nonzero(b))
        if i >= first:
            valid, positive = cdnet_labels(cv2.imread(str(d / "groundtruth" / f"gt{i:06d}.png"), cv2.IMREAD_GRAYSCALE))
            total["restored"] += confusion(a, positive, valid)
            total["plain"] += confusion(b, positive, valid)
    f = {name: c.f_measure for name, c in total.items()}
    print(f"highway 470-900: {f}, {grown} pixels restored")
    assert grown > 0
    assert f["restored"] > f["plain"] + 0.005  # half the measured gain: the rule must still pay here


@pytest.mark.shared_data
def test_a_moving_background_under_the_mask_enters_the_window_as_it_is_on_fall():
    # CDnet fall at sample_seed 4: a gust pushes the treetop's leaves into pixels of sky that have
    # never shown one. Blended into the window like an object's pixels (blend_dynamic on), they went
    # into E, out of the spread, and the same sky stayed foreground at every later gust: 90,608
    # false positives over frames 1100-1399 against 26,233 with the dynamic pixels entered as they
    # are (F 0.858 against 0.937 over the whole sequence; one-off script, 2026-11-30). Half is the bound.
    false_positives = [
        cdnet_counts("dynamicBackground/fall", 1100, 1399, sample_seed=4, blend_dynamic=b)[1] for b in (False, True)
    ]
    assert false_positives[0] < 0.5 * false_positives[1], false_positives
