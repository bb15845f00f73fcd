"""Done when decoding ends: the explanation of the failing steps for Inspect runs after Done, in the background;
Stop (or a new Run) ends it and the Run stays Done; ``/compare_json`` returns at Done."""
from __future__ import annotations

import threading
import time

from helpers.fakes import FakeEngine, sample_video

from app.inputs.settings import RunRequest
from app.runs.backend import Backend
from app.runs.done_first import EXPLAINING
from specvlm.analysis.run import RunRecord
from specvlm.types import Stopped


class SlowExplain(FakeEngine):
    """A fake engine that keeps a run record and explains it until :attr:`release` is set (or it is told to stop)."""

    def __init__(self) -> None:
        super().__init__(step_s=0.0)
        self.release, self.started, self.finished, self.stopped = (threading.Event() for _ in range(4))

    def make_record(self, events, config, prompt, pair, clip):
        return RunRecord.from_events(events, config)

    def explain(self, record, pair, inputs, *, cues=(), subtitle_mode="both", should_stop=None):
        self.started.set()
        while not self.release.wait(0.01):
            if should_stop is not None and should_stop():
                self.stopped.set()
                raise Stopped("stopped while explaining")
        self.finished.set()
        return record


def _until_done(updates) -> dict:
    for upd in updates:
        if str(upd.get("status", "")).startswith("**Done"):
            return upd
    raise AssertionError("the Run never said Done")


def _rest(updates) -> tuple[list[dict], threading.Thread]:
    """The page keeps reading the Run's updates after Done (in a thread here): the list fills as they come."""
    rest: list[dict] = []
    reader = threading.Thread(target=lambda: rest.extend(updates), daemon=True)
    reader.start()
    return rest, reader


def _request(b: Backend) -> RunRequest:
    return RunRequest(video=str(sample_video()), settings=b.default_settings())


def test_done_arrives_before_the_explanation_ends_then_the_record_is_explained():
    eng = SlowExplain()
    b = Backend(eng)
    updates = b.run(_request(b), session="s")
    done = _until_done(updates)
    assert not eng.finished.is_set()                                       # the explanation has not ended
    assert done["ui_state"] == "idle" and done["background"] and done["status"].endswith(EXPLAINING)
    assert done["record"] is not None and done["summary"] and done["spec_stats"]   # Inspect and the summary now
    rest, reader = _rest(updates)
    assert eng.started.wait(10)
    eng.release.set()
    reader.join(10)
    assert eng.finished.is_set() and rest[-1]["status"].startswith("**Done.**")
    assert EXPLAINING not in rest[-1]["status"] and rest[-1]["record"] is not None
    assert all("status" not in u or u is rest[-1] for u in rest)           # Done stays on the page meanwhile


def test_stop_after_done_ends_the_explanation_and_the_run_stays_done():
    eng = SlowExplain()
    b = Backend(eng)
    updates = b.run(_request(b), session="s")
    _until_done(updates)
    rest, reader = _rest(updates)
    assert eng.started.wait(10)
    assert b.stop("s") == "Stopping…"
    reader.join(10)
    last = rest[-1]
    assert eng.stopped.wait(10) and not eng.finished.is_set()
    assert last["status"].startswith("**Done.** Ready for the next run.") and last["ui_state"] == "idle"


def test_a_run_clicked_while_explaining_ends_the_explanation_and_starts_next():
    eng = SlowExplain()
    b = Backend(eng)
    updates = b.run(_request(b), session="s")
    _until_done(updates)
    rest, reader = _rest(updates)
    assert eng.started.wait(10)
    assert b.queue_next("s")                                               # the click waits only for the stop
    reader.join(10)
    last = rest[-1]
    assert eng.stopped.wait(10) and last["status"].startswith("**Done.** The next run starts now.")
    assert last["ui_state"] == "queued"


def test_compare_json_returns_at_done_without_waiting_for_the_explanation():
    eng = SlowExplain()
    b = Backend(eng)
    out = b.run_json(_request(b), session="j")                             # the explanation is never released
    assert out["status"] == "done" and out["identical"] and out["device"] is not None and out["tau"] is not None
    assert not eng.finished.is_set()
    deadline = time.monotonic() + 10
    while b.active_workers() and time.monotonic() < deadline:              # the explanation thread was ended
        time.sleep(0.05)
    assert not b.active_workers() and not eng.finished.is_set()
