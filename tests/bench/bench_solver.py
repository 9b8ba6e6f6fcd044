"""Solver benchmark (issue 2): KDRSDL against inexact-ALM RPCA and the GEMM peak.

Run: ``make bench`` (or ``python tests/bench/bench_solver.py``). Prints a table; the
figures in the README come from it. Uses ../shared/data/cdnet2014/baseline/highway
when present, synthetic frames of the same size otherwise.
"""

import pathlib
import sys
import time
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core import kdrsdl  # noqa: E402
from core.rpca import rpca_ialm  # noqa: E402
from core.scene import SyntheticScene  # noqa: E402

HIGHWAY = ROOT.parent / "shared" / "data" / "cdnet2014" / "baseline" / "highway"


def highway_frames(n=400, size=(48, 64)):
    try:
        import cv2
    except ImportError:
        cv2 = None
    if cv2 is not None and HIGHWAY.exists():
        first = int((HIGHWAY / "temporalROI.txt").read_text().split()[0])
        frames = [cv2.resize(cv2.imread(str(HIGHWAY / "input" / f"in{i:06d}.jpg"), cv2.IMREAD_GRAYSCALE),
                             size[::-1], interpolation=cv2.INTER_AREA) for i in range(first, first + n)]
        return np.stack(frames).astype(np.float64) / 255, "CDnet highway"
    scene = SyntheticScene(*size)
    return np.stack([scene.frame(t) for t in range(n)]).astype(np.float64), "synthetic (no ../shared)"


def gemm_peak(n=2048, reps=5):
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = a.copy()
    a @ b
    t = min(_timed(lambda: a @ b) for _ in range(reps))
    return 2 * n**3 / t / 1e9


def _timed(f):
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def main():
    warnings.simplefilter("ignore")
    peak = gemm_peak()
    print(f"numpy float32 GEMM peak (2048^3): {peak:.1f} GFLOP/s")
    X, name = highway_frames()
    print(f"\nHighway setting: {X.shape} from {name}, r = min(m, n), mean mode, tol 1e-5")
    rows = []
    for dt in (np.float64, np.float32):
        Xd = X.astype(dt)
        t0 = time.perf_counter()
        res = kdrsdl(Xd, mean=True, tol=1e-5, max_iter=500)
        t = time.perf_counter() - t0
        rows.append((f"KDRSDL {np.dtype(dt).name}", t, res.n_iter, res.converged))
    t0 = time.perf_counter()
    rp = rpca_ialm(X, tol=1e-5)
    t_rpca = time.perf_counter() - t0
    rows.append(("RPCA inexact ALM float64", t_rpca, rp.n_iter, rp.converged))
    for label, t, it, conv in rows:
        print(f"  {label:26s} {t:8.2f} s  {it:4d} iter  {1000 * t / it:8.2f} ms/iter  converged={conv}  "
              f"RPCA/this = {t_rpca / t:5.1f}x")

    N, m, n, r = 300, 144, 176, 30
    scene = SyntheticScene(m, n, seed=1)
    Xl = np.stack([scene.frame(t) for t in range(N)])
    print(f"\nLarger setting: {Xl.shape}, r = {r}, mean mode")
    for dt in (np.float32, np.float64):
        Xd = Xl.astype(dt)
        iters = 20
        t0 = time.perf_counter()
        res = kdrsdl(Xd, r, mean=True, tol=1e-30, max_iter=iters)
        t_total = time.perf_counter() - t0
        t0 = time.perf_counter()
        kdrsdl(Xd, r, mean=True, tol=1e-30, max_iter=1)
        t_init = time.perf_counter() - t0
        per_iter = (t_total - t_init) / (iters - 1)
        flops = 6 * 2 * N * m * n * r  # six (N m, n) x (n, r)-sized products per iteration
        gflops = flops / per_iter / 1e9
        print(f"  {np.dtype(dt).name}: {1000 * per_iter:7.1f} ms/iter, {gflops:6.1f} GFLOP/s in the O(Nmnr) "
              f"products = {100 * gflops / peak:4.1f}% of the float32 GEMM peak (init {t_init:.2f} s)")


if __name__ == "__main__":
    main()
