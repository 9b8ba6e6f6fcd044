"""Row blocks for the solver's sweep over the unfolded stacks.

The element-wise updates of Algorithm 1 (E, M, S, Lambda, the stopping criterion)
are memory-bound chains of NumPy calls, each a pass over an (m, N, n) array, and
the products ``A K_i B^T``, ``A R_i B^T`` and ``S_i B`` read or write arrays of
that size too. Run block by block along the first (row) axis of the unfolded
layout (:mod:`core.products`), a chain re-reads its block from cache instead of
memory, and the products need only block-sized scratch. Each block holds every
frame of its rows, so per-pixel reductions over frames (the robust mean) stay
inside a block.
"""

#: Target size of one block of one array, bytes. Measured as the float32 ms/iter of
#: 10-iteration warm restarts of ``kdrsdl`` (as in ``make bench``,
#: tests/bench/bench_solver.py) after setting this constant, on a 2-core EPYC with
#: 1 MiB L2 per core, CPU time with one BLAS thread (the most repeatable clock on
#: a shared VM), for 256 KiB / 1 MiB / 4 MiB / whole arrays: Highway 48 x 64
#: 25.5 / 24.9 / 24.9 / 25.0, 300 x 144 x 176: 49.6 / 48.0 / 50.4 / 67.3. Wall
#: time with two BLAS threads ranks them the same (noisier). Threads over the
#: blocks (one-off experiment, not kept): about 12% off the sweep with two Python
#: threads and one BLAS thread each, which needs a thread-pool-control dependency
#: and competes with the streaming worker's own threads.
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
