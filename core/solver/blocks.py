"""Row blocks for the solver's sweep over the unfolded stacks.

The element-wise updates of Algorithm 1 (E, M, S, Lambda, the stopping criterion)
are memory-bound chains of NumPy calls, each a pass over an (m, N, n) array, and
the products ``A K_i B^T``, ``A R_i B^T`` and ``S_i B`` read or write arrays of
that size too. Run block by block along the first (row) axis of the unfolded
layout (:mod:`core.solver.products`), a chain re-reads its block from cache instead of
memory, and the products need only block-sized scratch. Each block holds every
frame of its rows, so per-pixel reductions over frames (the robust mean) stay
inside a block.
"""

#: Target size of one block of one array, bytes. From
#: ``OPENBLAS_NUM_THREADS=1 python tests/bench/bench_blocks.py`` (float32 ms/iter of
#: warm restarts, CPU time, on a 2-core EPYC with 1 MiB L2 per core) for 256 KiB /
#: 1 MiB / 4 MiB / whole arrays: Highway 48 x 64 26.1 / 25.1 / 26.0 / 25.5,
#: 300 x 144 x 176 50.7 / 48.6 / 48.4 / 69.2. Threads over the blocks (one-off
#: experiment, not kept): about 12% off the sweep with two Python threads and one
#: BLAS thread each, which needs a thread-pool-control dependency and competes
#: with the streaming worker's own threads.
BLOCK_BYTES = 1 << 20


def row_blocks(m: int, row_bytes: int) -> list[slice]:
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
