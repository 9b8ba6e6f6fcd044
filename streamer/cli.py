"""The ``kdrsdl`` command (also ``python -m streamer``).

Exit status: 0 on a clean stop, 78 (EX_CONFIG) on a configuration error with a one-line message,
66 (EX_NOINPUT) when a video file given as the source does not exist, 1 on other failures; ``run``
also 69 (EX_UNAVAILABLE) when its source gives no frame within ``--open-timeout``, and 130 when
stopped by Ctrl-C (128 + the signal's number).
"""

import argparse
import errno
import os
import sys
import types
import typing
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic.fields import FieldInfo

from streamer.config import (
    EX_CONFIG,
    SECTION_COMMANDS,
    Config,
    ConfigError,
    bounds_text,
    flag_name,
    flag_of,
    load,
    settings,
    unit_of,
)
from streamer.processes.sources import describe

#: sysexits.h: an input file did not exist.
EX_NOINPUT = 66

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


_GROUPS = {
    "": None,
    "capture": "the source ([capture] in the configuration)",
    "worker": "the worker ([worker] in the configuration)",
    "view": "the live view ([view] in the configuration)",
    "events": "the events' snapshots ([events] in the configuration)",
    "subscribe": "the subscriber ([subscribe] in the configuration)",
    "model": "the background model's knobs ([model] in the configuration)",
    "broker": "the broker ([broker] in the configuration)",
}


def flag_type(field: FieldInfo) -> tuple[type, tuple | None]:
    """The type a flag's text is converted to, and the choices of a Literal, from the annotation."""
    t = field.annotation
    if typing.get_origin(t) in (typing.Union, types.UnionType):  # Optional[X]
        t = next(a for a in typing.get_args(t) if a is not type(None))
    if typing.get_origin(t) is typing.Literal:
        return str, typing.get_args(t)
    if typing.get_origin(t) is list:
        return list, None
    assert isinstance(t, type), field
    return t, None


def setting_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of one service subcommand, each from its setting's one declaration.

    Every key of the configuration declared with a :class:`streamer.config.Flag` naming ``command``
    becomes ``--key`` (or the flag's own name), whose value sets ``section.key`` over the file
    (``dest`` is the key itself, so :func:`config_overrides` needs no map); its help is the
    setting's meaning, its unit and range, and its default (streamer.config, :func:`setting`).
    """
    groups: dict[str, Any] = {}
    for key, field in settings():
        section = key.rpartition(".")[0]
        flag = flag_of(field)
        if flag is None or command not in flag.commands or command not in SECTION_COMMANDS[section]:
            continue
        if section not in groups:
            groups[section] = parser.add_argument_group(section, _GROUPS[section]) if _GROUPS[section] else parser
        kind, choices = flag_type(field)
        default = "unset" if field.default is None else field.default
        if isinstance(default, bool):
            default = "on" if default else "off"
        notes = "; ".join(x for x in (unit_of(field), bounds_text(field), f"default {default}") if x)
        text = flag.help_for.get(command) or f"{field.description} ({notes})"
        opts: dict[str, Any] = {"dest": key, "help": text}
        if kind is bool:
            opts["action"] = argparse.BooleanOptionalAction
        elif kind is list:  # given once per item
            opts.update(action="append", metavar=flag.metavar)
        else:
            opts.update(type=kind, choices=choices, metavar=None if choices else flag.metavar)
        groups[section].add_argument(flag_name(key, flag), **opts)


def _config_flag(sp) -> None:
    """--config (the service subcommands)."""
    sp.add_argument(
        "--config",
        metavar="FILE",
        help="TOML configuration file; the flags given override it, no other flag does (default: none)",
    )


def _log_level(sp) -> None:
    """--log-level of keygen and evaluate (no configuration file), from the setting's declaration."""
    field = Config.model_fields["log_level"]
    sp.add_argument(
        "--log-level", dest="log_level", choices=flag_type(field)[1], help=f"{field.description} (default info)"
    )


def _service_parser(sub, command: str, help: str):
    """A service subcommand: --config, then its settings' flags."""
    sp = sub.add_parser(command, help=help)
    _config_flag(sp)
    setting_flags(sp, command)
    return sp


def _keygen_parser(sub) -> None:
    """The keygen subcommand."""
    k = sub.add_parser("keygen", help="write a CURVE key pair NAME.key (public) and NAME.key_secret into DIR")
    k.add_argument("dir", metavar="DIR")
    k.add_argument("name", metavar="NAME", help="e.g. worker-cam1, capture-cam1, subscriber-alarm")
    _log_level(k)


def _run_parser(sub) -> None:
    """The run subcommand: the settings' flags, and how long the source may take to start."""
    r = _service_parser(sub, "run", "capture + worker + subscriber in one command, for a first look")
    r.add_argument(
        "--open-timeout",
        type=float,
        metavar="S",
        default=15.0,
        help="seconds the source may take to give its first frame before the run stops, exit 69 (default 15)",
    )


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
    _service_parser(sub, "capture", "read a source and push grayscale frames to a worker")
    _service_parser(sub, "worker", "keep a KDRSDL background model and publish a mask per frame")
    _service_parser(sub, "subscribe", "print (and optionally save) the masks of a camera")
    _service_parser(sub, "broker", "one endpoint for every camera: a ZeroMQ proxy from the workers to subscribers")
    _keygen_parser(sub)
    _run_parser(sub)
    _evaluate_parser(sub)
    return p


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """``{"section.key": value}`` of the flags given to a service subcommand (None = not given):
    each flag's ``dest`` is its key (:func:`setting_flags`)."""
    keys = {key for key, _ in settings()}
    return {dest: value for dest, value in vars(args).items() if dest in keys}


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
        if args.command == "broker":
            from streamer.ops.notify import systemd_notifier
            from streamer.processes.broker import run_broker

            return run_broker(cfg, stop, log, notify=systemd_notifier())
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
        if isinstance(exc, zmq.ZMQError) and exc.errno in (errno.EADDRINUSE, errno.EACCES):  # names the endpoint
            log.error("cannot bind: %s", exc)
            return 1
        raise
