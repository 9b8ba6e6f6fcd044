"""Returning the heap that a window refit freed to the operating system.

A refit allocates and frees about six window-sized temporaries (50 MiB at 320 x 240, window 30).
glibc keeps freed heap pages mapped, so without a trim the worker holds that memory between
refits as if it were live, and the heap fragments over minutes (docs/design.md, "Processes").
"""

import ctypes

# glibc's malloc_trim, or None where the C library has none (musl, macOS).
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)


def release_freed_heap() -> bool:
    """Hand the process's free heap pages back to the OS (glibc ``malloc_trim(0)``).

    It walks every allocator arena, which takes 2-4 ms at 320 x 240 and stalls other threads'
    allocations meanwhile, and the pages it frees are faulted back in at their next use. Call it
    when no frame is waiting, and not often (the worker: at most every 10 s).

    Returns
    -------
    bool
        True when glibc released some memory; False when it released none or when the C
        library has no ``malloc_trim``.
    """
    return bool(_malloc_trim(0)) if _malloc_trim is not None else False
