"""streamer.ops.memory: a thread's freed heap is kept for its next use (glibc), measured in real processes;
a file's read-only pages leave the resident set and come back unchanged."""

import mmap
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from streamer.ops.memory import _madvise, _mallopt, _mappings, release_file_pages

# A child process runs three rounds of a refit's pattern on a thread of its own, as the worker's
# refit thread does: six arrays of 10 MiB, every page written, then freed. It prints the minor
# page faults of the first round and of the third (by then glibc has seen these sizes freed).
CHILD = textwrap.dedent(
    """
    import resource, sys, threading
    import numpy as np
    from streamer.ops.memory import hold_freed_heap

    held = hold_freed_heap() if sys.argv[1] == "hold" else False
    faults = []

    def rounds():
        for _ in range(3):
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            arrays = [np.ones(10 * 2**20 // 8) for _ in range(6)]
            del arrays
            faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

    thread = threading.Thread(target=rounds)
    thread.start()
    thread.join()
    print(faults[0], faults[2], held)
    """
)


def first_and_third_round_faults(mode):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    return int(out[0]), int(out[1]), out[2] == "True"


@pytest.mark.skipif(_mallopt is None or sys.platform != "linux", reason="needs glibc's mallopt and RUSAGE_THREAD")
def test_a_thread_reuses_the_heap_it_freed_when_held():
    # By default glibc unmaps the thread's emptied heap and every round faults its 60 MiB in
    # again (measured with glibc 2.36: 2,593 and 2,548 faults in the first and third rounds).
    # Held, the third round reuses the first's pages (measured: 3,086 and 0). The bounds are
    # half and a twentieth of the first round.
    first, third, held = first_and_third_round_faults("default")
    assert not held and first > 0 and third > first / 2, (first, third)
    first, third, held = first_and_third_round_faults("hold")
    assert held and first > 0 and third < first / 20, (first, third)


def mapping_rss_kib(path):
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        return sum(int(m.get("Rss", 0)) for m in _mappings(f.read()) if m["path"] == str(path))


@pytest.mark.skipif(_madvise is None or sys.platform != "linux", reason="needs madvise and /proc/self/smaps")
def test_a_files_read_only_pages_leave_the_resident_set_and_come_back_unchanged_a_written_copy_stays(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 4 * 2**20, dtype=np.uint8)
    path = tmp_path / "library.bin"
    with open(path, "wb") as f:  # written back, as a library is: a page still dirty is not released
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())
    with open(path, "rb") as f:
        read_only = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        written = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private and writable
    try:
        assert bytes(read_only) == data.tobytes()  # every page of the read-only mapping faulted in
        written[:4096] = bytes(4096)  # a page of the copy's own, as a relocated page of a library
        assert mapping_rss_kib(path) >= 4 * 1024
        with open("/proc/self/smaps") as f:
            ours = [m for m in _mappings(f.read()) if m["path"] == str(path) and m["perms"] == "r--s"]
        if any(int(m["Shared_Dirty"]) + int(m["Private_Dirty"]) for m in ours):
            pytest.skip(f"{tmp_path}'s pages stay dirty after fsync (a tmpfs): nothing there is released")
        # the read-only mapping's 4 MiB are released; the writable one is not a candidate (its
        # copied page would be lost), so 4 KiB of it stay resident
        released = release_file_pages(path.name)
        assert released == 4 * 2**20, released
        assert mapping_rss_kib(path) == 4, mapping_rss_kib(path)
        # the pages come back from the file, unchanged, and the written copy kept its own page
        assert bytes(read_only) == data.tobytes()
        assert written[:4096] == bytes(4096) and written[4096:8192] == data[4096:8192].tobytes()
        assert mapping_rss_kib(path) >= 4 * 1024
    finally:
        read_only.close()
        written.close()
