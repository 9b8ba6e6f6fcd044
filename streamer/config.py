"""Configuration: a TOML file validated strictly, with command-line flags on top.

Unknown keys and out-of-range values are errors that name the key (pydantic).
A configuration error makes the CLI exit with status 78 (EX_CONFIG), which the
systemd units do not restart on. ``${NAME}`` in a string value of the file is the
environment variable NAME (a secret such as an RTSP password stays out of the file);
an unset one is a configuration error naming it.
"""

import dataclasses
import os
import re
import sys
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from core.streaming.params import BackgroundParams, knobs
from streamer.motion.events import FRAME
from streamer.motion.zones import check_inside
from streamer.wire.protocol import CAMERA_RE, validate_camera
from streamer.wire.security import check_key_dir, read_key

EX_CONFIG = 78


class ConfigError(Exception):
    """A broken configuration; the message names the problem in one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


#: The service subcommands, and which of them may take a flag for a key of each table.
COMMANDS = ("capture", "worker", "subscribe", "run", "broker")
#: The subcommands that serve one camera.
CAMERA_COMMANDS = ("capture", "worker", "subscribe", "run")
SECTION_COMMANDS = {
    "": COMMANDS,
    "broker": ("broker",),
    "mqtt": (),
    "capture": ("capture", "run"),
    "worker": ("worker", "run"),
    "view": ("worker", "run"),
    "events": ("worker", "run"),
    "subscribe": ("subscribe", "run"),
    "model": ("worker", "run"),
}


@dataclass(frozen=True)
class Flag:
    """How a setting is given on the command line (part of its one declaration, :func:`setting`).

    Attributes
    ----------
    commands : tuple of str
        The subcommands that take the flag (a subset of the table's :data:`SECTION_COMMANDS`).
    name : str
        The option, ``--`` and the key with ``_`` as ``-`` unless given.
    metavar : str
        The value's placeholder in ``--help``.
    help_for : dict
        A subcommand's own help, where the key means more there (``run --max-frames``).
    """

    commands: tuple[str, ...]
    name: str | None = None
    metavar: str | None = None
    help_for: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Unit:
    """A setting's unit ("frames", "pixels", ...), kept in its field's metadata for the help and docs."""

    text: str


def setting(default: Any, meaning: str, flag: Flag | None = None, **bounds: Any) -> Any:
    """One setting's one declaration: its default, its bounds, its meaning and its flag.

    The configuration file's validation, the subcommands' flags and their help (streamer.cli) and
    docs/configuration.md's tables (:func:`reference`) all come from it.

    Parameters
    ----------
    default
        The value when neither the file nor a flag gives one.
    meaning : str
        What it does, in the words of ``--help`` and the docs; the unit where it has one.
    flag : Flag, optional
        The subcommands that take it as a flag; None = the file only.
    **bounds
        pydantic's constraints (``ge``, ``le``, ``gt``, ``lt``, ``min_length``, ``max_length``).

    Returns
    -------
    pydantic.fields.FieldInfo
        With the :class:`Flag` in its metadata (pydantic keeps and ignores objects it does not know).
    """
    field = Field(default, description=meaning, **bounds)
    if flag is not None:
        field.metadata.append(flag)
    return field


def flag_of(field: FieldInfo) -> Flag | None:
    """The :class:`Flag` of a field declared by :func:`setting`, or None."""
    return next((m for m in field.metadata if isinstance(m, Flag)), None)


def unit_of(field: FieldInfo) -> str:
    """The unit of a field (a model knob's, :class:`Unit`), or ""."""
    return next((m.text for m in field.metadata if isinstance(m, Unit)), "")


def bounds_text(field: FieldInfo) -> str:
    """A setting's range in words from its pydantic bounds, e.g. ``in [0, 65535]`` or ``> 0``."""
    lo = hi = None
    for m in field.metadata:
        if isinstance(m, (annotated_types.Ge, annotated_types.Gt)):
            lo = ("[", m.ge) if isinstance(m, annotated_types.Ge) else ("(", m.gt)
        elif isinstance(m, (annotated_types.Le, annotated_types.Lt)):
            hi = ("]", m.le) if isinstance(m, annotated_types.Le) else (")", m.lt)
    if lo and hi:
        return f"in {lo[0]}{lo[1]:g}, {hi[1]:g}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {lo[1]:g}"
    if hi:
        return f"{'<=' if hi[0] == ']' else '<'} {hi[1]:g}"
    return ""


def flag_name(key: str, flag: Flag) -> str:
    """The option of setting ``key`` ("section.key"): the flag's own name, else ``--key`` with ``-``."""
    return flag.name or "--" + key.rpartition(".")[2].replace("_", "-")


def metrics_port(command: str) -> Any:
    """The ``metrics_port`` setting of the process ``command`` runs (capture, worker, broker)."""
    return setting(
        0, "Prometheus /metrics and /healthz TCP port; 0 = off", Flag((command,), metavar="P"), ge=0, le=65535
    )


def metrics_address(command: str) -> Any:
    """The ``metrics_address`` setting of the process ``command`` runs."""
    return setting("127.0.0.1", "address the metrics port listens on", Flag((command,), metavar="ADDR"))


_CURVE_KEY = "CURVE: this process's NAME.key_secret file (kdrsdl keygen); with curve_server_key; unset = no CURVE"


class _CurveClient(_Strict):
    """CURVE client keys (streamer.wire.security): this process's key pair and the worker's public key."""

    curve_secret_key: Optional[str] = setting(None, _CURVE_KEY, Flag(("capture", "subscribe"), metavar="FILE"))
    curve_server_key: Optional[str] = setting(
        None, "CURVE: the worker's public NAME.key file", Flag(("capture", "subscribe"), metavar="FILE")
    )

    @model_validator(mode="after")
    def _curve_pair(self) -> "_CurveClient":
        if (self.curve_secret_key is None) != (self.curve_server_key is None):
            raise ValueError("curve_secret_key and curve_server_key must be set together")
        if self.curve_secret_key is not None:
            read_key(self.curve_secret_key, secret=True)
            read_key(self.curve_server_key or "", secret=False)
        return self


_SOURCE = "camera index (0), rtsp:// or http(s):// URL, video file, or 'synthetic[:WxH]'"


class CaptureConfig(_CurveClient):
    """The ``[capture]`` table: the source and how its frames are sent."""

    source: str = setting("synthetic", _SOURCE, Flag(("capture", "run"), metavar="SRC"))
    frames_endpoint: str = setting(
        "ipc:///tmp/kdrsdl-frames-default",
        "ZeroMQ endpoint the worker binds, connected to",
        Flag(("capture",), metavar="EP"),
    )
    metrics_port: int = metrics_port("capture")
    metrics_address: str = metrics_address("capture")
    fps: Optional[float] = setting(
        None,
        "frames per second sent, at most; unset = the source's own rate (a file's frame rate, "
        "a camera's or stream's pace, the synthetic scene unthrottled); 0 = as fast as the worker takes them",
        Flag(("capture", "run"), metavar="F"),
        ge=0,
        le=1000,
    )
    width: int = setting(
        0,
        "resize to this width, pixels, with height; 0 = as read",
        Flag(("capture", "run"), metavar="W"),
        ge=0,
        le=8192,
    )
    height: int = setting(
        0,
        "resize to this height, pixels, with width; 0 = as read",
        Flag(("capture", "run"), metavar="H"),
        ge=0,
        le=8192,
    )
    loop: bool = setting(False, "play a video file again from its start at its end", Flag(("capture", "run")))
    max_frames: int = setting(
        0,
        "stop after this many frames, 0 = never (a file: at its end)",
        Flag(
            ("capture", "run"),
            metavar="N",
            help_for={
                "run": "frames to process (default: a video file's every frame; 300 for a camera, a stream, a "
                "looping file or the synthetic scene; 0 = until Ctrl-C)"
            },
        ),
        ge=0,
    )
    live: Optional[bool] = setting(
        None,
        "unset = a file is not live (every frame sent, the capture waits for the worker, "
        "video timestamps) and a camera or stream is; true = play a file as a live camera would "
        "(frames the worker cannot take are dropped, wall-clock timestamps)",
        Flag(("capture",)),
    )
    sndhwm: int = setting(
        4,
        "frames queued for the worker; beyond, a live source's frame is a counted drop and a file waits",
        ge=1,
        le=10000,
    )


class _ModelBase(_Strict):
    def params(self) -> BackgroundParams:
        """The :class:`core.streaming.params.BackgroundParams` of this section."""
        return BackgroundParams(**self.model_dump())


def _model_fields() -> dict[str, Any]:
    """The ``[model]`` table's fields, from the knobs' one declaration (core.streaming.params)."""
    out: dict[str, Any] = {}
    for f, k, kind in knobs():
        if f.name in MODEL_KNOBS_NOT_CONFIGURED:
            continue
        t = Literal[k.choices] if k.choices else kind
        bounds: dict[str, Any] = {}
        if k.low is not None:
            bounds["gt" if k.low_open else "ge"] = k.low
        if k.high is not None:
            bounds["lt" if k.high_open else "le"] = k.high
        field = setting(f.default, k.meaning, Flag(SECTION_COMMANDS["model"], metavar=f.name.upper()), **bounds)
        field.metadata.append(Unit(k.unit))
        out[f.name] = (Optional[t] if k.optional else t, field)
    return out


#: Knobs the worker sets itself: refits always run on their own thread there.
MODEL_KNOBS_NOT_CONFIGURED = ("async_refit",)
if TYPE_CHECKING:  # the type checker sees the base; its fields come from the declarations at run time
    ModelConfig = _ModelBase
else:
    ModelConfig = create_model("ModelConfig", __base__=_ModelBase, **_model_fields())
ModelConfig.__doc__ = "The ``[model]`` table: every knob of core.streaming.params.BackgroundParams but async_refit."


class WorkerConfig(_Strict):
    """The ``[worker]`` table: the worker's sockets, threads, checkpoints and CURVE."""

    frames_endpoint: str = setting(
        "ipc:///tmp/kdrsdl-frames-default", "ZeroMQ endpoint to bind for frames, PULL", Flag(("worker",), metavar="EP")
    )
    masks_endpoint: str = setting(
        "ipc:///tmp/kdrsdl-masks-default",
        "ZeroMQ endpoint to bind for masks and events, PUB",
        Flag(("worker",), metavar="EP"),
    )
    metrics_port: int = metrics_port("worker")
    metrics_address: str = metrics_address("worker")
    rcvhwm: int = setting(4, "frames ZeroMQ queues on the worker's side", ge=1, le=10000)
    backlog: int = setting(2, "frames kept waiting; older ones are dropped (counted) under overload", ge=1, le=1000)
    max_side: int = setting(4096, "largest accepted frame side, pixels", ge=16, le=8192)
    blas_threads: int = setting(
        1, "threads of each BLAS and OpenMP pool (threadpoolctl), whatever the environment says", ge=1, le=256
    )
    opencv_threads: int = setting(1, "OpenCV's threads", ge=1, le=256)
    mask_encoding: Literal["raw", "png"] = setting(
        "raw", "mask payloads as raw pixels or as 1-bit PNG (for subscribers on another host)"
    )
    snapshot: Optional[str] = setting(
        None,
        "PNG written at stop: frame | background | score | mask of the last frame",
        Flag(("worker",), metavar="PNG"),
    )
    state_dir: Optional[str] = setting(
        None,
        "checkpoint the model to <state_dir>/<camera>.npz and resume from it at start; unset = no checkpoints",
        Flag(("worker",), metavar="DIR"),
    )
    checkpoint_interval_s: float = setting(
        60.0,
        "seconds between checkpoints",
        Flag(("worker",), name="--checkpoint-interval", metavar="S"),
        gt=0,
        le=86400,
    )
    curve_secret_key: Optional[str] = setting(
        None,
        "CURVE on both sockets: the worker's NAME.key_secret file (kdrsdl keygen); with curve_authorized_keys; "
        "unset = no CURVE",
        Flag(("worker",), metavar="FILE"),
    )
    curve_authorized_keys: Optional[str] = setting(
        None,
        "CURVE: directory of the public NAME.key files of the captures and subscribers allowed in",
        Flag(("worker",), metavar="DIR"),
    )

    @model_validator(mode="after")
    def _curve_pair(self) -> "WorkerConfig":
        if (self.curve_secret_key is None) != (self.curve_authorized_keys is None):
            raise ValueError("curve_secret_key and curve_authorized_keys must be set together")
        if self.curve_secret_key is not None:
            read_key(self.curve_secret_key, secret=True)
            check_key_dir(self.curve_authorized_keys or "")
        return self


#: A point of a polygon: (x, y) in input pixels, numbers only (a string such as "3" is refused).
Coordinate = Annotated[float, Strict(), Field(ge=0)]
#: A polygon: at least 3 points.
Polygon = Annotated[list[tuple[Coordinate, Coordinate]], Field(min_length=3, max_length=256)]


class ZoneConfig(_Strict):
    """A named zone: its foreground fraction is in each mask header and the zone gauge."""

    name: str = Field(description="1-64 of A-Z a-z 0-9 _ . - (a Prometheus label value and a JSON key)")
    polygon: Polygon = Field(description="[[x, y], ...] in input pixels, at least 3 points")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not CAMERA_RE.match(v):
            raise ValueError(f"zone name must be 1-64 characters of A-Z a-z 0-9 _ . -, got {v!r}")
        if v == FRAME:
            raise ValueError(f"zone name {FRAME!r} is reserved for whole-frame events")
        return v


class MotionConfig(_Strict):
    """The ``[motion]`` table: regions, ignored areas, zones and events (docs/configuration.md, "Motion")."""

    min_area: int = setting(20, "smallest region listed in a mask's header, input pixels", ge=1, le=10_000_000)
    max_regions: int = setting(20, "most regions listed, largest first; regions_omitted counts the rest", ge=0, le=100)
    ignore: list[Polygon] = setting(
        [],
        "polygons whose pixels are never foreground: zeroed in the mask, in no fraction, and filled before the "
        "model sees the frame, so it learns nothing from them",
        max_length=64,
    )
    zones: list[ZoneConfig] = setting(
        [],
        "named polygons ([[motion.zones]] name, polygon): each mask's header has each zone's foreground "
        "fraction, and so has the gauge kdrsdl_zone_foreground_ratio{zone}",
        max_length=32,
    )
    event_threshold: float = setting(
        0.01, "a zone (or, without zones, the frame) is active above this foreground fraction", ge=0, lt=1
    )
    event_min_frames: int = setting(3, "active frames in a row that start an event", ge=1, le=10000)
    event_quiet_frames: int = setting(
        30, "frames in a row at or below the threshold that end an event", ge=1, le=100000
    )

    @model_validator(mode="after")
    def _unique(self) -> "MotionConfig":
        names = [z.name for z in self.zones]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"zone names must be unique, {dup[0]!r} repeats")
        return self

    def check_frame(self, shape: tuple[int, int]) -> None:
        """Raise ConfigError if a polygon has a point outside a frame of ``shape`` ``(h, w)``."""
        try:
            for i, poly in enumerate(self.ignore):
                check_inside(poly, shape, f"motion.ignore[{i}]")
            for i, z in enumerate(self.zones):
                check_inside(z.polygon, shape, f"motion.zones[{i}] {z.name!r}")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


class EventsConfig(_Strict):
    """The ``[events]`` table: the events' snapshots (streamer.motion.snapshots; docs/operations.md,
    "Snapshots")."""

    snapshots: bool = setting(
        True,
        "publish a JPEG of the frame, the event's box drawn, at each event's start and at its peak (sent at "
        "its end), on snapshot/<camera>/ and on MQTT",
        Flag(("worker", "run")),
    )
    snapshot_dir: Optional[str] = setting(
        None,
        "also write each snapshot into this directory (made if missing); unset = none written",
        Flag(("worker", "run"), metavar="DIR"),
    )
    snapshot_keep: int = setting(
        100, "snapshots of the camera kept in snapshot_dir (the newest)", Flag(("worker",), metavar="N"), ge=1
    )
    snapshot_quality: int = setting(85, "the snapshots' JPEG quality", ge=1, le=100)


class ViewConfig(_Strict):
    """The ``[view]`` table: the worker's live view page (docs/operations.md, "Live view")."""

    port: int = setting(
        0,
        "serve the live view page on this HTTP port; 0 = off",
        Flag(("worker", "run"), name="--view-port", metavar="P"),
        ge=0,
        le=65535,
    )
    address: str = setting(
        "127.0.0.1",
        "address the live view listens on (it shows the camera: loopback unless you mean it)",
        Flag(("worker",), name="--view-address", metavar="ADDR"),
    )
    preview_fps: float = setting(
        5.0, "JPEG frames a second sent to each viewer, at most", Flag(("worker",), metavar="F"), gt=0, le=30
    )


class SubscribeConfig(_CurveClient):
    """The ``[subscribe]`` table: where ``kdrsdl subscribe`` listens and what it keeps."""

    masks_endpoint: str = setting(
        "ipc:///tmp/kdrsdl-masks-default", "ZeroMQ endpoint the worker publishes on", Flag(("subscribe",), metavar="EP")
    )
    output: Optional[str] = setting(
        None,
        "write each mask as a PNG into this directory; unset = none written",
        Flag(
            ("subscribe", "run"),
            metavar="DIR",
            help_for={
                "run": "write this run's masks and contact_sheet.png into DIR/<camera>-<UTC time>/ "
                "(default: none written)"
            },
        ),
    )
    count: int = setting(
        0, "stop after this many masks (or events); 0 = never", Flag(("subscribe",), metavar="N"), ge=0
    )
    keep: int = setting(
        1000, "PNGs kept in output (the newest); 0 = every one", Flag(("subscribe",), metavar="N"), ge=0
    )
    events: bool = setting(
        False, "print the motion events (event/<camera>/) as JSON lines instead of the masks", Flag(("subscribe",))
    )


class BrokerConfig(_Strict):
    """The ``[broker]`` table: one endpoint for every camera (``kdrsdl broker``, docs/operations.md)."""

    workers: list[str] = setting(
        [],
        "the workers' masks endpoints, each connected to (XSUB); repeat the flag for each",
        Flag(("broker",), name="--worker", metavar="EP"),
        max_length=1024,
    )
    endpoint: str = setting(
        "ipc:///tmp/kdrsdl-broker",
        "ZeroMQ endpoint bound for subscribers (XPUB): every camera's masks and events",
        Flag(("broker",), metavar="EP"),
    )
    sndhwm: int = setting(
        1000,
        "messages queued for each subscriber; beyond, that subscriber's messages are dropped (ZeroMQ's "
        "high-water mark), never the workers' or another subscriber's",
        ge=1,
        le=1_000_000,
    )
    metrics_port: int = metrics_port("broker")
    metrics_address: str = metrics_address("broker")
    curve_secret_key: Optional[str] = setting(
        None,
        "CURVE: the broker's NAME.key_secret file (kdrsdl keygen), its client key toward the workers and its "
        "server key toward the subscribers; with curve_server_key, curve_authorized_keys or both; unset = no CURVE",
        Flag(("broker",), metavar="FILE"),
    )
    curve_server_key: Optional[str] = setting(
        None,
        "CURVE toward the workers: their public NAME.key file (the pair of their curve_secret_key; the "
        "workers' curve_authorized_keys must hold the broker's); unset = the workers without CURVE",
        Flag(("broker",), metavar="FILE"),
    )
    curve_authorized_keys: Optional[str] = setting(
        None,
        "CURVE toward the subscribers: directory of the public NAME.key files of those allowed in; unset = "
        "any subscriber, unencrypted",
        Flag(("broker",), metavar="DIR"),
    )

    @model_validator(mode="after")
    def _curve(self) -> "BrokerConfig":
        sides = self.curve_server_key is not None or self.curve_authorized_keys is not None
        if sides != (self.curve_secret_key is not None):
            raise ValueError("curve_secret_key goes with curve_server_key, curve_authorized_keys or both")
        if self.curve_secret_key is not None:
            read_key(self.curve_secret_key, secret=True)
        if self.curve_server_key is not None:
            read_key(self.curve_server_key, secret=False)
        if self.curve_authorized_keys is not None:
            check_key_dir(self.curve_authorized_keys)
        return self


class MqttConfig(_Strict):
    """The ``[mqtt]`` table: the worker's motion on MQTT, with Home Assistant's discovery
    (streamer.wire.mqtt; docs/operations.md, "Home Assistant"). Off while ``host`` is unset."""

    host: Optional[str] = setting(None, "MQTT broker's host; unset = no MQTT")
    port: int = setting(1883, "MQTT broker's TCP port (8883 is TLS's custom)", ge=1, le=65535)
    username: Optional[str] = setting(None, "login, if the broker asks one (${NAME} keeps it out of the file)")
    password: Optional[str] = setting(None, "password of the login (${NAME} keeps it out of the file)")
    tls_ca_file: Optional[str] = setting(None, "TLS: the CA certificate file that signed the broker's; unset = no TLS")
    topic_prefix: str = setting("kdrsdl", "first level of every topic: <prefix>/<camera>/motion, <prefix>/events")
    client_id: Optional[str] = setting(None, "MQTT client id; unset = kdrsdl-<camera>")
    discovery: bool = setting(True, "publish Home Assistant's discovery configs (retained) at each connection")
    discovery_prefix: str = setting("homeassistant", "Home Assistant's discovery prefix")
    keepalive: int = setting(30, "seconds between keep-alive pings", ge=5, le=3600)
    queue: int = setting(1000, "messages kept while the broker is away; beyond, they are dropped (counted)", ge=1)

    @field_validator("topic_prefix", "discovery_prefix")
    @classmethod
    def _topic(cls, v: str) -> str:
        if not v or any(c in v for c in "+#") or v.startswith("/") or v.endswith("/"):
            raise ValueError(f"must be a topic without wildcards or a leading or trailing '/', got {v!r}")
        return v

    @field_validator("tls_ca_file")
    @classmethod
    def _ca(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not os.path.isfile(v):
            raise ValueError(f"CA file {v!r} does not exist")
        return v

    @model_validator(mode="after")
    def _login(self) -> "MqttConfig":
        if self.password is not None and self.username is None:
            raise ValueError("password without username")
        return self


class Config(_Strict):
    """The whole configuration: the top-level keys and one table per part of the service."""

    camera: str = setting(
        "default",
        "camera name, 1-64 of A-Z a-z 0-9 _ . - (topics frame/NAME/, mask/NAME/, event/NAME/)",
        Flag(CAMERA_COMMANDS, metavar="NAME"),
    )
    log_level: Literal["debug", "info", "warning", "error"] = setting(
        "info", "the lowest level of the log lines on stderr", Flag(COMMANDS)
    )
    capture: CaptureConfig = CaptureConfig()
    worker: WorkerConfig = WorkerConfig()
    model: ModelConfig = ModelConfig()
    subscribe: SubscribeConfig = SubscribeConfig()
    motion: MotionConfig = MotionConfig()
    events: EventsConfig = EventsConfig()
    view: ViewConfig = ViewConfig()
    broker: BrokerConfig = BrokerConfig()
    mqtt: MqttConfig = MqttConfig()

    @field_validator("camera")
    @classmethod
    def _camera(cls, v: str) -> str:
        return validate_camera(v)


def settings() -> list[tuple[str, FieldInfo]]:
    """Every key of the configuration that is not a table, as ``("section.key", field)`` in the
    order of the declarations (``("camera", field)`` at the top level); zones' own keys excluded."""
    out: list[tuple[str, FieldInfo]] = []
    for name, field in Config.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            out += [(f"{name}.{key}", f) for key, f in model.model_fields.items()]
        else:
            out.append((name, field))
    return out


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{loc}: {msg}{more}"


#: ``${NAME}`` in a string value of the file: the environment variable NAME.
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _substitute(node: Any, path: str | None, key: str) -> Any:
    """``node`` with every ``${NAME}`` in its strings replaced by the environment's NAME.

    Raises
    ------
    ConfigError
        If a variable is not set (the message names it and the key), so that a secret kept out of
        the file (an RTSP password) is never silently empty.
    """
    if isinstance(node, dict):
        return {k: _substitute(v, path, f"{key}.{k}" if key else k) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, path, key) for v in node]
    if isinstance(node, str):

        def value(m: re.Match) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise ConfigError(f"{path}: {key}: environment variable {name} is not set")
            return os.environ[name]

        return _ENV.sub(value, node)
    return node


def _set(data: dict[str, Any], key: str, value: Any, path: str | None, only_if_absent: bool) -> None:
    """Set ``data``'s dotted ``key`` to ``value`` (only where it is absent, if asked)."""
    node = data
    *parents, last = key.split(".")
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: {p} must be a table")
    if not only_if_absent or last not in node:
        node[last] = value


def load(
    path: str | None = None, overrides: Mapping[str, Any] | None = None, defaults: Mapping[str, Any] | None = None
) -> Config:
    """Load a configuration file and apply overrides.

    Parameters
    ----------
    path : str, optional
        TOML file; None = defaults only.
    overrides : dict, optional
        ``{"section.key": value}`` (or ``{"camera": value}``) from command-line
        flags; None values are ignored.
    defaults : dict, optional
        ``{"section.key": value}`` that a subcommand uses instead of the schema's default: applied
        only where neither the file nor ``overrides`` sets the key (``kdrsdl run`` stops after 300
        frames unless told otherwise).

    Returns
    -------
    Config

    Raises
    ------
    ConfigError
        If the file is missing or unreadable, is not TOML, has an unknown key or
        a value out of range; the message names the file and key.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        data = _substitute(data, path, "")
    for key, value in (overrides or {}).items():
        if value is not None:
            _set(data, key, value, path, only_if_absent=False)
    for key, value in (defaults or {}).items():
        _set(data, key, value, path, only_if_absent=True)
    try:
        cfg = Config.model_validate(data)
        cfg.model.params().validate()  # the model's own checks, so a worker never fails on a loaded config
    except ValidationError as exc:
        raise ConfigError(f"{path or 'command line'}: {_one_line(exc)}") from None
    except ValueError as exc:
        raise ConfigError(f"{path or 'command line'}: model.{exc}") from None  # the model's checks name a knob
    c = cfg.capture
    if c.width and c.height:  # the frame's size is known: the polygons must lie in it
        try:
            cfg.motion.check_frame((c.height, c.width))
        except ConfigError as exc:
            raise ConfigError(f"{path or 'command line'}: {exc}") from None
    return cfg


_TABLES = {
    "": "Top level",
    "capture": "[capture]",
    "worker": "[worker]",
    "model": "[model]",
    "motion": "[motion]",
    "events": "[events]",
    "view": "[view]",
    "subscribe": "[subscribe]",
    "broker": "[broker]",
    "mqtt": "[mqtt]",
}
#: The markers between which docs/configuration.md holds :func:`reference`'s text.
REFERENCE_BEGIN = "<!-- every key: generated by python -m streamer.config docs/configuration.md -->"
REFERENCE_END = "<!-- end of every key -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _literal_choices(t: Any) -> tuple | None:
    """The values of a ``Literal[...]`` annotation (or ``Optional`` of one), else None."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        t = next(a for a in typing.get_args(t) if a is not type(None))
    return typing.get_args(t) if typing.get_origin(t) is Literal else None


def reference() -> str:
    """docs/configuration.md's tables of every key, from the settings' declarations.

    Returns
    -------
    str
        A Markdown table per table of the file: key, default, the flag that also sets it (and the
        subcommands that take it), and its meaning with its unit and range.
    """
    out: list[str] = []
    rows: dict[str, list[str]] = {}
    for key, field in settings():
        section, _, name = key.rpartition(".")
        flag = flag_of(field)
        default = "unset" if field.default is None else f"`{field.default!r}`".replace("'", '"')
        if isinstance(field.default, bool):
            default = f"`{str(field.default).lower()}`"
        where = ""
        if flag is not None:
            commands = [c for c in flag.commands if c in SECTION_COMMANDS[section]]
            where = f"`{flag_name(key, flag)}` ({', '.join(commands)})"
        choices = _literal_choices(field.annotation)
        one_of = f"one of {', '.join(map(repr, choices))}" if choices else ""
        notes = "; ".join(x for x in (unit_of(field), bounds_text(field), one_of) if x)
        meaning = (field.description or "") + (f" ({notes})" if notes else "")
        rows.setdefault(section, []).append(f"| `{name}` | {_cell(default)} | {where} | {_cell(meaning)} |")
    for section, title in _TABLES.items():
        out += [f"### {title}", "", "| key | default | flag | meaning |", "|---|---|---|---|", *rows[section], ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_reference(path: str) -> bool:
    """Replace the text between :data:`REFERENCE_BEGIN` and :data:`REFERENCE_END` in the Markdown
    file ``path`` with :func:`reference`; True when it changed.

    Raises
    ------
    ValueError
        If the file lacks either marker.
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, sep, rest = text.partition(REFERENCE_BEGIN)
    _, sep2, tail = rest.partition(REFERENCE_END)
    if not sep or not sep2:
        raise ValueError(f"{path}: the markers {REFERENCE_BEGIN!r} and {REFERENCE_END!r} must both be there")
    new = f"{head}{REFERENCE_BEGIN}\n\n{reference()}\n{REFERENCE_END}{tail}"
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


if __name__ == "__main__":  # python -m streamer.config docs/configuration.md
    for target in sys.argv[1:] or ["docs/configuration.md"]:
        print(f"{target}: {'rewritten' if write_reference(target) else 'unchanged'}")
