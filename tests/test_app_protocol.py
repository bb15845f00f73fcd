"""The app talks to the library through one typed protocol (app.runs.facade.Facade): the real facade and every
test fake implement it, so a fake that drifts from the engine's calls fails here, not silently in the app
tests that use it."""
from __future__ import annotations

import inspect

import pytest

from helpers.engines import IOEngine, TinyEngine
from helpers.fakes import FakeEngine, ProbingEngine

from app.runs.facade import Facade, SpecvlmFacade
from helpers.app_fakes import ClipEngine, MarginEngine, NoLoadEngine, OOMEngine, ProbingFake, RecordingEngine

MEMBERS = sorted(n for n, v in vars(Facade).items() if callable(v) and not n.startswith("_"))


def mismatches(cls: type) -> list[str]:
    """The protocol's methods that ``cls`` lacks or cannot be called as the app calls them: each call is made
    with the protocol's required parameters by position and the others by keyword."""
    out = []
    for name in MEMBERS:
        impl = getattr(cls, name, None)
        if not callable(impl):
            out.append(f"{name}: missing")
            continue
        args, kwargs = [], {}
        for p in list(inspect.signature(getattr(Facade, name)).parameters.values())[1:]:
            if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty:
                args.append(object())
            else:
                kwargs[p.name] = object()
        try:
            inspect.signature(impl).bind(object(), *args, **kwargs)
        except TypeError as e:
            out.append(f"{name}: {e}")
    return out


def test_the_protocol_names_what_the_app_calls():
    assert {"prepare", "stream", "make_record", "explain", "load_video", "load_pair", "presets"} <= set(MEMBERS)


@pytest.mark.parametrize("cls", [SpecvlmFacade, FakeEngine, MarginEngine, RecordingEngine, IOEngine, OOMEngine,
                                 TinyEngine, ProbingFake, ProbingEngine, NoLoadEngine, ClipEngine],
                         ids=lambda c: c.__name__)
def test_every_engine_implements_the_protocol(cls):
    assert mismatches(cls) == []
    assert issubclass(cls, Facade)


def test_a_fake_with_the_old_stream_call_is_caught():
    class Drifted(FakeEngine):
        def stream(self, pair, clip, prompt, config, should_stop, **kw):   # prepares inside, as it once did
            return iter(())

    class Missing(FakeEngine):
        prepare = None

    assert [m.split(":")[0] for m in mismatches(Drifted)] == ["stream"]
    assert mismatches(Missing) == ["prepare: missing"]
