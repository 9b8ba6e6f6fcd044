"""The worker process: frames (PULL) -> KDRSDL background model -> masks (PUB).

Validates every message (rejections are counted by reason and logged), counts
sequence gaps as lost frames, keeps at most ``backlog`` frames waiting and drops
the oldest beyond that (counted), and publishes one mask per processed frame on
``mask/<camera>/``. With a state directory, checkpoints the model (atomically,
every ``checkpoint_interval_s`` and at a clean stop) and resumes from a valid
checkpoint at start.
"""

import collections
import time
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import zmq

from core.streaming.background import KDRSDLBackgroundSubtractor
from streamer import checkpoint, metrics, security
from streamer.protocol import REJECT_LOG_EVERY, ProtocolError, SequenceTracker, decode, encode, new_epoch

#: Seconds the worker waits at stop for an abandoned refit to end (the solver checks between
#: iterations and between the cold start's per-slice SVDs; the refit thread is a daemon and does
#: not hold up the exit beyond this). With the loop's 0.2 s poll, a stop takes at most ~2.5 s.
STOP_REFIT_WAIT_S = 2.0


def contact_sheet(frame, background, score, fgmask):
    """One PNG-able uint8 image: frame | background | foreground score | mask, side by side."""
    score8 = np.clip(score * 4 * 255, 0, 255).astype(np.uint8)
    bg = background if background is not None else np.zeros_like(frame)
    return np.hstack([frame, bg, score8, fgmask])


def _checkpoint_arrays(model, tracker, camera):
    """The model's checkpoint plus the worker's sequence position, or None before the first frame."""
    arrays = model.checkpoint()
    if arrays is None:
        return None
    arrays["worker_camera"] = np.str_(camera)
    if tracker.epoch is not None:
        arrays["worker_epoch"] = np.str_(tracker.epoch)
        arrays["worker_last_seq"] = np.int64(tracker.last)
    return arrays


def _restore(path, model, tracker, camera, log):
    """Resume ``model`` and ``tracker`` from the checkpoint at ``path``; the outcome label, or None without a file."""
    try:
        arrays = checkpoint.load(path)
    except checkpoint.CheckpointError as exc:
        log.warning("ignoring corrupt checkpoint, starting cold: %s", exc)
        return "corrupt"
    if arrays is None:
        log.info("no checkpoint at %s: cold start", path)
        return None
    try:
        if str(arrays.get("worker_camera", "")) != camera:
            raise ValueError(f"checkpoint belongs to camera {str(arrays.get('worker_camera'))!r}")
        warm = model.restore(arrays)
    except ValueError as exc:
        log.warning("ignoring checkpoint %s that does not fit, starting cold: %s", path, exc)
        return "mismatch"
    if "worker_epoch" in arrays:
        tracker.epoch, tracker.last = str(arrays["worker_epoch"]), int(arrays["worker_last_seq"])
    log.info(
        "%s restore from %s: %d frames seen, window of %d frames",
        "warm" if warm else "window",
        path,
        model.n_frames,
        len(arrays["window"]),
    )
    return "warm" if warm else "window"


def _write_checkpoint(path, arrays, ok, failed, last, log):
    try:
        size = checkpoint.save(path, arrays)
    except OSError as exc:
        failed.inc()
        log.error("checkpoint %s not written: %s", path, exc)
        return
    ok.inc()
    last.set(time.time())
    log.debug("checkpoint %s written (%d bytes)", path, size)


def run_worker(cfg, stop, log, notify=None):
    """Run the worker loop until ``stop`` is set.

    Parameters
    ----------
    cfg : streamer.config.Config
    stop : threading.Event
    log : logging.Logger
    notify : callable, optional
        sd_notify: called with ``"READY=1"`` once both sockets are bound and with
        ``"WATCHDOG=1"`` each time the main loop makes progress.

    Returns
    -------
    int
        Exit status: 0.
    """
    camera, w = cfg.camera, cfg.worker
    metrics.serve(w.metrics_port, "worker", camera, w.metrics_address)
    m = {
        name: getattr(metrics, name).labels(camera)
        for name in (
            "worker_received",
            "worker_processed",
            "worker_lost",
            "worker_backlog",
            "worker_last_progress",
            "worker_restarts_seen",
            "end_to_end",
            "solve_duration",
            "refit_duration",
            "solver_iterations",
            "solver_residual",
            "solver_rank",
            "solver_not_converged",
            "solver_resets",
            "masks_published",
            "mask_fg_ratio",
        )
    }
    dropped_overload = metrics.worker_dropped.labels(camera, "overload")
    dropped_shutdown = metrics.worker_dropped.labels(camera, "shutdown")
    dropped_error = metrics.worker_dropped.labels(camera, "error")

    ctx = zmq.Context.instance()
    auth = security.start_authenticator(ctx, w.curve_authorized_keys) if w.curve_secret_key else None
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, w.rcvhwm)
    pull.setsockopt(zmq.MAXMSGSIZE, w.max_side * w.max_side + 65536)
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 64)
    pub.setsockopt(zmq.LINGER, 1000)
    monitors = {}
    if auth:
        security.make_server(pull, w.curve_secret_key)
        security.make_server(pub, w.curve_secret_key)
        monitors = {name: security.handshake_monitor(sock) for name, sock in (("frames", pull), ("masks", pub))}
    pull.bind(w.frames_endpoint)
    pub.bind(w.masks_endpoint)
    log.info(
        "listening on %s, publishing on %s%s",
        w.frames_endpoint,
        w.masks_endpoint,
        f" (CURVE, clients from {w.curve_authorized_keys})" if auth else "",
    )
    if notify:
        notify("READY=1")

    model = KDRSDLBackgroundSubtractor(cfg.model.params(), async_refit=True)
    epoch, seq = new_epoch(), 0
    tracker = SequenceTracker()
    backlog = collections.deque()
    rejected = 0
    solver = {"start": "none", "iterations": 0, "residual": None, "rank": 0}
    last = None
    ckpt_path = checkpoint.path_for(w.state_dir, camera) if w.state_dir else None
    ckpt_writer = ckpt_pending = None
    if ckpt_path:
        restored = _restore(ckpt_path, model, tracker, camera, log)
        if restored:
            metrics.checkpoint_restores.labels(camera, restored).inc()
        if restored == "warm":
            solver = {"start": "restored", "iterations": 0, "residual": None, "rank": int(model.state.rank)}
        ckpt_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        ckpt_args = (
            metrics.checkpoint_writes.labels(camera, "ok"),
            metrics.checkpoint_writes.labels(camera, "error"),
            metrics.checkpoint_last_write.labels(camera),
            log,
        )
    next_ckpt = time.monotonic() + w.checkpoint_interval_s
    try:
        while not stop.is_set():
            for name, mon in monitors.items():
                for event in security.failed_handshakes(mon):
                    metrics.handshakes_failed.labels(camera, name).inc()
                    log.warning("%s socket: refused a peer (%s)", name, event)
            if ckpt_writer and time.monotonic() >= next_ckpt:
                next_ckpt = time.monotonic() + w.checkpoint_interval_s
                if ckpt_pending is None or ckpt_pending.done():
                    arrays = _checkpoint_arrays(model, tracker, camera)
                    if arrays is not None:  # written on a thread: a frame never waits for the disk
                        ckpt_pending = ckpt_writer.submit(_write_checkpoint, ckpt_path, arrays, *ckpt_args)
            if not backlog and not pull.poll(200):
                m["worker_last_progress"].set(time.time())
                metrics.beat()
                if notify:
                    notify("WATCHDOG=1")
                continue
            while True:
                try:
                    parts = pull.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                try:
                    msg = decode(parts, "frame", max_side=w.max_side)
                    if msg.header["camera"] != camera:
                        raise ProtocolError(
                            "camera", f"frame for camera {msg.header['camera']!r}, this worker is {camera!r}"
                        )
                except ProtocolError as exc:
                    metrics.worker_rejected.labels(exc.reason).inc()
                    rejected += 1
                    if rejected <= 10 or rejected % REJECT_LOG_EVERY == 0:
                        log.warning("rejected message #%d: %s", rejected, exc)
                    continue
                lost, restarted = tracker.update(msg.header["epoch"], msg.header["seq"])
                if restarted:
                    m["worker_restarts_seen"].inc()
                    log.info("capture restarted: new epoch %s", msg.header["epoch"])
                if lost < 0:
                    metrics.worker_rejected.labels("seq").inc()
                    continue
                m["worker_lost"].inc(lost)
                m["worker_received"].inc()
                backlog.append(msg)
                if len(backlog) > w.backlog:
                    backlog.popleft()
                    dropped_overload.inc()
            m["worker_backlog"].set(len(backlog))
            if not backlog:
                continue
            msg = backlog.popleft()
            h = msg.header
            t0 = time.perf_counter()
            if model.shape is not None and model.shape != msg.image.shape:
                m["solver_resets"].inc()
                log.info("frame shape changed %s -> %s: model reset", model.shape, msg.image.shape)
            try:
                res = model.process(msg.image)
            except Exception:  # a defect in the model must not take the camera down: reset, count, go on
                log.exception("model failed on frame %d; reset to a cold start", h["seq"])
                model.reset()
                m["solver_resets"].inc()
                dropped_error.inc()
                continue
            m["solve_duration"].observe(time.perf_counter() - t0)
            r = res.refit
            if r is not None:
                if r.reset:
                    m["solver_resets"].inc()
                    log.warning("solver reset to a cold start: %s", r.error)
                    solver = {"start": "reset", "iterations": 0, "residual": None, "rank": 0}
                else:
                    mode = "warm" if r.warm else "cold"
                    rank = r.rank
                    metrics.solver_starts.labels(camera, mode).inc()
                    m["solver_iterations"].observe(r.n_iter)
                    m["solver_residual"].set(r.residual)
                    m["solver_rank"].set(rank)
                    m["refit_duration"].observe(r.seconds)
                    if not r.converged:
                        m["solver_not_converged"].inc()
                    solver = {"start": mode, "iterations": r.n_iter, "residual": r.residual, "rank": rank}
            fg_ratio = float(np.count_nonzero(res.fgmask)) / res.fgmask.size
            latency = (time.time_ns() - h["t_capture_ns"]) / 1e9
            parts = encode(
                "mask",
                camera,
                epoch,
                seq,
                h["t_capture_ns"],
                res.fgmask,
                frame_seq=h["seq"],
                frame_epoch=h["epoch"],
                frame_index=h.get("frame_index"),
                fg_ratio=fg_ratio,
                latency_s=latency,
                threshold=res.threshold,
                solver=solver,
                mask_resolution=cfg.model.mask_resolution,
                processing_shape=list(model.processing_shape),
            )
            pub.send_multipart(parts, copy=False)
            seq += 1
            m["end_to_end"].observe(latency)
            m["worker_processed"].inc()
            m["masks_published"].inc()
            m["mask_fg_ratio"].set(fg_ratio)
            m["worker_last_progress"].set(time.time())
            metrics.beat()
            if notify:
                notify("WATCHDOG=1")
            last = (msg.image, res)
    finally:
        if backlog:
            dropped_shutdown.inc(len(backlog))
        # A refit still running is abandoned (it stops at its next iteration); the checkpoint
        # below holds the last installed solution, the last consistent state.
        if model.refit_running:
            log.info("abandoning the %s window refit in progress", model.refit_running)
        if not model.close(wait=STOP_REFIT_WAIT_S):
            log.warning("a window refit did not stop within %.0f s; exiting without it", STOP_REFIT_WAIT_S)
        if ckpt_writer:
            ckpt_writer.shutdown(wait=True)
            arrays = _checkpoint_arrays(model, tracker, camera)
            if arrays is not None:
                _write_checkpoint(ckpt_path, arrays, *ckpt_args)
        if w.snapshot and last is not None:
            image, res = last
            cv2.imwrite(w.snapshot, contact_sheet(image, model.getBackgroundImage(), res.score, res.fgmask))
        for sock, mon in zip((pull, pub), monitors.values(), strict=False):  # no monitors without CURVE
            sock.disable_monitor()
            mon.close()
        pull.close()
        pub.close()
        if auth:
            auth.stop()
        log.info("stopped: %d masks published, %d messages rejected", seq, rejected)
    return 0
