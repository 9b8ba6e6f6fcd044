"""The worker's heap: a refit's freed temporaries kept for the next refit, not faulted in afresh.

A refit allocates and frees about four window-sized temporaries and the window's masks (42 MiB at
320 x 240, window 30; docs/results.md, "Speed") on its own thread. glibc gives that thread an
arena of its own, made of 64 MiB heaps, and unmaps a heap as soon as it is empty, whatever its
thresholds. Every refit then faulted its temporaries back in, the kernel zeroing each page: a
fifth of the refit thread's CPU at 320 x 240 (docs/results.md, "Cameras per core").

:func:`hold_freed_heap` sets glibc's allocator (``mallopt``) so that the process keeps those
pages: one arena for every thread (the main heap, which honours the trim threshold), arrays up
to :data:`MMAP_THRESHOLD` taken from it rather than mapped one by one, and up to
:data:`TRIM_THRESHOLD` of free memory kept at its top. The worker's resident memory then stays
at its peak, the refits' temporaries included, between refits (docs/design.md, "Processes").

:func:`release_file_pages` drops from the process's resident set the pages of the files it maps
read-only (its libraries' code and constants) once its start is over: the start reads much that
nothing runs again. Loading the model's kernels from numba's cache alone reads about 68 MiB of
LLVM's code (llvmlite's library), which nothing runs while no kernel is compiled (a worker compiles
none once they are loaded: tests/core/test_kernels.py); the imports and the libraries' initialisers
read tens of MiB more. The pages stay in the page cache, shared by every process that maps the
files, and those that the process runs again come back by a page fault: what stays resident is
what it uses.
"""

import ctypes
import os
import re

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

#: Allocations up to this size come from the heap, bytes: a window-sized array at the largest
#: processing size (30 x 360 x 360 float32, 15.6 MB) included. glibc's own threshold moves with
#: the sizes freed, up to the same 32 MiB.
MMAP_THRESHOLD = 32 * 2**20
#: Free memory the heap keeps at its top, bytes: more than a refit's temporaries at the largest
#: processing size (about 70 MB with the default window of 30).
TRIM_THRESHOLD = 128 * 2**20

#: glibc's environment variables for the same three settings, which a child process reads at its start.
MALLOC_ENVIRONMENT = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
}

#: madvise's advice that drops a mapping's pages from the resident set (sys/mman.h).
_MADV_DONTNEED = 4
#: numba's compiler library, LLVM as llvmlite ships it: the largest part of what
#: :func:`release_file_pages` drops in a worker.
COMPILER_LIBRARY = "libllvmlite"

_libc = ctypes.CDLL(None, use_errno=True)
# glibc's mallopt, or None where the C library has none (musl, macOS).
_mallopt = getattr(_libc, "mallopt", None)
_madvise = getattr(_libc, "madvise", None)
if _madvise is not None:
    _madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
#: A mapping's first line in /proc/PID/smaps: start-end perms offset dev inode [path].
_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)$")


def hold_freed_heap() -> bool:
    """Keep the heap that a refit frees for the next one (glibc ``mallopt``).

    Call it before the process starts its threads: a thread that has already allocated keeps
    its arena. The settings hold for the whole process, and the same go into the environment
    (glibc's ``MALLOC_*`` variables, :data:`MALLOC_ENVIRONMENT`) for the processes it starts: the
    refits' child (``refit_process``) allocates as a refit thread does.

    Returns
    -------
    bool
        True when glibc took all three settings; False when the C library has no ``mallopt``
        (the allocator then behaves as it does by default) or refused one.
    """
    if _mallopt is None:
        return False
    os.environ.update(MALLOC_ENVIRONMENT)
    settings = ((_M_ARENA_MAX, 1), (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return all(_mallopt(param, value) == 1 for param, value in settings)


def _mappings(smaps: str) -> list[dict[str, int | str]]:
    """The mappings of a /proc/PID/smaps text: ``start``, ``end`` (bytes), ``perms``, ``path`` and
    each of its counters in KiB (``Rss``, ``Anonymous``, ``Private_Dirty``, ...)."""
    out: list[dict[str, int | str]] = []
    for line in smaps.splitlines():
        m = _MAPPING.match(line)
        if m:
            out.append({"start": int(m[1], 16), "end": int(m[2], 16), "perms": m[3], "path": m[4]})
        elif out and line.endswith(" kB"):
            key, _, value = line.partition(":")
            out[-1][key] = int(value.split()[0])
    return out


def release_file_pages(library: str | None = None) -> int:
    """Drop the resident pages of the read-only file mappings that hold the file's own bytes.

    For each mapping of a file (of every file, or of those whose path contains ``library``), not
    writable and without a page of its own (no anonymous or dirty page: a relocated page would
    lose its relocation), ``madvise(MADV_DONTNEED)`` takes its pages out of this process's
    resident set. They stay in the page cache; a later access faults them back in unchanged.
    Linux only.

    Parameters
    ----------
    library : str, optional
        Part of the mapped file's path; None (default) = every mapped file.

    Returns
    -------
    int
        Bytes that were resident in the mappings released; 0 where there is no
        ``/proc/self/smaps`` or no ``madvise`` (not Linux), or no such file is mapped.
    """
    if _madvise is None:
        return 0
    try:
        with open("/proc/self/smaps") as f:
            mappings = _mappings(f.read())
    except OSError:
        return 0
    released = 0
    for m in mappings:
        path = str(m["path"])
        if not path.startswith("/") or (library is not None and library not in path) or "w" in str(m["perms"]):
            continue  # not a file ([heap], [stack], [vdso], anonymous), not the library, or writable
        if m.get("Anonymous", 1) or m.get("Private_Dirty", 1) or m.get("Shared_Dirty", 1):
            continue
        start, end = int(m["start"]), int(m["end"])
        if _madvise(start, end - start, _MADV_DONTNEED) == 0:
            released += int(m.get("Rss", 0)) * 1024
    return released
