"""Worker state checkpoints on disk: written atomically, read defensively.

A checkpoint is the background model's :meth:`~core.streaming.background.KDRSDLBackgroundSubtractor.checkpoint`
(named numpy arrays) plus the worker's sequence position, in one ``.npz`` file
per camera, ``<state_dir>/<camera>.npz``. It is written to a temporary file in
the same directory, flushed to disk and renamed over the old one, so a crash
at any moment leaves either the old or the new checkpoint, never half of one.
Loading never unpickles (``allow_pickle=False``).
"""

import os
import tempfile
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np


class CheckpointError(Exception):
    """A checkpoint file that exists but cannot be read (truncated, not npz, unreadable)."""


def path_for(state_dir: str, camera: str) -> str:
    """Checkpoint path of ``camera`` in ``state_dir``: ``<state_dir>/<camera>.npz``."""
    return os.path.join(state_dir, f"{camera}.npz")


def save(path: str, arrays: Mapping[str, Any]) -> int:
    """Write ``arrays`` to ``path`` atomically (temp file, fsync, rename, fsync of the directory).

    Parameters
    ----------
    path : str
        Destination ``.npz`` file; its directory is created if missing.
    arrays : dict of str to ndarray
        Plain (non-object) arrays.

    Returns
    -------
    int
        Bytes written.

    Raises
    ------
    OSError
        If the directory or file cannot be written (disk full, permissions); the
        previous checkpoint, if any, is left untouched.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".ckpt-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return size


def load(path: str) -> dict[str, np.ndarray] | None:
    """Read a checkpoint written by :func:`save`.

    Parameters
    ----------
    path : str

    Returns
    -------
    dict of str to ndarray, or None
        None when there is no file (a first start).

    Raises
    ------
    CheckpointError
        If the file exists but is corrupt or unreadable; the message says why.
    """
    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise ValueError("not an .npz archive")
        with f:
            return {name: f[name] for name in f.files}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise CheckpointError(f"{path}: unreadable checkpoint: {type(exc).__name__}: {exc}") from None
