"""The app tests' fake engine (tests/helpers/fakes.py) streams as the real one does."""
from __future__ import annotations

from types import SimpleNamespace

from helpers.fakes import FakeEngine
from specvlm.types import PrefillInfo


def test_fake_engine_streams_prefill_first():
    eng = FakeEngine(step_s=0)
    cfg = SimpleNamespace(method="specvlm", max_new_tokens=10)
    evs = list(eng.stream(None, None, "", cfg, lambda: False))
    assert isinstance(evs[0], PrefillInfo) and evs[0].prune is not None
    assert sum(len(e.token_ids) for e in evs[1:]) == 10
    assert [t for e in evs[1:] for t in e.token_ids] == eng.tokens(10)
    assert eng.ended == ["done"]


def test_fake_engine_records_how_each_stream_ended():
    eng = FakeEngine(step_s=0)
    cfg = SimpleNamespace(method="vanilla", max_new_tokens=10)
    polls = iter([False, True])
    assert len(list(eng.stream(None, None, "", cfg, lambda: next(polls)))) == 3   # prefill, step 0, step 1
    gen = eng.stream(None, None, "", cfg, lambda: False)
    next(gen)
    gen.close()
    assert eng.ended == ["stopped", "closed"]
