"""The model's knobs: one declaration, checked from it."""

import dataclasses

import pytest
from knob_edges import WIDEST, edges

from core.streaming.params import BackgroundParams, knobs


def test_every_knob_is_declared_with_a_meaning_and_its_default_is_valid():
    declared = knobs()
    assert [f.name for f, _, _ in declared] == [f.name for f in dataclasses.fields(BackgroundParams)]
    for f, k, kind in declared:
        assert len(k.meaning) > 10, f.name
        assert kind in (int, float, bool, str)
        if kind is str:
            assert f.default in k.choices
    BackgroundParams().validate()
    assert "    window : int\n" in BackgroundParams.__doc__  # the generated Attributes section


@pytest.mark.parametrize("name", [f.name for f, k, _ in knobs() if k.low is not None or k.high is not None])
def test_bounds_are_enforced_as_declared(name):
    f, k, kind = next(x for x in knobs() if x[0].name == name)
    for value, accepted in edges(k, kind):
        p = dataclasses.replace(BackgroundParams(), **WIDEST.get(name, {}), **{name: value})
        if accepted:
            p.validate()
        else:
            with pytest.raises(ValueError, match=f"^{name} must be"):
                p.validate()


def test_types_choices_and_none_are_enforced():
    for name, bad in (
        ("window", 3.0),
        ("window", True),
        ("alpha", float("nan")),
        ("shadow", 1),
        ("decision", "median"),
        ("rank", None),
        ("k_sigma", "3"),
    ):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            dataclasses.replace(BackgroundParams(), **{name: bad}).validate()
    dataclasses.replace(BackgroundParams(), lam=None, threshold=None).validate()


def test_knobs_that_depend_on_each_other_are_checked_together():
    with pytest.raises(ValueError, match="^sample_matches must be at most samples"):
        BackgroundParams(samples=4, sample_matches=5).validate()
    BackgroundParams(samples=0, sample_matches=5).validate()  # no samples: N is unused
    with pytest.raises(ValueError, match="^sample_period must be a multiple of 4"):
        BackgroundParams(sample_period=10).validate()
