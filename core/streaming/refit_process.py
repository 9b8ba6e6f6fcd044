"""Window refits in a process of their own, so that a starved refit never delays the frames.

A refit on a thread of the frames' process (:class:`core.streaming.refit.Refitter`) runs at a lower
priority than the frames, and where cameras share the cores the scheduler leaves it waiting. While
it waits it may hold Python's lock (the GIL), and the frames' thread of the same process then waits
too, whatever its own priority: with the cores busy, frames came out up to 100 ms late during a
refit, against 15 ms when the same refits ran in another process (docs/results.md, "Cameras per
core"). :class:`ProcessRefitter` runs the same :func:`core.streaming.refit.solve_window` in a child
process at the same low priority; only the window, the warm start and the report cross between
the two, over a Unix socket. The model uses it with ``refit_process`` (off by default: among other
cameras the child's extra CPU and memory cost more than the frames it saves; docs/results.md,
"Cameras per core").

The wire between them: one message is a pickle (protocol 5) whose arrays travel out of band, as
their raw bytes after it (the sender copies none of them; the receiver reads each into a buffer of
its own, which becomes the array's memory)::

    u64 length of the pickle, u64 count of buffers, u64 size of each buffer,
    the pickle, then each buffer's bytes

Both ends are this module, started together, so the format carries no version. The parent sends
``(job, (window, init, start, settings, still))``; the child answers ``(job, report)``, the report
None when the job was cancelled. A job is cancelled through a pipe beside the socket: the parent
writes the job's number, and the child's solver, which reads the pipe between its iterations
(:class:`CancelReader`), stops once a number written reaches its job's.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pickle
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

import numpy as np

from core.solver.kdrsdl import KDRSDLResult
from core.solver.state import KDRSDLState
from core.streaming.refit import REFIT_NICENESS, PendingRefits, RefitReport, RefitSettings, solve_window
from core.streaming.window import WindowFrames

#: The message's fixed head: the pickle's length and the count of out-of-band buffers.
_HEAD = struct.Struct("<QQ")
#: Seconds to wait for the child to end once its socket is closed, before it is killed.
STOP_WAIT_S = 2.0
#: What the child runs (``python -c``), followed by its socket's and cancel pipe's descriptors
#: and its niceness: :func:`main`.
CHILD_COMMAND = "from core.streaming.refit_process import main; main()"
#: The environment variables that set the child's BLAS and OpenMP pools, to one thread: a refit's
#: CPU is its thread's (:attr:`core.streaming.refit.RefitReport.cpu_seconds`), and a pool's idle
#: threads spin where the cores are shared (a worker limits its own pools the same way).
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Linux's prctl option that signals a process when its parent ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def send_message(sock: socket.socket, obj: Any) -> None:
    """Send ``obj`` as one message: a protocol-5 pickle, its contiguous arrays out of band.

    Raises
    ------
    OSError
        When the socket is closed or broken (the other end ended).
    """
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sock.sendall(_HEAD.pack(len(data), len(raws)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)) + data)
    for raw in raws:
        sock.sendall(raw)  # no copy: the socket reads the array's own memory


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    while view.nbytes:
        n = sock.recv_into(view)
        if n == 0:
            raise EOFError("the other end closed the socket")
        view = view[n:]


def recv_message(sock: socket.socket) -> Any:
    """Receive one message of :func:`send_message`; its arrays are writable and own their memory.

    Raises
    ------
    EOFError
        When the other end closed the socket before or during the message.
    OSError
        When the socket is broken.
    """
    head = bytearray(_HEAD.size)
    _recv_into(sock, memoryview(head))
    size, count = _HEAD.unpack(head)
    sizes = bytearray(8 * count)
    _recv_into(sock, memoryview(sizes))
    data = bytearray(size)
    _recv_into(sock, memoryview(data))
    buffers = []
    for n in struct.unpack(f"<{count}Q", sizes):
        buf = bytearray(n)
        _recv_into(sock, memoryview(buf))
        buffers.append(buf)
    return pickle.loads(data, buffers=buffers)


def without_E(result: KDRSDLResult) -> KDRSDLResult:
    """``result`` without its sparse part, which the model never reads once a refit is done (it
    keeps the state without ``E``): ``E`` of shape (0, m, n), ``state.E`` None. A window's size
    less to send (9.2 MB at 320 x 240)."""
    return dataclasses.replace(result, E=result.E[:0], state=dataclasses.replace(result.state, E=None))


class CancelReader:
    """The child's end of the cancel pipe: the highest job number the parent has cancelled.

    Parameters
    ----------
    fd : int
        The pipe's read end (the parent writes each cancelled job's number, a signed 64-bit
        integer, little-endian).
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.upto = -1
        self._partial = b""

    def poll(self) -> int:
        """Read what the parent wrote (without waiting) and return the highest number cancelled."""
        while select.select([self.fd], [], [], 0)[0]:
            data = os.read(self.fd, 4096)
            if not data:  # the parent closed its end: it ended, or closes us
                self.upto = 2**62
                break
            data, self._partial = self._partial + data, b""
            whole = len(data) - len(data) % 8
            self._partial = data[whole:]
            if whole:
                self.upto = max(self.upto, *struct.unpack(f"<{whole // 8}q", data[:whole]))
        return self.upto

    def event(self, job: int) -> "_Cancelled":
        """Job ``job``'s cancel event, as the solver reads it (``is_set``)."""
        return _Cancelled(self, job)


class _Cancelled:
    def __init__(self, reader: CancelReader, job: int) -> None:
        self.reader = reader
        self.job = job

    def is_set(self) -> bool:
        return self.reader.poll() >= self.job


def _end_with_parent() -> None:
    """Have Linux end this process when the thread that started it ends (its parent's refit
    thread, which lives until the refitter closes; a killed worker leaves no refit behind)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def serve(sock: socket.socket, cancel: CancelReader, niceness: int, compiled: bool = False) -> None:
    """The child's loop: solve each job that arrives, answer with its report, end at EOF.

    Parameters
    ----------
    sock : socket.socket
        The child's end of the socket pair.
    cancel : CancelReader
        The cancel pipe: a job whose number it has reached is cancelled.
    niceness : int
        Added to the process's nice value once its imports are done: made at the parent's
        priority, they are not starved while the cameras run (a cold refit waits on them).
    compiled : bool
        Load the solver's compiled sweep (:func:`core.solver.fused.warm`) before that.
    """
    _end_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C stops the parent, which stops us
    if compiled:
        from core.solver import fused

        fused.warm()
    os.nice(niceness)
    while True:
        try:
            job, (window, init, start, settings, still) = recv_message(sock)
        except (EOFError, OSError):
            return
        report = solve_window(window, init, start, settings, cancel=cancel.event(job), still=still)  # type: ignore[arg-type]
        del window, init, still
        if report is not None and report.result is not None:
            report = dataclasses.replace(report, result=without_E(report.result))
        try:
            send_message(sock, (job, report))
        except OSError:
            return


def main(argv: list[str] | None = None) -> None:
    """The child's entry: ``python -c '...main()' SOCKET_FD CANCEL_FD NICENESS COMPILED`` (see
    :class:`ProcessRefitter`; COMPILED 1 or 0)."""
    sock_fd, cancel_fd, niceness, compiled = (int(a) for a in (sys.argv[1:] if argv is None else argv))
    serve(socket.socket(fileno=sock_fd), CancelReader(cancel_fd), niceness, bool(compiled))


class _Job:
    """One refit handed to the child: its number, kind, and its report once done."""

    def __init__(self, number: int, kind: str, args: tuple) -> None:
        self.number = number
        self.kind = kind
        self.start = int(args[2])
        self.args: tuple | None = args
        self.done = threading.Event()
        self.report: RefitReport | None = None


class ProcessRefitter(PendingRefits):
    """Runs refits in a child process, one at a time; the interface of :class:`core.streaming.refit.Refitter`.

    The child is spawned (a fresh interpreter: safe whatever threads this process runs) when the
    refitter is made, by a thread of this process that then hands it each refit and waits for its
    report. A frame never waits: :meth:`submit` queues the refit, and the report lands at the
    first :meth:`collect` after it arrived. The child's nice value is :data:`REFIT_NICENESS` above
    this process's; its imports are made before it lowers it.

    If the child ends (killed, out of memory), the refit it held comes back as a report with
    ``reset=True`` and an error saying so (the model then starts cold at its next refit, as after
    numerical trouble), and the next refit spawns a new child. A report's result comes back
    without ``E`` (:func:`without_E`). :meth:`close` ends the child (the model's ``close`` calls
    it); a refitter dropped without it keeps its idle child until this process ends.

    Parameters
    ----------
    niceness : int
        Added to the child's nice value (0-19).
    compiled : bool
        The child loads the solver's compiled sweep before it lowers its priority (for refits
        whose settings ask for it: the model's ``kernel`` is "numba").

    Raises
    ------
    ValueError
        If ``niceness`` is outside 0-19.
    """

    def __init__(self, niceness: int = REFIT_NICENESS, compiled: bool = False) -> None:
        if not 0 <= niceness <= 19:
            raise ValueError(f"niceness must be in 0-19, got {niceness}")
        self.niceness = niceness
        self.compiled = compiled
        super().__init__()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # this thread's; a new one after close()
        self._number = 0
        self._cancelled = -1  # the highest job number cancelled
        self._process: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._cancel_fd: int | None = None  # the write end of the child's cancel pipe
        #: Children spawned (int): 1 after the first start, one more after each that ended.
        self.n_spawned = 0
        self._closed = True
        #: Bumped by each open and close: a thread of an earlier one touches no child of a later one.
        self._generation = 0
        self._lock = threading.Lock()  # the child, its socket and pipe, and the generation
        self._open()

    def _open(self) -> None:
        """Start the thread that spawns the child and hands it the refits."""
        with self._lock:
            self._generation += 1
            self._closed = False
            self._jobs = queue.SimpleQueue()
            args = (self._jobs, self._generation)
        threading.Thread(target=self._serve, args=args, name="kdrsdl-refit-process", daemon=True).start()

    # ------------------------------------------------------------------ the frames' side
    @property
    def pid(self) -> int | None:
        """The child's process id, or None while none runs."""
        p = self._process
        return None if p is None or p.poll() is not None else int(p.pid)

    def submit(
        self,
        window: WindowFrames,
        init: KDRSDLState | None,
        start: int,
        settings: RefitSettings,
        still: np.ndarray | None = None,
    ) -> None:
        """Queue a refit of ``window`` for the child (:func:`core.streaming.refit.solve_window`'s
        arguments); always None (see :meth:`collect`).

        After :meth:`close`, a new child is spawned first.
        """
        if self._closed:
            self._open()
        self._number += 1
        args = (window, init, start, settings, still)
        self._job = self._last = _Job(self._number, "cold" if init is None else "warm", args)
        self._jobs.put(self._job)

    def _stop(self, job: _Job) -> None:
        """Write ``job``'s number into the child's cancel pipe (its solver reads it between iterations)."""
        with self._lock:
            self._cancelled = max(self._cancelled, job.number)
            if self._cancel_fd is not None:
                try:
                    os.write(self._cancel_fd, struct.pack("<q", self._cancelled))
                except OSError:  # the child ended: the thread reports it
                    pass

    def close(self, wait: float = STOP_WAIT_S) -> bool:
        """Cancel the pending refit and end the child: its socket and pipe are closed (it ends at
        the solver's next iteration, or at once when idle), and after ``wait`` seconds it is killed.

        Returns
        -------
        bool
            True when the child has ended.
        """
        self.cancel()
        with self._lock:
            self._closed = True
            self._generation += 1
            self._jobs.put(None)
            process = self._detach()
        if process is None:
            return True
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return True

    # ------------------------------------------------------------------ the thread that talks to the child
    def _detach(self) -> subprocess.Popen | None:
        """Close the current child's socket and cancel pipe and forget it (with the lock held)."""
        process, sock, fd = self._process, self._sock, self._cancel_fd
        self._process = self._sock = self._cancel_fd = None
        if sock is not None:
            sock.close()
        if fd is not None:
            os.close(fd)  # the child reads EOF: every job cancelled
        return process

    def _spawn(self, generation: int) -> socket.socket | None:
        """Start a child (at this thread's priority: its imports are not starved); None once
        ``generation`` has been closed.

        Raises
        ------
        OSError
            When the child cannot be started (no memory, no descriptors, no interpreter).
        """
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        r, w = os.pipe()
        command = [
            sys.executable,
            "-c",
            CHILD_COMMAND,
            str(child.fileno()),
            str(r),
            str(self.niceness),
            str(int(self.compiled)),
        ]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        env |= dict.fromkeys(BLAS_THREAD_VARIABLES, "1")
        started = False
        try:
            with self._lock:
                if generation == self._generation:
                    self._process = subprocess.Popen(command, pass_fds=(child.fileno(), r), env=env, close_fds=True)
                    self._sock, self._cancel_fd = parent, w
                    self.n_spawned += 1
                    started = True
        finally:
            child.close()
            os.close(r)
            if not started:
                parent.close()
                os.close(w)
        return parent if started else None

    def _serve(self, jobs: queue.SimpleQueue, generation: int) -> None:
        failure = None  # why the last start failed
        try:
            sock = self._spawn(generation)
        except OSError as exc:
            sock, failure = None, exc
        while True:
            job = jobs.get()
            if job is None:
                return
            if self._cancelled >= job.number:  # cancelled before it reached the child
                job.args = None
                job.done.set()
                continue
            if sock is None and failure is not None:  # try again for this refit
                try:
                    sock, failure = self._spawn(generation), None
                except OSError as exc:
                    failure = exc
            if sock is None:  # closed, or no child could be started
                job.args = None
                if failure is not None:
                    error = f"the refit process could not be started: {type(failure).__name__}: {failure}"
                    job.report = RefitReport(job.start, 0.0, 0.0, reset=True, error=error)
                job.done.set()
                continue
            try:
                send_message(sock, (job.number, job.args))
                job.args = None  # the window's frames are the child's now
                number, report = recv_message(sock)
                if number != job.number:
                    raise ValueError(f"the refit process answered job {number} to job {job.number}")
                job.report = report
            except Exception as exc:  # the child ended, or the wire broke: end it, start another
                job.args = None
                job.report = self._ended(job, exc, generation)
                try:
                    sock = self._spawn(generation)
                except OSError as start_exc:
                    sock, failure = None, start_exc
            job.done.set()

    def _ended(self, job: _Job, exc: BaseException, generation: int) -> RefitReport | None:
        """The report of a job whose child ended (or whose answer could not be read: the child is
        then killed): a reset, unless the job was cancelled or closed."""
        with self._lock:
            closed = generation != self._generation
            process = None if closed else self._detach()
        code = None
        if process is not None:
            try:
                code = process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
        if closed or self._cancelled >= job.number:
            return None
        error = f"the refit process ended (exit code {code}): {type(exc).__name__}: {exc}"
        return RefitReport(job.start, 0.0, 0.0, reset=True, error=error)
