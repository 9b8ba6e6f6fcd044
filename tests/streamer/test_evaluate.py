"""``kdrsdl evaluate``: CDnet's protocol on generated and real CDnet-format data, and the paper's."""

import json
import shutil
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import CDNET, HIGHWAY, need

from core.evaluation.metrics import cdnet_labels, confusion
from core.evaluation.scene import SyntheticScene
from streamer.evaluation.protocols import evaluate as run_evaluate


def evaluate(*args, timeout=900, pythonpath=None):
    env = {"OPENBLAS_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"}
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "streamer", "evaluate", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def make_sequence(root, seed, frames=120, roi=(41, 120), warmup_gt=True, shape=(60, 80), shadow=False):
    """A CDnet-layout sequence from the synthetic scene.

    The frames before temporalROI get ground truth that says *everything* is foreground
    (``warmup_gt``): scoring any of them would show at once in the counts. With ``shadow``, the
    4 x 10 pixels of rows 14-17 of every annotated frame are labelled hard shadow (50), a stretch of
    plain background where no object passes.
    """
    (root / "input").mkdir(parents=True)
    (root / "groundtruth").mkdir()
    scene = SyntheticScene(*shape, seed=seed)
    for t in range(frames):
        cv2.imwrite(str(root / "input" / f"in{t + 1:06d}.jpg"), scene.frame_uint8(t), [cv2.IMWRITE_JPEG_QUALITY, 95])
        if t + 1 >= roi[0]:
            gt = np.where(scene.fgmask(t), 255, 0).astype(np.uint8)
            if shadow:
                gt[14:18, :10] = 50
        elif warmup_gt:
            gt = np.full(shape, 255, np.uint8)
        else:
            continue
        cv2.imwrite(str(root / "groundtruth" / f"gt{t + 1:06d}.png"), gt)
    (root / "temporalROI.txt").write_text(f"{roi[0]} {roi[1]}\n")
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """Two categories: baseline/{a,b} and jitter/c; b lacks ground truth for frames 61-70."""
    root = tmp_path_factory.mktemp("cdnet_tree")
    make_sequence(root / "baseline" / "a", seed=5, shadow=True)
    b = make_sequence(root / "baseline" / "b", seed=6, warmup_gt=False)
    for i in range(61, 71):
        (b / "groundtruth" / f"gt{i:06d}.png").unlink()
    make_sequence(root / "jitter" / "c", seed=7, frames=100, roi=(31, 110))  # temporalROI runs past the input
    return root


@pytest.fixture(scope="module")
def tree_result(tree):
    return run_evaluate(tree, "cdnet", ["mog2", "knn+post", "kdrsdl-stream"])


def reference_counts(seq_dir, first_scored, last_scored, skip=()):
    """MOG2 straight from OpenCV, from frame 1, summed over the scored frames: the protocol by hand."""
    cv2.setNumThreads(1)
    sub = cv2.createBackgroundSubtractorMOG2(detectShadows=False)
    total = None
    for i in range(1, last_scored + 1):
        mask = sub.apply(cv2.imread(str(seq_dir / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE)) > 127
        if i >= first_scored and i not in skip:
            g = cv2.imread(str(seq_dir / "groundtruth" / f"gt{i:06d}.png"), cv2.IMREAD_GRAYSCALE)
            valid, positive = cdnet_labels(g)
            c = confusion(mask, positive, valid)
            total = c if total is None else total + c
    return total


def test_the_evaluated_model_is_fed_as_the_service_feeds_it():
    """``kdrsdl-stream`` in ``evaluate`` gets a frame larger than the processing resolution as the
    capture sends it (reduced in uint8) and is scored on the mask the worker publishes (enlarged
    back to the frame's size): the service's masks, not those of a float reduction."""
    from core.streaming.background import KDRSDLBackgroundSubtractor
    from core.streaming.resolution import enlarge_mask, reduce
    from streamer.evaluation import peers

    scene = SyntheticScene(480, 720, seed=3)
    evaluated = peers.create("kdrsdl-stream")
    service, by_float = KDRSDLBackgroundSubtractor(), KDRSDLBackgroundSubtractor()
    differ = 0
    for t in range(60):
        f = scene.frame_uint8(t)
        mask, score = evaluated.apply(f)
        assert mask.shape == score.shape == (480, 720)
        np.testing.assert_array_equal(mask, enlarge_mask(service.process(reduce(f, (240, 360))).fgmask, f.shape) > 0)
        differ += int(np.count_nonzero(by_float.process(f).fgmask != mask.view(np.uint8) * 255))
    assert differ > 0  # the float reduction's masks are not the same: the check above tells them apart


def test_warm_up_frames_are_processed_but_not_scored(tree, tree_result):
    a = tree_result["sequences"]["baseline/a"]
    assert a["processed"] == [1, 120] and a["frames_processed"] == 120
    assert a["scored"] == [41, 120] and a["frames_scored"] == 80
    m = a["methods"]["mog2"]
    # exactly the scored frames' pixels: the 40 warm-up frames (all labelled 255) are not counted
    assert m["tp"] + m["fp"] + m["fn"] + m["tn"] == 80 * 60 * 80
    ref = reference_counts(tree / "baseline" / "a", 41, 120)
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (ref.tp, ref.fp, ref.fn, ref.tn)


def test_frames_without_ground_truth_are_not_scored(tree, tree_result):
    b = tree_result["sequences"]["baseline/b"]
    assert b["frames_processed"] == 120 and b["frames_scored"] == 70  # 41..120 less 61..70
    m = b["methods"]["mog2"]
    assert m["tp"] + m["fp"] + m["fn"] + m["tn"] == 70 * 60 * 80
    ref = reference_counts(tree / "baseline" / "b", 41, 120, skip=range(61, 71))
    assert (m["tp"], m["fp"], m["fn"], m["tn"]) == (ref.tp, ref.fp, ref.fn, ref.tn)
    # temporalROI 31..110 over 100 input frames: scored what exists, processed up to the last scored
    c = tree_result["sequences"]["jitter/c"]
    assert c["processed"] == [1, 100] and c["frames_scored"] == 70


def test_category_and_overall_means_follow_cdnet(tree_result):
    seqs, cats = tree_result["sequences"], tree_result["categories"]
    for method in ("mog2", "knn+post", "kdrsdl-stream"):
        f = {name: s["methods"][method]["f_measure"] for name, s in seqs.items()}
        assert cats["baseline"][method]["f_measure"] == pytest.approx((f["baseline/a"] + f["baseline/b"]) / 2)
        assert cats["jitter"][method]["f_measure"] == pytest.approx(f["jitter/c"])
        overall = tree_result["overall"][method]["f_measure"]
        assert overall == pytest.approx(((f["baseline/a"] + f["baseline/b"]) / 2 + f["jitter/c"]) / 2)
    # the continuous score gives an AUC; a mask-only method does not
    assert 0.5 < seqs["baseline/a"]["methods"]["kdrsdl-stream"]["auc"] <= 1
    assert seqs["baseline/a"]["methods"]["mog2"]["auc"] is None
    # the share of hard-shadow pixels flagged: 40 labelled pixels in each of the 80 scored frames
    # of baseline/a (none in the scene's objects' path); no figure where nothing is labelled 50
    # (measured: 0 for all three)
    for method in ("mog2", "knn+post", "kdrsdl-stream"):
        a = seqs["baseline/a"]["methods"][method]
        assert a["shadow_pixels"] == 40 * 80 and 0 <= a["shadow_fg"] < 0.02, (method, a["shadow_fg"])
        b = seqs["baseline/b"]["methods"][method]
        assert b["shadow_pixels"] == 0 and b["shadow_fg"] is None


def test_cli_tree_with_report_json_and_an_unavailable_peer(tree, tmp_path):
    # A pybgs that fails to import stands for a machine without the optional extra.
    fake = tmp_path / "no_pybgs" / "pybgs"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('pybgs is absent here')\n")
    out = tmp_path / "r.json"
    proc = evaluate(
        tree,
        "--methods",
        "mog2,subsense,kdrsdl-stream",
        "--json",
        out,
        "--report",
        tmp_path / "rep",
        pythonpath=fake.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res["sequences"]) == {"baseline/a", "baseline/b", "jitter/c"}
    assert "pip install 'kdrsdl-stream[peers]'" in res["unavailable"]["subsense"]
    assert "subsense: unavailable" in proc.stdout and "overall" in proc.stdout
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| baseline/a |" in md and "**overall (CDnet mean)**" in md
    # the cast-shadow table lists the sequences that label shadows only
    shadows = md.split("## Cast shadows")[1].split("##")[0]
    assert "| baseline/a |" in shadows and "baseline/b" not in shadows
    assert "shadow_fg" in proc.stdout
    for stem in ("baseline_a", "baseline_b", "jitter_c"):
        sheet = cv2.imread(str(tmp_path / "rep" / f"{stem}_contact_sheet.png"))
        assert (
            sheet is not None and sheet.shape[0] == 4 * 60
        )  # 4 sampled frames; tiles at most 160 px high, never enlarged
        assert cv2.imread(str(tmp_path / "rep" / f"{stem}_curves.png")) is not None


def test_bad_input_is_a_one_line_error_naming_the_file(tree, tmp_path):
    empty = tmp_path / "empty"
    (empty / "cat" / "seq").mkdir(parents=True)
    proc = evaluate(empty)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and f"{empty}: no sequence found" in proc.stderr

    broken = tmp_path / "broken"
    shutil.copytree(tree / "baseline" / "a", broken)
    (broken / "input" / "in000050.jpg").unlink()
    proc = evaluate(broken, "--methods", "mog2")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{broken}/input/in000050.jpg: missing" in proc.stderr

    shutil.copy(broken / "input" / "in000049.jpg", broken / "input" / "in000050.jpg")
    (broken / "groundtruth" / "gt000060.png").write_bytes(b"not a png")
    proc = evaluate(broken, "--methods", "mog2")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{broken}/groundtruth/gt000060.png: unreadable" in proc.stderr

    shutil.copy(broken / "groundtruth" / "gt000059.png", broken / "groundtruth" / "gt000060.png")
    cv2.imwrite(str(broken / "ROI.bmp"), np.full((30, 40), 255, np.uint8))
    proc = evaluate(broken, "--methods", "mog2")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{broken}/ROI.bmp: size 40x30, but the frames are 80x60" in proc.stderr

    (broken / "temporalROI.txt").write_text("nonsense")
    proc = evaluate(broken)
    assert proc.returncode == 2 and "temporalROI.txt: expected two frame numbers" in proc.stderr
    proc = evaluate(tree / "baseline" / "a", "--frames", "10:50")
    assert proc.returncode == 2 and "outside the annotated range 41:120" in proc.stderr
    proc = evaluate(tree / "baseline" / "a", "--methods", "mog3")
    assert proc.returncode == 2 and "unknown method(s) ['mog3']" in proc.stderr
    # a configuration that does not load is a configuration error, exit 78, as everywhere
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nwindow = 1\n")
    proc = evaluate(tree / "baseline" / "a", "--config", bad)
    assert proc.returncode == 78 and "configuration error" in proc.stderr and "model.window" in proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.shared_data
def test_highway_peers_agree_with_an_independent_scorer():
    """Issue 12's check: CDnet protocol on highway (warm-up from frame 1, 470-1700 scored), grayscale.

    An independent scorer measured MOG2 0.811, KNN 0.831, GSOC 0.879, and with our post-processing
    MOG2 0.883, KNN 0.889; we measured the same to the third decimal. 0.005 is the agreement the
    issue asks for (one thread, fixed inputs: the runs are deterministic).
    """
    res = run_evaluate(need(HIGHWAY), "cdnet", ["mog2", "knn", "gsoc", "mog2+post", "knn+post", "kdrsdl-stream"])
    seq = res["sequences"]["baseline/highway"]
    assert seq["processed"] == [1, 1700] and seq["scored"] == [470, 1700] and seq["frames_scored"] == 1231
    want = {"mog2": 0.811, "knn": 0.831, "gsoc": 0.879, "mog2+post": 0.883, "knn+post": 0.889}
    for method, f in want.items():
        assert seq["methods"][method]["f_measure"] == pytest.approx(f, abs=0.005), method
    ours = seq["methods"]["kdrsdl-stream"]
    assert ours["f_measure"] > max(seq["methods"][m]["f_measure"] for m in ("mog2", "knn"))
    assert ours["auc"] > 0.95


@pytest.mark.shared_data
def test_highway_subsense_agrees_with_an_independent_scorer():
    """SuBSENSE (pybgs) measured 0.949 by the independent scorer; we measure 0.949."""
    pytest.importorskip("pybgs", reason="pybgs is the optional extra: pip install '.[peers]'")
    res = run_evaluate(need(HIGHWAY), "cdnet", ["subsense"])
    assert res["sequences"]["baseline/highway"]["methods"]["subsense"]["f_measure"] == pytest.approx(0.949, abs=0.005)


@pytest.mark.shared_data
def test_paper_protocol_highway_row(tmp_path):
    """The paper's Highway experiment: KDRSDL AUC >= 0.94 with default parameters."""
    d = need(HIGHWAY)
    out = tmp_path / "paper.json"
    proc = evaluate(d, "--protocol", "paper", "--methods", "kdrsdl,rpca,mog2", "--json", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seq = json.loads(out.read_text())["sequences"]["baseline/highway"]
    assert seq["frames"] == [470, 869]
    kd, rp = seq["methods"]["kdrsdl"], seq["methods"]["rpca"]
    assert kd["params"]["rank"] == 48  # r = min(m, n), as the paper ran it
    assert kd["auc"] >= 0.94  # measured 0.990; the paper: 0.94 with an oracle lambda
    assert rp["auc"] > 0.9  # measured 0.977; the paper: 0.94
    assert seq["methods"]["mog2"]["auc"] < kd["auc"]


@pytest.mark.shared_data
@pytest.mark.timeout(1600)  # the evaluate's own timeout (1500 s) governs, not the suite's 600 s
def test_paper_protocol_oracle_sweep(tmp_path):
    # Within the suite's 600 s in every earlier CI run; beside a full `kdrsdl evaluate` on the 2 cores
    # it ran past them, and the suite stopped it before the evaluate's own 1500 s could.
    d = need(HIGHWAY)
    out = tmp_path / "sweep.json"
    proc = evaluate(d, "--protocol", "paper", "--methods", "kdrsdl", "--sweep", "--json", out, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = json.loads(out.read_text())["sequences"]["baseline/highway"]["methods"]["kdrsdl"]["sweep"]
    assert len(sweep["lams"]) == len(sweep["aucs"]) == 20 and sweep["best_lam"] in sweep["lams"]
    assert sweep["best_auc"] == max(sweep["aucs"])
    assert sweep["best_auc"] >= 0.95


#: The sequences the streaming model v2 was tuned and judged on (issue 13).
FIVE = (
    "baseline/highway",
    "baseline/office",
    "baseline/pedestrians",
    "cameraJitter/badminton",
    "dynamicBackground/canoe",
)
#: Waving trees, added to shared/data after v2 (issue 23): not one of the five it was tuned on.
FALL = "dynamicBackground/fall"
PEERS = ("mog2+post", "knn+post", "gsoc")


#: SuBSENSE's F on the five sequences, from the README's `kdrsdl evaluate` run (pybgs is
#: deterministic; test_highway_subsense_agrees_with_an_independent_scorer re-checks highway):
#: highway 0.949, office 0.909, pedestrians 0.933, badminton 0.773, canoe 0.648.
SUBSENSE_MEAN = 0.842


@pytest.fixture(scope="module")
def cdnet_result():
    """Ours and the OpenCV peers on every sequence in ../shared/data/cdnet2014: the whole result.

    About 6 minutes on a quiet 2-core machine for the six sequences; 18 minutes were measured
    for the five with two other CPU-bound jobs beside them, hence the tests' timeout.
    """
    need(CDNET)
    return run_evaluate(CDNET, "cdnet", ["kdrsdl-stream", *PEERS])


@pytest.fixture(scope="module")
def cdnet(cdnet_result):
    """F per sequence and method, from :func:`cdnet_result`."""
    return {name: {m: e["f_measure"] for m, e in s["methods"].items()} for name, s in cdnet_result["sequences"].items()}


@pytest.fixture(scope="module")
def five(cdnet):
    missing = set(FIVE) - set(cdnet)
    assert not missing, f"sequences of issue 13 missing from {CDNET}: {missing}"
    return {name: cdnet[name] for name in FIVE}


@pytest.mark.timeout(2400)
@pytest.mark.shared_data
def test_streaming_model_mean_reaches_subsense(five):
    """Issue 13: mean F over the five sequences at least SuBSENSE's.

    Measured: ours 0.885 (README run: highway 0.927, office 0.935, pedestrians 0.954, badminton
    0.797, canoe 0.811), SuBSENSE 0.842. The margin is 0.043, one sequence moving by 0.21.
    """
    mean = {m: np.mean([f[m] for f in five.values()]) for m in next(iter(five.values()))}
    assert mean["kdrsdl-stream"] >= SUBSENSE_MEAN
    # and well above the peers that the model must beat on every sequence
    for peer in PEERS:
        assert mean["kdrsdl-stream"] > mean[peer] + 0.05, peer


@pytest.mark.timeout(2400)
@pytest.mark.shared_data
def test_streaming_model_beats_the_opencv_peers_on_every_sequence(five, cdnet):
    """Issues 13 and 23: F above MOG2+post, KNN+post and GSOC on every sequence, fall included.

    The closest are pedestrians (0.954 against KNN+post's 0.949), canoe (0.811 against GSOC's
    0.801) and fall (0.816 against MOG2+post's 0.795), from the README's run. Every method is
    deterministic; OpenBLAS's kernels for other CPUs moved v2 by 0.0003. The background samples'
    random choices are seeded: seeds 1-4 gave fall 0.819, 0.804, 0.826 and 0.809
    (docs/algorithm.md, "Background samples"), all above MOG2+post, the closest by 0.009.
    """
    for name, f in cdnet.items():
        for peer in PEERS:
            assert f["kdrsdl-stream"] > f[peer], (name, peer, f)
    if FALL in cdnet:
        assert cdnet[FALL]["mog2+post"] == pytest.approx(0.795, abs=0.005)  # the data README's figure


#: SuBSENSE's dynamicBackground mean (canoe 0.648, fall 0.845).
SUBSENSE_DYNAMIC = 0.747


@pytest.mark.timeout(2400)
@pytest.mark.shared_data
def test_streaming_model_holds_on_the_six_and_on_moving_backgrounds(cdnet):
    """Issue 23: mean F over the six sequences at least 0.86, and dynamicBackground's mean at
    least SuBSENSE's 0.747.

    Measured: six 0.873, dynamicBackground 0.813 (canoe 0.811, fall 0.816); v2 had 0.765 and 0.536.
    """
    if FALL not in cdnet:
        pytest.skip(f"{FALL} is not in {CDNET}")
    ours = {name: f["kdrsdl-stream"] for name, f in cdnet.items()}
    assert np.mean(list(ours.values())) >= 0.86  # SuBSENSE: 0.843
    dynamic = [f for name, f in ours.items() if name.startswith("dynamicBackground/")]
    assert len(dynamic) == 2 and np.mean(dynamic) >= SUBSENSE_DYNAMIC


PEDESTRIANS = "baseline/pedestrians"


@pytest.mark.timeout(2400)
@pytest.mark.shared_data
def test_cast_shadows_are_left_out_on_pedestrians(cdnet_result):
    """Issue 44: at most half of pedestrians' hard-shadow pixels (label 50) flagged; every method has the figure.

    Measured: ours 0.236 (v3: 1.000), MOG2+post, KNN+post and GSOC 0.999-1.000 (no shadow test at
    these settings); SuBSENSE 0.951 and PAWCS 0.000 in the README's run. Highway's labelled shadows
    are the umbrae under the cars, at 0.1-0.3 of the background: no gray-level rule tells them
    from a dark car, and every method flags 0.94-1.00 of them.
    """
    seqs = cdnet_result["sequences"]
    if PEDESTRIANS not in seqs:
        pytest.skip(f"{PEDESTRIANS} is not in {CDNET}")
    ped = seqs[PEDESTRIANS]["methods"]
    assert ped["kdrsdl-stream"]["shadow_fg"] <= 0.5
    for peer in PEERS:
        assert ped[peer]["shadow_pixels"] == ped["kdrsdl-stream"]["shadow_pixels"] > 0
        assert ped[peer]["shadow_fg"] > ped["kdrsdl-stream"]["shadow_fg"] + 0.4, peer
    # a sequence whose ground truth labels no shadow (canoe's is 0/255) has no figure
    for name, s in seqs.items():
        e = s["methods"]["kdrsdl-stream"]
        assert (e["shadow_fg"] is None) == (e["shadow_pixels"] == 0), name
