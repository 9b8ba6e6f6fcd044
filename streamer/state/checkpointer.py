"""The worker's checkpoints: restore at start, write every ``interval_s`` on a thread, and at stop.

The arrays are the model's checkpoint (:mod:`core.streaming.snapshot`) plus the worker's camera
and sequence position; the file is written atomically (:mod:`streamer.state.checkpoint`). A periodic
write runs on a thread so that no frame waits for the disk, and is skipped while the previous
one is still being written. The first periodic checkpoint comes at a random point of the second
half of the interval, so that the workers of cameras started together (a machine's boot, a
fleet's restart) do not all copy their state at the same moment, every interval after
(docs/design.md, "Checkpoints").
"""

from __future__ import annotations

import json
import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

import numpy as np

from streamer.state import checkpoint

if TYPE_CHECKING:
    from streamer.motion.events import EventDetector
    from streamer.ops.metrics import WorkerMetrics
    from streamer.wire.protocol import SequenceTracker


#: The first periodic checkpoint comes after at least this fraction of the interval.
FIRST_AFTER = 0.5


class Checkpointable(Protocol):
    """What is checkpointed: the worker's model stage (:class:`streamer.processes.model_stage.ModelStage`)."""

    @property
    def n_frames(self) -> int: ...

    def checkpoint(self) -> dict[str, np.ndarray | np.generic] | None: ...

    def restore(self, arrays: Mapping[str, Any]) -> bool: ...


class Checkpointer:
    """Checkpoints of one camera's model.

    Parameters
    ----------
    path : str
        ``<state_dir>/<camera>.npz``.
    interval_s : float
        Seconds between periodic checkpoints; the first comes after 0.5-1 times it (at random).
    camera : str
    metrics : streamer.ops.metrics.WorkerMetrics
    log : logging.Logger
    events : streamer.motion.events.EventDetector, optional
        Its open events are checkpointed too (array ``worker_events``, JSON) and ended at the next
        start with reason "restart".
    """

    def __init__(
        self,
        path: str,
        interval_s: float,
        camera: str,
        metrics: WorkerMetrics,
        log: logging.Logger,
        events: EventDetector | None = None,
    ) -> None:
        self.path, self.interval_s, self.camera, self.metrics, self.log = path, interval_s, camera, metrics, log
        self.events = events
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future[None] | None = None
        # the first at a random point of the interval's second half: the phase that spreads a
        # fleet's checkpoints (each copies the model's state on its frame thread)
        self._next = time.monotonic() + interval_s * (FIRST_AFTER + (1 - FIRST_AFTER) * random.random())

    @property
    def due_at(self) -> float:
        """When the next periodic checkpoint is due, seconds on ``time.monotonic()``'s clock."""
        return self._next

    def restore(self, model: Checkpointable, tracker: SequenceTracker) -> Optional[str]:
        """Resume ``model`` and ``tracker`` from the file; the outcome label, or None without a file.

        Returns
        -------
        str or None
            "warm" (a solution restored), "window" (only the window), "corrupt" (unreadable
            file, ignored) or "mismatch" (another camera, layout or knobs; ignored); counted.
        """
        outcome = self._restore(model, tracker)
        if outcome:
            self.metrics.checkpoint_restores[outcome].inc()
        return outcome

    def _restore(self, model: Checkpointable, tracker: SequenceTracker) -> Optional[str]:
        try:
            arrays = checkpoint.load(self.path)
        except checkpoint.CheckpointError as exc:
            self.log.warning("ignoring corrupt checkpoint, starting cold: %s", exc)
            return "corrupt"
        if arrays is None:
            self.log.info("no checkpoint at %s: cold start", self.path)
            return None
        try:
            if str(arrays.get("worker_camera", "")) != self.camera:
                raise ValueError(f"checkpoint belongs to camera {str(arrays.get('worker_camera'))!r}")
            self._restore_events(arrays)
            warm = model.restore(arrays)
        except ValueError as exc:
            self.log.warning("ignoring checkpoint %s that does not fit, starting cold: %s", self.path, exc)
            return "mismatch"
        if "worker_epoch" in arrays:
            tracker.epoch, tracker.last = str(arrays["worker_epoch"]), int(arrays["worker_last_seq"])
        self.log.info("%s restore from %s: %d frames seen", "warm" if warm else "window", self.path, model.n_frames)
        return "warm" if warm else "window"

    def _restore_events(self, arrays: Mapping[str, Any]) -> None:
        """Hand the checkpoint's open events to the detector (they end at the next frame)."""
        if self.events is None or "worker_events" not in arrays:
            return
        try:
            state = json.loads(str(arrays["worker_events"]))
        except ValueError:
            self.log.warning("checkpoint %s: unreadable open events, not ended", self.path)
            return
        n = self.events.restore(state if isinstance(state, list) else [])
        if n:
            self.log.info("%d motion event(s) open at the last checkpoint: ended with reason 'restart'", n)

    def tick(self, model: Checkpointable, tracker: SequenceTracker) -> None:
        """Start a periodic checkpoint on the thread when one is due."""
        if time.monotonic() < self._next:
            return
        self._next = time.monotonic() + self.interval_s
        if self._pending is None or self._pending.done():
            arrays = self._arrays(model, tracker)
            if arrays is not None:
                self._pending = self._writer.submit(self._write, arrays)

    def close(self, model: Checkpointable, tracker: SequenceTracker) -> None:
        """Wait for a periodic write, then write the final checkpoint."""
        self._writer.shutdown(wait=True)
        arrays = self._arrays(model, tracker)
        if arrays is not None:
            self._write(arrays)

    def _arrays(self, model: Checkpointable, tracker: SequenceTracker) -> dict[str, np.ndarray | np.generic] | None:
        """The model's checkpoint plus the worker's sequence position; None before the first frame."""
        arrays = model.checkpoint()
        if arrays is None:
            return None
        arrays["worker_camera"] = np.str_(self.camera)
        if self.events is not None:
            arrays["worker_events"] = np.str_(json.dumps(self.events.state()))
        if tracker.epoch is not None and tracker.last is not None:
            arrays["worker_epoch"] = np.str_(tracker.epoch)
            arrays["worker_last_seq"] = np.int64(tracker.last)
        return arrays

    def _write(self, arrays: dict[str, np.ndarray | np.generic]) -> None:
        try:
            size = checkpoint.save(self.path, arrays)
        except OSError as exc:
            self.metrics.checkpoint_writes["error"].inc()
            self.log.error("checkpoint %s not written: %s", self.path, exc)
            return
        self.metrics.checkpoint_writes["ok"].inc()
        self.metrics.checkpoint_last_write.set(time.time())
        self.log.debug("checkpoint %s written (%d bytes)", self.path, size)
