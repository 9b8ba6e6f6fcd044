"""Row blocks for the solver's element-wise steps on the unfolded stacks.

The element-wise updates of Algorithm 1 (E, M, S, Lambda, the stopping criterion)
are memory-bound chains of NumPy calls, each a pass over an (m, N, n) array. Run
block by block along the first (row) axis of the unfolded layout
(:mod:`core.products`), a chain re-reads its block from cache instead of memory.
Each block holds every frame of its rows, so per-pixel reductions over frames (the
robust mean) stay inside a block.
"""

#: Target size of one block of one array, bytes. Measured with the float32 ms/iter
#: of ``make bench`` (tests/bench/bench_solver.py) after setting this constant, on a
#: 2-core EPYC with 1 MiB L2 per core, for 256 KiB / 1 MiB / 4 MiB / whole arrays:
#: Highway 48x64 17.1 / 16.5 / 16.7 / 16.5, 300 x 144 x 176 45.4 / 43.9 / 44.2 /
#: 49.6. A thread pool over the blocks was measured slower there (one-off experiment,
#: not kept): the passes are memory-bound.
BLOCK_BYTES = 1 << 20


def row_blocks(m, row_bytes):
    """Split ``range(m)`` into contiguous slices of about :data:`BLOCK_BYTES` each.

    Parameters
    ----------
    m : int
        Number of rows (first axis of the unfolded stacks), >= 1.
    row_bytes : int
        Bytes of one row of one array (``N * n * itemsize``).

    Returns
    -------
    list of slice
        Covering ``0..m`` in order, each at least one row.
    """
    rows = max(1, BLOCK_BYTES // max(1, row_bytes))
    return [slice(a, min(a + rows, m)) for a in range(0, m, rows)]
