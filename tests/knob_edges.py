"""Values at and just beyond each declared bound of a knob (tests of the model and of the config)."""


def edges(k, kind):
    """(value, accepted) pairs for the :class:`core.streaming.params.Knob` ``k`` of value type ``kind``."""
    step = 1 if kind is int else 1e-9
    out = []
    if k.low is not None:
        out += [(kind(k.low), not k.low_open), (kind(k.low) - step, False)]
    if k.high is not None:
        out += [(kind(k.high), not k.high_open), (kind(k.high) + step, False)]
    return out


#: Knobs whose range depends on another knob's value (checked across knobs), with that knob set
#: where the declared range is widest, for the edge tests.
WIDEST = {"sample_matches": {"samples": 200}}
