"""The ``kdrsdl`` command (also ``python -m streamer``).

Exit status: 0 on a clean stop, 78 (EX_CONFIG) on a configuration error with a one-line message,
66 (EX_NOINPUT) when a video file given as the source does not exist, 1 on other failures; ``run``
also 69 (EX_UNAVAILABLE) when its source gives no frame within ``--open-timeout``, and 130 when
stopped by Ctrl-C (128 + the signal's number).
"""

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from core.streaming.params import knobs
from streamer.config import EX_CONFIG, MODEL_KNOBS_NOT_CONFIGURED, ConfigError, load
from streamer.processes.sources import describe

#: sysexits.h: an input file did not exist.
EX_NOINPUT = 66

# flag dest -> config key
CAPTURE_KEYS = {
    "source": "capture.source",
    "frames_endpoint": "capture.frames_endpoint",
    "metrics_port": "capture.metrics_port",
    "metrics_address": "capture.metrics_address",
    "fps": "capture.fps",
    "width": "capture.width",
    "height": "capture.height",
    "loop": "capture.loop",
    "max_frames": "capture.max_frames",
    "live": "capture.live",
    "curve_secret_key": "capture.curve_secret_key",
    "curve_server_key": "capture.curve_server_key",
}
WORKER_KEYS = {
    "frames_endpoint": "worker.frames_endpoint",
    "masks_endpoint": "worker.masks_endpoint",
    "metrics_port": "worker.metrics_port",
    "metrics_address": "worker.metrics_address",
    "snapshot": "worker.snapshot",
    "state_dir": "worker.state_dir",
    "checkpoint_interval": "worker.checkpoint_interval_s",
    "curve_secret_key": "worker.curve_secret_key",
    "curve_authorized_keys": "worker.curve_authorized_keys",
    "view_port": "view.port",
    "view_address": "view.address",
    "preview_fps": "view.preview_fps",
}
SUBSCRIBE_KEYS = {
    "masks_endpoint": "subscribe.masks_endpoint",
    "output": "subscribe.output",
    "count": "subscribe.count",
    "keep": "subscribe.keep",
    "events": "subscribe.events",
    "curve_secret_key": "subscribe.curve_secret_key",
    "curve_server_key": "subscribe.curve_server_key",
}
RUN_KEYS = {
    "source": "capture.source",
    "max_frames": "capture.max_frames",
    "output": "subscribe.output",
    "fps": "capture.fps",
    "width": "capture.width",
    "height": "capture.height",
    "loop": "capture.loop",
    "view_port": "view.port",
}
#: What ``run`` uses for the synthetic scene where neither the file nor a flag says (a first look
#: ends, at a camera's pace); see :func:`run_defaults` for the other sources.
RUN_DEFAULTS = {"capture.max_frames": 300, "capture.fps": 30.0}


def run_defaults(source: str, loop: bool) -> dict[str, Any]:
    """What ``run`` uses where neither the configuration file nor a flag says, by source.

    A file that does not loop plays to its end at its own rate (the capture's defaults); a camera,
    a stream or a looping file stops after 300 frames at its own pace; the synthetic scene, which
    has no pace, after 300 frames at 30 frames per second.
    """
    kind = describe(source)
    if kind == "synthetic":
        return RUN_DEFAULTS
    return {} if kind == "file" and not loop else {"capture.max_frames": 300}


#: The model flags of ``worker`` and ``run`` (:func:`model_flags`), one per knob.
MODEL_KEYS = {f"model_{f.name}": f"model.{f.name}" for f, _, _ in knobs() if f.name not in MODEL_KNOBS_NOT_CONFIGURED}
WORKER_KEYS.update(MODEL_KEYS)
RUN_KEYS.update(MODEL_KEYS)


def model_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per model knob (``--window``, ``--k-sigma``, ...), from the knobs' one declaration.

    Each sets ``model.<knob>`` (:data:`MODEL_KEYS`) over the configuration file; its help is the
    knob's meaning, unit, range and default (core/streaming/params.py).
    """
    group = parser.add_argument_group("model", "the background model's knobs ([model] in the configuration)")
    for f, k, kind in knobs():
        if f.name in MODEL_KNOBS_NOT_CONFIGURED:
            continue
        extra = "; ".join(x for x in (k.unit, k.range_text(), f"default {f.default}") if x)
        opts: dict[str, Any] = {"dest": f"model_{f.name}", "help": f"{k.meaning} ({extra})"}
        if kind is bool:
            opts["action"] = argparse.BooleanOptionalAction
        else:
            opts.update(type=kind, metavar=f.name.upper(), choices=k.choices)
        group.add_argument("--" + f.name.replace("_", "-"), **opts)


def _log_level(sp) -> None:
    """--log-level (every subcommand)."""
    sp.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        help="the lowest level of the log lines on stderr (default: the configuration file's log_level, else info)",
    )


def _common(sp) -> None:
    """--config, --camera and --log-level."""
    _log_level(sp)
    sp.add_argument(
        "--config",
        metavar="FILE",
        help="TOML configuration file; the flags given override it, no other flag does (default: none)",
    )
    sp.add_argument(
        "--camera",
        metavar="NAME",
        required=False,
        help="camera name, 1-64 of A-Z a-z 0-9 _ . - (topic frame/NAME/ and mask/NAME/; default 'default')",
    )


def _curve_client(sp) -> None:
    """CURVE client keys (capture, subscribe)."""
    sp.add_argument(
        "--curve-secret-key",
        metavar="FILE",
        help="CURVE: this process's NAME.key_secret (kdrsdl keygen); with --curve-server-key (default: no CURVE)",
    )
    sp.add_argument(
        "--curve-server-key", metavar="FILE", help="CURVE: the worker's public NAME.key (default: no CURVE)"
    )


def _capture_parser(sub) -> None:
    """The capture subcommand."""
    c = sub.add_parser("capture", help="read a source and push grayscale frames to a worker")
    _common(c)
    c.add_argument(
        "--source",
        metavar="SRC",
        help="camera index (0), rtsp:// or http(s):// URL, video file, or 'synthetic[:WxH]' (default synthetic)",
    )
    c.add_argument(
        "--frames-endpoint",
        metavar="EP",
        help="ZeroMQ endpoint the worker binds, connected to (default ipc:///tmp/kdrsdl-frames-default)",
    )
    _metrics_flags(c)
    _source_flags(c)
    c.add_argument(
        "--max-frames",
        type=int,
        metavar="N",
        help="stop after N frames (default 0 = never; a file stops at its end)",
    )
    c.add_argument(
        "--live",
        action="store_const",
        const=True,
        help="play a video file as a live camera: drop what the worker cannot take, wall-clock timestamps "
        "(default: a file is played whole, at the worker's pace if slower)",
    )

    _curve_client(c)


def _metrics_flags(sp) -> None:
    """--metrics-port and --metrics-address (capture and worker)."""
    sp.add_argument(
        "--metrics-port", type=int, metavar="P", help="Prometheus /metrics and /healthz TCP port (default 0 = off)"
    )
    sp.add_argument("--metrics-address", metavar="ADDR", help="address the metrics port listens on (default 127.0.0.1)")


def _source_flags(sp) -> None:
    """--fps, --width, --height, --loop (capture and run)."""
    sp.add_argument(
        "--fps",
        type=float,
        metavar="F",
        help="frames per second sent, at most (default: the source's own rate, a file's frame rate; "
        "0 = as fast as the worker takes them)",
    )
    sp.add_argument("--width", type=int, metavar="W", help="resize to W pixels wide, with --height (default: as read)")
    sp.add_argument("--height", type=int, metavar="H", help="resize to H pixels high, with --width (default: as read)")
    sp.add_argument(
        "--loop",
        action="store_const",
        const=True,
        help="play a video file again from its start at its end (default off)",
    )


def _worker_parser(sub) -> None:
    """The worker subcommand."""
    w = sub.add_parser("worker", help="keep a KDRSDL background model and publish a mask per frame")
    _common(w)
    w.add_argument(
        "--frames-endpoint",
        metavar="EP",
        help="ZeroMQ endpoint to bind for frames, PULL (default ipc:///tmp/kdrsdl-frames-default)",
    )
    w.add_argument(
        "--masks-endpoint",
        metavar="EP",
        help="ZeroMQ endpoint to bind for masks and events, PUB (default ipc:///tmp/kdrsdl-masks-default)",
    )
    _metrics_flags(w)
    model_flags(w)
    w.add_argument(
        "--snapshot",
        metavar="PNG",
        help="write frame | background | score | mask of the last frame at stop (default: none)",
    )
    w.add_argument(
        "--state-dir",
        metavar="DIR",
        help="checkpoint the model to DIR/<camera>.npz and resume from it at start (default: no checkpoints)",
    )
    w.add_argument("--checkpoint-interval", type=float, metavar="S", help="seconds between checkpoints (default 60)")
    _view_flags(w)

    w.add_argument(
        "--curve-secret-key",
        metavar="FILE",
        help="CURVE on both sockets: the worker's NAME.key_secret (kdrsdl keygen); with --curve-authorized-keys "
        "(default: no CURVE)",
    )
    w.add_argument(
        "--curve-authorized-keys",
        metavar="DIR",
        help="CURVE: directory of the public NAME.key files of the captures and subscribers allowed in (default: none)",
    )


def _view_flags(sp, port_only: bool = False) -> None:
    """The live view's flags ([view] in the configuration)."""
    sp.add_argument(
        "--view-port", type=int, metavar="P", help="serve the live view page on this port (default 0 = off)"
    )
    if port_only:
        return
    sp.add_argument("--view-address", metavar="ADDR", help="address the live view listens on (default 127.0.0.1)")
    sp.add_argument(
        "--preview-fps", type=float, metavar="F", help="JPEG frames a second sent to each viewer, at most (default 5)"
    )


def _subscribe_parser(sub) -> None:
    """The subscribe subcommand."""
    s = sub.add_parser("subscribe", help="print (and optionally save) the masks of a camera")
    _common(s)
    s.add_argument(
        "--masks-endpoint",
        metavar="EP",
        help="ZeroMQ endpoint the worker publishes on (default ipc:///tmp/kdrsdl-masks-default)",
    )
    s.add_argument("--output", metavar="DIR", help="write each mask as a PNG into DIR (default: none written)")
    s.add_argument("--count", type=int, metavar="N", help="stop after N masks (default 0 = never)")
    s.add_argument("--keep", type=int, metavar="N", help="keep the newest N PNGs in --output (default 1000, 0 = all)")
    s.add_argument(
        "--events",
        action="store_const",
        const=True,
        help="print the motion events (event/<camera>/) as JSON lines instead of the masks (default off)",
    )
    _curve_client(s)


def _keygen_parser(sub) -> None:
    """The keygen subcommand."""
    k = sub.add_parser("keygen", help="write a CURVE key pair NAME.key (public) and NAME.key_secret into DIR")
    k.add_argument("dir", metavar="DIR")
    k.add_argument("name", metavar="NAME", help="e.g. worker-cam1, capture-cam1, subscriber-alarm")
    _log_level(k)


def _run_parser(sub) -> None:
    """The run subcommand."""
    r = sub.add_parser("run", help="capture + worker + subscriber in one command, for a first look")
    _common(r)
    r.add_argument(
        "--source",
        metavar="SRC",
        default=None,
        help="camera index (0), rtsp:// or http(s):// URL, video file, or 'synthetic[:WxH]' (default synthetic)",
    )
    r.add_argument(
        "--max-frames",
        type=int,
        metavar="N",
        help="frames to process (default: a video file's every frame; 300 for a camera, a stream, a looping "
        "file or the synthetic scene; 0 = until Ctrl-C)",
    )
    r.add_argument(
        "--output",
        metavar="DIR",
        help="write this run's masks and contact_sheet.png into DIR/<camera>-<UTC time>/ (default: none written)",
    )
    _source_flags(r)
    r.add_argument(
        "--open-timeout",
        type=float,
        metavar="S",
        default=15.0,
        help="seconds the source may take to give its first frame before the run stops, exit 69 (default 15)",
    )
    _view_flags(r, port_only=True)
    model_flags(r)


def _evaluate_parser(sub) -> None:
    """The evaluate subcommand."""
    e = sub.add_parser("evaluate", help="score methods on CDnet sequences (CDnet or paper protocol)")
    e.add_argument(
        "dataset",
        metavar="ROOT",
        help="one sequence (input/, groundtruth/, temporalROI.txt) or a tree ROOT/<category>/<sequence>/",
    )
    e.add_argument(
        "--protocol",
        choices=("cdnet", "paper"),
        default="cdnet",
        help="cdnet (default): every frame from frame 1, temporalROI scored, masks; "
        "paper: 48x64, 400 frames, AUC of |X - L|",
    )
    e.add_argument(
        "--methods",
        metavar="LIST",
        help="comma-separated; cdnet: kdrsdl-stream,mog2,knn,mog2+post,knn+post,gsoc,cnt,subsense,pawcs; "
        "paper: kdrsdl,kdrsdl-stream,mog2,knn,rpca (default: all of the protocol's)",
    )
    e.add_argument("--frames", metavar="A:B", help="score only this range inside temporalROI (1-based, inclusive)")
    e.add_argument("--sweep", action="store_true", help="paper's oracle sweep of 20 lambdas for kdrsdl and rpca")
    e.add_argument(
        "--config",
        metavar="FILE",
        help="TOML configuration whose [model] table sets kdrsdl-stream's "
        "knobs (cdnet protocol; e.g. processing_side = 0 to process at the input resolution)",
    )
    e.add_argument("--json", metavar="PATH", help="write the results as JSON")
    e.add_argument("--report", metavar="DIR", help="write report.md with curves and a contact sheet per sequence")
    _log_level(e)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    p = argparse.ArgumentParser(
        prog="kdrsdl",
        description=(
            "Real-time video background subtraction with KDRSDL (Bahri et al., ICCV 2017): "
            "capture -> ZeroMQ -> worker -> foreground masks on a ZeroMQ topic."
        ),
    )
    try:
        own = version("kdrsdl-stream")
    except PackageNotFoundError:  # run from a source tree that was never installed
        own = "unknown (not installed)"
    p.add_argument("--version", action="version", version=f"kdrsdl-stream {own}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_capture_parser, _worker_parser, _subscribe_parser, _keygen_parser, _run_parser, _evaluate_parser):
        add(sub)
    return p


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``{"section.key": value}`` of the flags given to a service subcommand (None = not given)."""
    keys = {"capture": CAPTURE_KEYS, "worker": WORKER_KEYS, "subscribe": SUBSCRIBE_KEYS, "run": RUN_KEYS}[args.command]
    overrides = {key: getattr(args, dest) for dest, key in keys.items()}
    overrides["camera"] = args.camera
    overrides["log_level"] = args.log_level
    return overrides


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kdrsdl`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command in ("keygen", "evaluate"):  # no configuration file: the flag alone
        import logging

        logging.basicConfig(stream=sys.stderr, level=(args.log_level or "info").upper())
    if args.command == "keygen":
        from streamer.wire.security import create_keys

        public, secret = create_keys(args.dir, args.name)
        print(f"public key: {public}\nsecret key: {secret} (keep it private)")
        return 0
    if args.command == "evaluate":
        from streamer.evaluation.cli import main as evaluate_main

        return evaluate_main(args)
    try:
        cfg = load(args.config, config_overrides(args))
        if args.command == "run":  # its defaults depend on the source
            cfg = load(args.config, config_overrides(args), run_defaults(cfg.capture.source, cfg.capture.loop))
    except ConfigError as exc:
        print(f"kdrsdl: configuration error: {exc}", file=sys.stderr)
        return EX_CONFIG
    source = cfg.capture.source
    if args.command in ("capture", "run") and describe(source) == "file" and not os.path.exists(source):
        # a camera or stream that drops is retried; a file that is not there will not appear
        print(
            f"kdrsdl: video file {source!r} does not exist "
            "(a camera is its index, e.g. 0; a stream starts with rtsp:// or http(s)://)",
            file=sys.stderr,
        )
        return EX_NOINPUT

    from streamer.processes.lifecycle import install_stop_handlers, setup_logging

    stop = install_stop_handlers()
    log = setup_logging(args.command, cfg.camera, cfg.log_level)
    try:
        if args.command == "capture":
            from streamer.ops.notify import systemd_notifier
            from streamer.processes.capture import run_capture

            return run_capture(cfg, stop, log, notify=systemd_notifier())
        if args.command == "worker":
            from streamer.ops.notify import systemd_notifier
            from streamer.processes.worker import run_worker

            return run_worker(cfg, stop, log, notify=systemd_notifier())
        if args.command == "subscribe":
            from streamer.processes.subscriber import run_subscriber

            summary = run_subscriber(cfg, stop, log)
            what = "events" if cfg.subscribe.events else "masks"
            log.info(f"received %(received)d {what}, %(gaps)d missed, %(rejected)d rejected", summary)
            return 0
        from streamer.processes.run import run_all

        return run_all(cfg, stop, log, open_timeout_s=args.open_timeout)
    except ConfigError as exc:  # found only when used (an ipc directory that cannot be made)
        print(f"kdrsdl: configuration error: {exc}", file=sys.stderr)
        return EX_CONFIG
    except OSError as exc:  # e.g. an endpoint already in use, a port taken
        log.error("%s", exc)
        return 1
    except Exception as exc:  # zmq.ZMQError for a malformed endpoint is a configuration problem
        import zmq

        if isinstance(exc, zmq.ZMQError) and exc.errno in (zmq.EINVAL, zmq.EPROTONOSUPPORT):
            print(f"kdrsdl: configuration error: endpoint: {exc}", file=sys.stderr)
            return EX_CONFIG
        raise
