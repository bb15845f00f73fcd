"""hub_reachable: offline at once, one short request otherwise, cached; no network (the request is faked)."""
from __future__ import annotations

import urllib.error

import pytest

from specvlm.models import hub


@pytest.fixture
def calls(monkeypatch):
    """Record every request instead of making it; the answer is set per test through ``calls.answer``."""
    seen = _Calls()

    def fake_urlopen(req, timeout):
        seen.append((req.full_url, req.get_method(), timeout))
        answer = fake_urlopen.answer
        if isinstance(answer, BaseException):
            raise answer
        return _Resp()

    fake_urlopen.answer = None
    monkeypatch.setattr(hub.urllib.request, "urlopen", fake_urlopen)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    hub.clear_cache()
    seen.fake = fake_urlopen  # type: ignore[attr-defined]
    yield seen
    hub.clear_cache()


class _Calls(list):
    fake = None


class _Resp:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_offline_env_answers_false_without_a_request(calls, monkeypatch, value):
    monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert hub.hub_reachable() is False
    assert calls == []


def test_offline_zero_does_not_count(calls, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert hub.hub_reachable(timeout_s=0.5) is True
    assert calls == [("https://huggingface.co/api/models?limit=1", "HEAD", 0.5)]


def test_one_request_then_cached(calls):
    assert hub.hub_reachable() is True
    assert hub.hub_reachable() is True
    assert len(calls) == 1 and calls[0][2] == 2.0


def test_network_error_is_false_and_cached(calls):
    calls.fake.answer = urllib.error.URLError("no route to host")
    assert hub.hub_reachable() is False
    calls.fake.answer = None
    assert hub.hub_reachable() is False  # cached: no second try
    assert len(calls) == 1


def test_timeout_is_false(calls):
    calls.fake.answer = TimeoutError("timed out")
    assert hub.hub_reachable(timeout_s=0.1) is False


def test_http_error_means_the_host_answered(calls):
    calls.fake.answer = urllib.error.HTTPError("u", 503, "busy", {}, None)
    assert hub.hub_reachable() is True


def test_custom_endpoint(calls, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org/")
    assert hub.hub_reachable() is True
    assert calls[0][0] == "https://hub.example.org/api/models?limit=1"


def test_bad_timeout_is_refused(calls):
    with pytest.raises(ValueError, match="timeout_s > 0"):
        hub.hub_reachable(timeout_s=0)
