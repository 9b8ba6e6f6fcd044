"""The median of a few thousand values, as the model takes it at every frame.

``np.median`` sorts out NaNs, axes, ``out`` and masked arrays before it partitions: at a 30-fps
frame, with its code cold after the wait, that costs 0.2 ms for the 4,800 values of the global
offset (``core.streaming.frame_model``), ten times the partition itself (docs/results.md,
"Cameras per core"). :func:`median` partitions and takes the middle, and returns
``np.median``'s value to the bit (``tests/core/test_median.py``).
"""

import numpy as np


def median(values: np.ndarray) -> np.floating:
    """The median of a 1-D array of finite floats: the middle value, or the mean of the two.

    Parameters
    ----------
    values : ndarray, shape (n,), float32 or float64, n >= 1
        Finite values (not checked: a NaN gives an undefined result, where ``np.median`` gives NaN).

    Returns
    -------
    numpy.floating
        Of ``values``' dtype, equal to ``np.median(values)``. For even ``n``, the mean of the two
        middle values computed as ``np.mean`` does: their sum in the dtype, halved.

    Raises
    ------
    ValueError
        If ``values`` is empty or not 1-D.
    """
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"median needs a non-empty 1-D array, got shape {values.shape}")
    n = values.size
    k = n // 2
    if n % 2:
        return np.partition(values, k)[k]
    part = np.partition(values, (k - 1, k))
    return (part[k - 1] + part[k]) / values.dtype.type(2)
