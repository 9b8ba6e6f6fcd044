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
