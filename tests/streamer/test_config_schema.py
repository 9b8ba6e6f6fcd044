"""The [model] table of the configuration comes from the model's one declaration of its knobs."""

import pytest
from knob_edges import WIDEST, edges

from core.streaming.params import BackgroundParams, knobs
from streamer.config import MODEL_KNOBS_NOT_CONFIGURED, ConfigError, ModelConfig, load


def test_model_table_has_every_knob_with_the_models_default():
    names = [f.name for f, _, _ in knobs() if f.name not in MODEL_KNOBS_NOT_CONFIGURED]
    assert list(ModelConfig.model_fields) == names
    assert load().model.params() == BackgroundParams()
    for name in names:
        assert ModelConfig.model_fields[name].description == next(k.meaning for f, k, _ in knobs() if f.name == name)


@pytest.mark.parametrize("name", [f.name for f, k, _ in knobs() if k.low is not None or k.high is not None])
def test_config_accepts_and_refuses_what_the_model_does(name):
    f, k, kind = next(x for x in knobs() if x[0].name == name)
    context = {f"model.{n}": v for n, v in WIDEST.get(name, {}).items()}
    for value, accepted in edges(k, kind):
        if accepted:
            assert getattr(load(overrides={**context, f"model.{name}": value}).model, name) == value
        else:
            with pytest.raises(ConfigError, match=f"model.{name}"):
                load(overrides={**context, f"model.{name}": value})


def test_every_knob_has_a_worker_and_run_flag_that_sets_it():
    from streamer.cli import build_parser, config_overrides

    for command in ("worker", "run"):
        args = build_parser().parse_args([command, "--k-sigma", "2.5", "--no-fill-holes", "--decision", "global",
                                          "--processing-side", "0", "--window", "12"])  # fmt: skip
        cfg = load(overrides=config_overrides(args))
        assert (cfg.model.k_sigma, cfg.model.fill_holes, cfg.model.decision) == (2.5, False, "global")
        assert (cfg.model.processing_side, cfg.model.window) == (0, 12)
        untouched = load(overrides=config_overrides(build_parser().parse_args([command])))
        assert untouched.model.params() == BackgroundParams()
    flags = build_parser()._subparsers._group_actions[0].choices["worker"]._option_string_actions
    for f, _, _ in knobs():
        if f.name not in MODEL_KNOBS_NOT_CONFIGURED:
            assert "--" + f.name.replace("_", "-") in flags, f.name


#: A file that sets, for each service subcommand, keys that a flag of that subcommand could also set.
FILE_SETS = """
camera = "cam7"
[capture]
source = "synthetic:64x48"
fps = 10.0
max_frames = 40
loop = true
[worker]
metrics_port = 9911
checkpoint_interval_s = 12.0
[subscribe]
count = 5
output = "some/dir"
[model]
window = 12
shadow = false
"""


@pytest.mark.parametrize("command", ["capture", "worker", "subscribe", "run"])
def test_a_flag_not_given_never_overrides_the_file(tmp_path, command):
    """Issue 25: only the flags the user typed override the file, for every subcommand."""
    from streamer.cli import RUN_DEFAULTS, build_parser, config_overrides

    path = tmp_path / "cam.toml"
    path.write_text(FILE_SETS)
    args = build_parser().parse_args([command, "--config", str(path)])
    cfg = load(str(path), config_overrides(args), RUN_DEFAULTS if command == "run" else None)
    assert cfg.model_dump() == load(str(path)).model_dump()
    assert cfg.capture.fps == 10.0 and cfg.capture.max_frames == 40 and cfg.model.window == 12
    # a flag given does override the file
    flags = {"capture": ["--fps", "5"], "worker": ["--window", "9"], "subscribe": ["--count", "2"]}
    flags["run"] = flags["capture"]
    args = build_parser().parse_args([command, "--config", str(path), *flags[command]])
    cfg = load(str(path), config_overrides(args), RUN_DEFAULTS if command == "run" else None)
    assert (cfg.capture.fps, cfg.model.window, cfg.subscribe.count) == {
        "capture": (5.0, 12, 5),
        "worker": (10.0, 9, 5),
        "subscribe": (10.0, 12, 2),
        "run": (5.0, 12, 5),
    }[command]


def test_run_uses_its_own_defaults_only_where_the_file_is_silent(tmp_path):
    from streamer.cli import RUN_DEFAULTS, build_parser, config_overrides

    path = tmp_path / "quiet.toml"
    path.write_text('[capture]\nsource = "synthetic"\n')
    args = build_parser().parse_args(["run", "--config", str(path)])
    cfg = load(str(path), config_overrides(args), RUN_DEFAULTS)
    assert (cfg.capture.fps, cfg.capture.max_frames) == (30.0, 300)
    assert load(str(path)).capture.max_frames == 0  # a capture alone runs until stopped


def test_log_level_from_the_file_and_the_flag(tmp_path):
    from streamer.cli import build_parser, config_overrides

    path = tmp_path / "c.toml"
    path.write_text('log_level = "warning"\n')
    for command in ("capture", "worker", "subscribe", "run"):
        args = build_parser().parse_args([command, "--config", str(path)])
        assert load(str(path), config_overrides(args)).log_level == "warning"
        args = build_parser().parse_args([command, "--config", str(path), "--log-level", "debug"])
        assert load(str(path), config_overrides(args)).log_level == "debug"
    path.write_text('log_level = "loud"\n')
    with pytest.raises(ConfigError, match="log_level"):
        load(str(path))


def test_environment_variables_in_string_values(tmp_path, monkeypatch):
    """Issue 27 (part): RTSP credentials from the environment, an unset one named (exit 78)."""
    path = tmp_path / "cam.toml"
    path.write_text('[capture]\nsource = "rtsp://${CAM_USER}:${CAM_PASSWORD}@192.0.2.10:554/stream1"\n')
    monkeypatch.setenv("CAM_USER", "viewer")
    monkeypatch.setenv("CAM_PASSWORD", "s3cret$x")  # substituted once: a $ in the value stays as is
    assert load(str(path)).capture.source == "rtsp://viewer:s3cret$x@192.0.2.10:554/stream1"
    monkeypatch.delenv("CAM_PASSWORD")
    with pytest.raises(ConfigError, match="capture.source: environment variable CAM_PASSWORD is not set"):
        load(str(path))


def test_every_subcommand_takes_log_level():
    """Issue 27 (part): --log-level on every subcommand."""
    import argparse

    from streamer.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(subs) == {"capture", "worker", "subscribe", "keygen", "run", "evaluate", "broker"}
    for name, sub in subs.items():
        assert any("--log-level" in a.option_strings for a in sub._actions), name


def test_the_documented_example_configuration_loads(tmp_path):
    """docs/configuration.md's example is a file that loads, [motion] and [view] included."""
    import re

    from conftest import ROOT

    text = (ROOT / "docs" / "configuration.md").read_text()
    path = tmp_path / "example.toml"
    path.write_text(re.search(r"```toml\n(.*?)```", text, re.S).group(1))
    cfg = load(str(path))
    assert [z.name for z in cfg.motion.zones] == ["driveway"] and len(cfg.motion.ignore) == 1
    assert cfg.view.port == 0 and cfg.view.address == "127.0.0.1"


def test_every_service_flag_says_its_default():
    """Issue 45: every flag of capture, worker, subscribe and run has help naming its default."""
    import argparse

    from streamer.cli import build_parser

    subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    for command in ("capture", "worker", "subscribe", "run"):
        for action in subs[command]._actions:
            if action.dest == "help":
                continue
            assert action.help and "default" in action.help, (command, action.option_strings, action.help)


def _subcommands():
    import argparse

    from streamer.cli import build_parser

    return next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices


def _flag_value(key, field, tmp_path):
    """A value for setting ``key`` that is valid and differs from its default, as the flag's text."""
    from streamer.cli import flag_type
    from streamer.wire.security import create_keys

    special = {
        "camera": "cam-7",
        "capture.source": "synthetic:64x48",
        "log_level": "debug",
    }
    if key in special:
        return special[key]
    if "curve" in key:
        pub, sec = create_keys(str(tmp_path), "k")
        return {"curve_secret_key": sec, "curve_server_key": pub, "curve_authorized_keys": str(tmp_path)}[
            key.rpartition(".")[2]
        ]
    kind, choices = flag_type(field)
    if choices:
        return next(c for c in choices if c != field.default)
    if kind in (str, list):  # a list flag is given once per item
        return f"value-of-{key}"
    from streamer.config import bounds_text

    base = field.default if isinstance(field.default, (int, float)) else 1
    for candidate in (base + 1, base * 0.5, base - 1, 2, 1):  # one that the bounds accept
        candidate = kind(candidate)
        try:
            load(overrides={key: candidate})
            if candidate != field.default:
                return str(candidate)
        except ConfigError:
            continue
    raise AssertionError(f"no valid value found for {key} ({bounds_text(field)})")


#: Keys whose value a lone flag cannot set: they must come in pairs (the pairs are tested in test_curve).
PAIRED = {"curve_secret_key", "curve_server_key", "curve_authorized_keys"}


def test_every_flag_maps_to_a_key_and_back(tmp_path):
    """Issue 47: one declaration per setting. Every option of a service subcommand (but --config
    and run's --open-timeout) sets exactly the key of its dest, and every key declared with a flag
    for a subcommand has that flag there; given alone, the flag's value reaches the loaded
    configuration, and a subcommand run without flags loads the defaults."""
    from streamer.cli import config_overrides
    from streamer.config import COMMANDS, SECTION_COMMANDS, flag_name, flag_of, settings

    declared = dict(settings())
    subs = _subcommands()
    for command in COMMANDS:
        options = {a.dest: a for a in subs[command]._actions if a.option_strings and a.dest not in ("help",)}
        own = {"config", "open_timeout"}
        assert set(options) - own <= set(declared), (command, set(options) - own - set(declared))
        expected = {
            key
            for key, field in declared.items()
            if (flag := flag_of(field)) is not None
            and command in flag.commands
            and command in SECTION_COMMANDS[key.rpartition(".")[0]]
        }
        assert set(options) - own == expected, command
        assert load(overrides=config_overrides(_parse(command, []))) == load()
        for key in expected:
            field = declared[key]
            assert flag_name(key, flag_of(field)) in options[key].option_strings
            if key.rpartition(".")[2] in PAIRED:
                continue
            if flag_type_is_bool(field):
                argv = [flag_name(key, flag_of(field))]
                want = True if field.default is not True else None
                if want is None:
                    argv = ["--no-" + flag_name(key, flag_of(field))[2:]]
                    want = False
            else:
                text = _flag_value(key, field, tmp_path)
                argv, want = [flag_name(key, flag_of(field)), text], None
            overrides = config_overrides(_parse(command, argv))
            assert [k for k, v in overrides.items() if v is not None] == [key], (command, argv)
            cfg = load(overrides=overrides)
            got = cfg
            for part in key.split("."):
                got = getattr(got, part)
            if want is None:
                want = [text] if isinstance(got, list) else type(got)(text) if not isinstance(got, str) else text
            assert got == want, (command, key, got, want)


def _parse(command, argv):
    from streamer.cli import build_parser

    return build_parser().parse_args([command, *argv])


def flag_type_is_bool(field):
    from streamer.cli import flag_type

    return flag_type(field)[0] is bool


def test_the_configuration_reference_is_the_generated_one():
    """docs/configuration.md's "Every key" is what the declarations generate
    (python -m streamer.config docs/configuration.md rewrites it)."""
    from conftest import ROOT

    from streamer.config import REFERENCE_BEGIN, REFERENCE_END, reference

    text = (ROOT / "docs" / "configuration.md").read_text()
    committed = text.split(REFERENCE_BEGIN)[1].split(REFERENCE_END)[0]
    assert committed == f"\n\n{reference()}\n", "run: python -m streamer.config docs/configuration.md"
