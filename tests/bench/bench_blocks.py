"""Row-block size of the solver's sweep: the figures of ``core.solver.blocks.BLOCK_BYTES``.

Run: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_blocks.py``. For each block
size, float32 ms/iter of 10-iteration warm restarts (tests/bench/bench_solver.py's
``per_iteration``) at the Highway setting and the larger one, in CPU time: with one
BLAS thread the most repeatable clock on a shared machine.
"""

import time
import warnings

import numpy as np
from bench_solver import highway_frames, larger_frames, per_iteration

import core.solver.blocks

SIZES = {"256 KiB": 1 << 18, "1 MiB": 1 << 20, "4 MiB": 1 << 22, "whole arrays": 1 << 40}


def main():
    warnings.simplefilter("ignore")
    highway = highway_frames()[0].astype(np.float32)
    larger = larger_frames().astype(np.float32)
    default = core.solver.blocks.BLOCK_BYTES
    print("block size      Highway 48x64 r=48   300x144x176 r=30   (ms/iter, CPU time)")
    for label, size in SIZES.items():
        core.solver.blocks.BLOCK_BYTES = size
        ms = [1000 * per_iteration(X, r, clock=time.process_time) for X, r in ((highway, 48), (larger, 30))]
        print(f"{label:14s}  {ms[0]:19.1f}  {ms[1]:17.1f}")
    core.solver.blocks.BLOCK_BYTES = default


if __name__ == "__main__":
    main()
