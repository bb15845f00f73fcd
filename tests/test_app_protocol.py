"""The app talks to the library through one typed protocol (app.runs.facade.Facade): the real facade and every
test fake implement it, so a fake that drifts from the engine's calls fails here, not silently in the app
tests that use it."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from helpers.engines import IOEngine, TinyEngine
from helpers.fakes import FakeEngine, ProbingEngine

from app.runs.facade import Facade, SpecvlmFacade
from helpers.app_fakes import (ClipEngine, MarginEngine, NoLoadEngine, OOMEngine, ProbingFake, RecordingEngine,
                               SizedEngine)

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
        problem = call_problem(name, impl)
        if problem:
            out.append(f"{name}: {problem}")
    return out


def call_problem(name: str, impl) -> str:
    """Why ``impl`` cannot be called as the app calls the protocol's ``name`` ("" when it can)."""
    args, kwargs = [], {}
    for p in list(inspect.signature(getattr(Facade, name)).parameters.values())[1:]:
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty:
            args.append(object())
        else:
            kwargs[p.name] = object()
    try:
        inspect.signature(impl).bind(object(), *args, **kwargs)
    except TypeError as e:
        return str(e)
    return ""


ENGINES = [SpecvlmFacade, FakeEngine, MarginEngine, RecordingEngine, IOEngine, OOMEngine, TinyEngine, ProbingFake,
           ProbingEngine, NoLoadEngine, ClipEngine, SizedEngine]


def local_fakes() -> list[tuple[str, ast.ClassDef]]:
    """The engines test modules define inside their tests (on top of a fake in :data:`ENGINES`)."""
    known = {c.__name__ for c in ENGINES}
    out = []
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", None) in known for b in node.bases):
                out.append((f"{path.name}::{node.name}", node))
    return out


def overridden(cls: ast.ClassDef) -> dict:
    """The protocol methods a class body defines, as callables with the same parameters (annotations dropped,
    defaults kept as defaults)."""
    out = {}
    for f in cls.body:
        if isinstance(f, ast.FunctionDef) and f.name in MEMBERS:
            a = f.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                if arg is not None:
                    arg.annotation = None
            a.defaults = [ast.Constant(None) for _ in a.defaults]
            a.kw_defaults = [None if d is None else ast.Constant(None) for d in a.kw_defaults]
            stub = ast.FunctionDef(f.name, a, [ast.Pass()], [], None, type_params=[])
            space: dict = {}
            exec(compile(ast.fix_missing_locations(ast.Module([stub], [])), cls.name, "exec"), space)
            out[f.name] = space[f.name]
    return out


def test_the_protocol_names_what_the_app_calls():
    assert {"prepare", "stream", "make_record", "explain", "load_video", "load_pair", "presets"} <= set(MEMBERS)


@pytest.mark.parametrize("cls", ENGINES, ids=lambda c: c.__name__)
def test_every_engine_implements_the_protocol(cls):
    assert mismatches(cls) == []
    assert issubclass(cls, Facade)


def test_the_fakes_defined_inside_tests_keep_the_protocol_calls():
    """A class a test defines on top of a listed engine: each protocol method it overrides takes the app's call."""
    found = [(n, c) for n, c in local_fakes() if not n.startswith("test_app_protocol.py::")]   # drifts on purpose
    assert len(found) >= 7 and "test_public_access.py::Online" in dict(found)
    bad = {name: [f"{m}: {call_problem(m, f)}" for m, f in overridden(node).items() if call_problem(m, f)]
           for name, node in found}
    assert {k: v for k, v in bad.items() if v} == {}


def test_a_fake_with_the_old_stream_call_is_caught():
    class Drifted(FakeEngine):
        def stream(self, pair, clip, prompt, config, should_stop, **kw):   # prepares inside, as it once did
            return iter(())

    class Missing(FakeEngine):
        prepare = None

    assert [m.split(":")[0] for m in mismatches(Drifted)] == ["stream"]
    assert mismatches(Missing) == ["prepare: missing"]
    drifted = dict(local_fakes())["test_app_protocol.py::Drifted"]          # the same drift, read from the source
    assert [m for m, f in overridden(drifted).items() if call_problem(m, f)] == ["stream"]
