"""Configuration: a TOML file validated strictly, with command-line flags on top.

Unknown keys and out-of-range values are errors that name the key (pydantic).
A configuration error makes the CLI exit with status 78 (EX_CONFIG), which the
systemd units do not restart on. ``${NAME}`` in a string value of the file is the
environment variable NAME (a secret such as an RTSP password stays out of the file);
an unset one is a configuration error naming it.
"""

import os
import re
import tomllib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

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


class _CurveClient(_Strict):
    """CURVE client keys (streamer.wire.security): this process's key pair and the worker's public key."""

    curve_secret_key: Optional[str] = Field(None, description="this process's NAME.key_secret file; None = no CURVE")
    curve_server_key: Optional[str] = Field(None, description="the worker's public NAME.key file")

    @model_validator(mode="after")
    def _curve_pair(self) -> "_CurveClient":
        if (self.curve_secret_key is None) != (self.curve_server_key is None):
            raise ValueError("curve_secret_key and curve_server_key must be set together")
        if self.curve_secret_key is not None:
            read_key(self.curve_secret_key, secret=True)
            read_key(self.curve_server_key or "", secret=False)
        return self


class CaptureConfig(_CurveClient):
    source: str = "synthetic"
    frames_endpoint: str = "ipc:///tmp/kdrsdl-frames-default"
    metrics_port: int = Field(0, ge=0, le=65535)
    metrics_address: str = "127.0.0.1"
    fps: Optional[float] = Field(
        None,
        ge=0,
        le=1000,
        description="frames per second sent, at most; unset = the source's own rate (a file's frame rate, "
        "a camera's or stream's pace, the synthetic scene unthrottled); 0 = as fast as the worker takes them",
    )
    width: int = Field(0, ge=0, le=8192)
    height: int = Field(0, ge=0, le=8192)
    loop: bool = False
    max_frames: int = Field(0, ge=0, description="stop after this many frames, 0 = never (a file: at its end)")
    live: Optional[bool] = Field(
        None,
        description="unset = a file is not live (every frame sent, the capture waits for the worker, "
        "video timestamps) and a camera or stream is; true = play a file as a live camera would "
        "(frames the worker cannot take are dropped, wall-clock timestamps)",
    )
    sndhwm: int = Field(4, ge=1, le=10000)


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
        out[f.name] = (Optional[t] if k.optional else t, Field(f.default, description=k.meaning, **bounds))
    return out


#: Knobs the worker sets itself: refits always run on their own thread there.
MODEL_KNOBS_NOT_CONFIGURED = ("async_refit",)
if TYPE_CHECKING:  # the type checker sees the base; its fields come from the declarations at run time
    ModelConfig = _ModelBase
else:
    ModelConfig = create_model("ModelConfig", __base__=_ModelBase, **_model_fields())
ModelConfig.__doc__ = "The ``[model]`` table: every knob of core.streaming.params.BackgroundParams but async_refit."


class WorkerConfig(_Strict):
    frames_endpoint: str = "ipc:///tmp/kdrsdl-frames-default"
    masks_endpoint: str = "ipc:///tmp/kdrsdl-masks-default"
    metrics_port: int = Field(0, ge=0, le=65535)
    metrics_address: str = "127.0.0.1"
    rcvhwm: int = Field(4, ge=1, le=10000)
    backlog: int = Field(2, ge=1, le=1000, description="frames kept waiting; older ones are dropped")
    max_side: int = Field(4096, ge=16, le=8192)
    blas_threads: int = Field(
        1, ge=1, le=256, description="threads of each BLAS and OpenMP pool, whatever the environment says"
    )
    opencv_threads: int = Field(1, ge=1, le=256, description="OpenCV's threads")
    mask_encoding: Literal["raw", "png"] = Field(
        "raw", description="mask payloads as raw pixels or as 1-bit PNG (for subscribers on another host)"
    )
    snapshot: Optional[str] = Field(None, description="PNG written at stop: frame | background | score | mask")
    state_dir: Optional[str] = Field(None, description="directory of the model checkpoint <camera>.npz; None = off")
    checkpoint_interval_s: float = Field(60.0, gt=0, le=86400, description="seconds between checkpoints")
    curve_secret_key: Optional[str] = Field(None, description="the worker's NAME.key_secret file; None = no CURVE")
    curve_authorized_keys: Optional[str] = Field(None, description="directory of the clients' public NAME.key files")

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

    min_area: int = Field(20, ge=1, le=10_000_000, description="smallest region listed, input pixels")
    max_regions: int = Field(20, ge=0, le=100, description="most regions listed per mask (largest first)")
    ignore: list[Polygon] = Field([], max_length=64, description="polygons whose pixels are never foreground")
    zones: list[ZoneConfig] = Field([], max_length=32, description="named zones (fraction, gauge, events)")
    event_threshold: float = Field(0.01, ge=0, lt=1, description="a zone is active above this foreground fraction")
    event_min_frames: int = Field(3, ge=1, le=10000, description="active frames in a row that start an event")
    event_quiet_frames: int = Field(30, ge=1, le=100000, description="quiet frames in a row that end an event")

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


class ViewConfig(_Strict):
    """The ``[view]`` table: the worker's live view page (docs/operations.md, "Live view")."""

    port: int = Field(0, ge=0, le=65535, description="HTTP port of the live view, 0 = off")
    address: str = Field("127.0.0.1", description="address it listens on (it shows the camera: loopback by default)")
    preview_fps: float = Field(5.0, gt=0, le=30, description="JPEG frames a second sent to each viewer, at most")


class SubscribeConfig(_CurveClient):
    masks_endpoint: str = "ipc:///tmp/kdrsdl-masks-default"
    output: Optional[str] = None
    count: int = Field(0, ge=0)
    keep: int = Field(1000, ge=0, description="PNGs kept in output (the newest); 0 = every one")
    events: bool = Field(False, description="receive the motion events instead of the masks")


class Config(_Strict):
    camera: str = "default"
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="the lowest level of the log lines on stderr"
    )
    capture: CaptureConfig = CaptureConfig()
    worker: WorkerConfig = WorkerConfig()
    model: ModelConfig = ModelConfig()
    subscribe: SubscribeConfig = SubscribeConfig()
    motion: MotionConfig = MotionConfig()
    view: ViewConfig = ViewConfig()

    @field_validator("camera")
    @classmethod
    def _camera(cls, v: str) -> str:
        return validate_camera(v)


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
