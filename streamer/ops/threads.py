"""The worker's own thread budget: BLAS and OpenMP pools (threadpoolctl) and OpenCV's.

A worker is one camera: its frame loop and its refit thread are the parallelism it needs. Left
to themselves, OpenBLAS starts a thread per core for the refits' small matrices and OpenCV
parallelises 320 x 240 morphology and labelling, and both spin against the refit thread and
the other cameras' workers (docs/design.md, "Processes"). The worker therefore sets both
itself, from ``[worker] blas_threads`` and ``opencv_threads``, whatever the environment says
(``OPENBLAS_NUM_THREADS`` in a user's shell, or nothing).
"""

import cv2
import scipy.linalg  # noqa: F401  (loads SciPy's own BLAS, so that the limit reaches it too)
from threadpoolctl import threadpool_info, threadpool_limits


def limit_threads(blas: int, opencv: int) -> str:
    """Limit every BLAS and OpenMP pool loaded in this process to ``blas`` threads, and OpenCV to ``opencv``.

    Parameters
    ----------
    blas : int
        Threads of each BLAS and OpenMP library (>= 1): threadpoolctl's ``threadpool_limits``.
    opencv : int
        OpenCV's threads (>= 1): ``cv2.setNumThreads``.

    Returns
    -------
    str
        What is now in force, for the log: each pool's library and threads, and OpenCV's.
    """
    threadpool_limits(limits=blas)
    cv2.setNumThreads(opencv)
    pools = ", ".join(f"{p['internal_api']} {p['num_threads']}" for p in threadpool_info())
    return f"threads: {pools or 'no BLAS or OpenMP pool'}; OpenCV {cv2.getNumThreads()}"
