"""streamer.memory: freed heap goes back to the OS (glibc), measured in a real process."""

import subprocess
import sys
import textwrap

import pytest

from streamer.memory import _malloc_trim

# A child process allocates 200 arrays of 1 MiB and frees all but the last. The first round is
# mmapped by glibc, and its frees raise glibc's mmap threshold above 1 MiB, so the second round
# comes from the heap. The last array pins the heap's top, so free() alone cannot shrink it: the
# ~199 MiB freed stays resident until the trim.
CHILD = textwrap.dedent(
    """
    import numpy as np
    from streamer.memory import release_freed_heap

    def rss_mib():
        status = open("/proc/self/status").read()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024

    for _ in range(2):
        arrays = [np.ones(2**17) for _ in range(200)]  # 200 x 1 MiB, every page touched
        last = arrays[-1]
        del arrays
    before = rss_mib()
    released = release_freed_heap()
    print(before, rss_mib(), released)
    """
)


@pytest.mark.skipif(_malloc_trim is None or sys.platform != "linux", reason="needs glibc's malloc_trim and /proc")
def test_release_freed_heap_returns_the_freed_pages():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60)
    before, after, released = out.stdout.split()
    # 199 MiB was freed; 150 leaves room for what the interpreter itself keeps.
    assert float(before) - float(after) > 150, out.stdout
    assert released == "True"
