"""The model's median (core.streaming.median): np.median's value to the bit, at a fraction of its calls."""

import numpy as np
import pytest

from core.streaming.median import median


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 999, 1000, 4799, 4800])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_median_equals_numpys_to_the_bit(n, dtype):
    # Uniform values, values rounded to a few levels (ties at the middle), and a constant array:
    # the frame's offsets from its background are of all three kinds.
    rng = np.random.default_rng(n)
    for trial in range(30):
        values = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 2)).astype(dtype)
        if trial % 3 == 1:
            values = (np.round(values * 8) / 8).astype(dtype)
        elif trial % 3 == 2:
            values = np.full(n, values[0], dtype)
        want = np.median(values)
        got = median(values)
        assert got.dtype == want.dtype == np.dtype(dtype)
        assert got == want, (n, trial, got, want)


def test_the_input_is_left_as_it_was_and_bad_shapes_are_refused():
    values = np.array([3.0, 1.0, 2.0, 5.0], np.float32)
    assert median(values) == np.float32(2.5)
    np.testing.assert_array_equal(values, [3.0, 1.0, 2.0, 5.0])
    with pytest.raises(ValueError, match="non-empty 1-D"):
        median(np.array([], np.float32))
    with pytest.raises(ValueError, match="non-empty 1-D"):
        median(np.ones((2, 3), np.float32))
