"""A public server offers the operator's models only, and its messages name nothing of the server.

The policy (:mod:`app.inputs.access`) is checked through the backend with the fake engine, and through
``app.py``'s own :func:`serve` started as a public deployment starts it (a Space's environment,
``--host 0.0.0.0``, ``--share`` with Gradio's tunnel faked), driven by ``gradio_client`` over
``/compare_json`` and ``/compare`` with the real engine and the bundled model. Offline throughout: the
allowlisted Hub id is served from a temporary Hub cache holding a copy of the bundled target.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.fakes import ROOT, FakeEngine, free_port, sample_video

pytest.importorskip("gradio_client")

from app.inputs.access import MAX_FIELD_CHARS, AccessError, ModelAccess, exposure, resolve_custom  # noqa: E402
from app.inputs.settings import RunRequest, RunSettings, UserError  # noqa: E402
from app.runs.backend import Backend  # noqa: E402
from app.runs.facade import SpecvlmFacade  # noqa: E402

pytestmark = pytest.mark.timeout(240)

BUNDLED = ROOT / "assets" / "model" / "target"
HUB_ID = "specvlm-test/tiny-target"
PROBES = ("/etc", "/nonexistent", "../..", "x" * 5000)
"""Custom fields a visitor might try: a folder that exists, one that does not, a way up, an overlong text."""
OFFERS_NOTHING = "The custom model field names no model this server offers: pick a preset."


def _app_module():
    spec = importlib.util.spec_from_file_location("app_main", ROOT / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(backend: Backend, custom: str, **kw) -> dict:
    s = RunSettings(preset="Fake tiny (CPU)", custom_model=custom, num_frames=4, max_new_tokens=8, **kw)
    return list(backend.run(RunRequest(str(sample_video()), "Describe.", s), session="s"))[-1]


def _assert_hides_the_server(message: str, probe: str) -> None:
    assert "\n" not in message and probe[:40] not in message
    for word in ("Error", "errno", "/etc", "/tmp", "/nonexistent", str(ROOT), "transformers", "Traceback"):
        assert word not in message, (word, message)


# ---- who is public --------------------------------------------------------------------------------

@pytest.mark.parametrize("host,share,env,why", [
    ("127.0.0.1", False, {}, ""), ("localhost", False, {}, ""), ("::1", False, {}, ""), ("127.0.0.2", False, {}, ""),
    ("0.0.0.0", False, {}, "--host 0.0.0.0"), ("::", False, {}, "--host ::"),
    ("192.168.1.5", False, {}, "--host 192.168.1.5"),
    ("127.0.0.1", True, {}, "a --share link"),
    ("0.0.0.0", False, {"SPACE_ID": "someone/studio"}, "a Hugging Face Space"),
    ("127.0.0.1", False, {"SYSTEM": "spaces"}, "a Hugging Face Space"),
])
def test_a_space_a_share_link_and_hosts_beyond_loopback_are_public(host, share, env, why):
    assert exposure(host, share, env) == why


def test_flags_and_environment_build_the_access(tmp_path, capsys):
    mod = _app_module()
    assert mod.parse_args([]).access == ModelAccess()   # loopback default: nothing public, nothing widened
    args = mod.parse_args(["--host", "0.0.0.0", "--allowed-models", "a/b, c/d", "--models-dir", str(tmp_path),
                           "--max-model-gb", "20"])
    assert args.access == ModelAccess("--host 0.0.0.0", False, ("a/b", "c/d"), str(tmp_path), 20.0)
    env = {"SPACE_ID": "o/s", "SPECVLM_ALLOW_CUSTOM_MODELS": "1", "SPECVLM_MODELS_DIR": str(tmp_path),
           "SPECVLM_ALLOWED_MODELS": "e/f", "SPECVLM_MAX_MODEL_GB": "7.5"}
    from app.inputs.access import access_from_args
    got = access_from_args(mod.parse_args([]), env)
    assert got == ModelAccess("a Hugging Face Space", True, ("e/f",), str(tmp_path), 7.5)
    for argv, words in ((["--models-dir", str(tmp_path / "none")], "--models-dir (SPECVLM_MODELS_DIR) must name"),
                        (["--allowed-models", "/etc"], "'/etc' is not one"), (["--max-model-gb", "0"], "positive")):
        with pytest.raises(SystemExit):
            mod.parse_args(argv)
        assert words in capsys.readouterr().err
    with pytest.raises(AccessError, match="SPECVLM_MAX_MODEL_GB='lots' is not a number"):
        access_from_args(mod.parse_args([]), {"SPECVLM_MAX_MODEL_GB": "lots"})


# ---- the policy through the backend ---------------------------------------------------------------

def test_a_public_server_offers_its_presets_only_with_one_line_for_every_probe():
    backend = Backend(FakeEngine(step_s=0.0), access=ModelAccess("--host 0.0.0.0"))
    errors = {p: _run(backend, p)["error"] for p in (*PROBES, "someone/some-vlm", str(BUNDLED), "fake/target")}
    assert set(errors.values()) == {OFFERS_NOTHING}
    for probe, message in errors.items():
        _assert_hides_the_server(message, probe)
    assert backend.engine.loads == 0
    assert _run(backend, "")["status"].startswith("**Done.**")   # the presets run as ever


def test_opted_in_models_load_and_nothing_else(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "target").symlink_to(BUNDLED)
    (tmp_path / "outside").mkdir()
    access = ModelAccess("a Hugging Face Space", allowed_models=("org/model",), models_dir=str(models))
    backend = Backend(FakeEngine(step_s=0.0), access=access)
    assert backend.resolve_model(RunSettings(custom_model=" target ")) == (str(models / "target"), None, "target")
    assert backend.resolve_model(RunSettings(custom_model="org/model + target")) == (
        "org/model", str(models / "target"), "org/model + target")
    line = access.refusal()
    assert line == ("The custom model field names no model this server offers: pick a preset; a Hub id among "
                    "org/model; or the name of a folder in its models directory.")
    for probe in (*PROBES, "org/other", "target/../../outside", "../outside", str(models / "target"), "~/target",
                  "nonexistent", "target + /etc"):
        with pytest.raises(UserError) as e:
            backend.resolve_model(RunSettings(custom_model=probe))
        assert str(e.value) == line
        _assert_hides_the_server(str(e.value), probe)
    done = _run(backend, "org/model")
    assert done["status"].startswith("**Done.**") and backend.engine.loads == 1
    anyone = Backend(FakeEngine(step_s=0.0), access=ModelAccess("a --share link", allow_custom=True))
    assert anyone.resolve_model(RunSettings(custom_model="any/vlm"))[:2] == ("any/vlm", None)
    with pytest.raises(UserError, match="names no model this server offers: pick a preset; or a Hub id"):
        anyone.resolve_model(RunSettings(custom_model="/etc"))   # any Hub id is not any folder


class SizedEngine(FakeEngine):
    """The fake, with sizes told by config (params per model) and a record of what was fetched or loaded."""

    def __init__(self, params: dict[str, float | None]):
        super().__init__(step_s=0.0)
        self.params, self.sized = params, []

    def model_size(self, model):
        from specvlm.models.fit import ModelSize
        self.sized.append(model)
        p = self.params.get(model)
        return None if p is None else ModelSize(p, 4, 2, 64)


def test_a_custom_model_too_large_is_refused_before_it_loads(monkeypatch):
    monkeypatch.setattr("app.inputs.access.device_memory", lambda device: 16e9)   # a 16 GB machine
    big = SizedEngine({"org/huge": 70e9, "org/small": 1e9, "org/draft": 0.5e9})
    access = ModelAccess("--host 0.0.0.0", allow_custom=True)
    err = _run(Backend(big, device="cpu", access=access), "org/huge")["error"]
    assert err == ("The custom model 'org/huge' needs ~310 GB (280 GB of weights in float32 and a loading margin) "
                   "but this server's CPU memory is 16 GB: pick a smaller model or a preset.")
    assert big.loads == 0 and big.sized == ["org/huge"]
    limited = ModelAccess("--host 0.0.0.0", allow_custom=True, max_model_gb=4)
    ok = _run(Backend(big, device="cpu", dtype="bfloat16", access=limited), "org/small + org/draft")
    assert ok["status"].startswith("**Done.**") and big.loads == 1   # 3 GB of weights in bfloat16
    err = _run(Backend(big, device="cpu", access=limited), "org/small + org/draft")["error"]
    assert err == ("The custom model 'org/small + org/draft' has ~6 GB of weights in float32, over this server's "
                   "limit of 4 GB: pick a smaller model or a preset.") and big.loads == 1
    unknown = SizedEngine({})
    err = _run(Backend(unknown, access=access), "org/mystery")["error"]
    assert err == ("The custom model 'org/mystery' cannot be sized from its config, so this server does not load "
                   "it: pick a preset or another model.") and unknown.loads == 0
    assert _run(Backend(unknown), "org/mystery")["status"].startswith("**Done.**")   # loopback: the loader decides


def test_a_hub_model_is_sized_from_its_config_alone(monkeypatch, tmp_path):
    """The real engine: an uncached Hub id fetches config.json, nothing else, before it is sized."""
    import huggingface_hub
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    fetched, real_download = [], huggingface_hub.hf_hub_download

    def fake_download(repo_id, filename, **kw):   # the network: the bundled target's files under any id
        if not kw.get("local_files_only"):
            fetched.append((repo_id, filename))
            _cache_model(tmp_path / "hub", repo_id, only=(filename,))
        return real_download(repo_id, filename, **{**kw, "local_files_only": True})

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)

    class Online(SpecvlmFacade):
        def hub_reachable(self):
            return True

    size = Online().model_size(HUB_ID)
    assert fetched == [(HUB_ID, "config.json")]
    assert size is not None and size.params == SpecvlmFacade().model_size(str(BUNDLED)).params > 1e6
    assert SpecvlmFacade().model_size("nobody/nothing") is None   # offline and uncached: unknown
    assert fetched == [(HUB_ID, "config.json")]   # nothing fetched offline


def test_public_load_and_decode_failures_name_no_exception(tmp_path):
    models = tmp_path / "models"
    (models / "broken").mkdir(parents=True)
    access = ModelAccess("--host 0.0.0.0", models_dir=str(models))
    err = _run(Backend(FakeEngine(step_s=0.0, fail_load=True), access=access), "broken")["error"]
    assert err == "Could not load the model (the server log has the details): pick a preset or another model."

    class Crashing(FakeEngine):
        def stream(self, *a, **k):
            raise RuntimeError(f"CUDA error at {tmp_path}/kernel.cu:12")
            yield

    for public in (True, False):
        err = _run(Backend(Crashing(), access=access if public else ModelAccess()), "")["error"]
        assert (str(tmp_path) in err) is not public and ("RuntimeError" in err) is not public, err


def test_loopback_keeps_any_model_and_names_an_overlong_field():
    backend = Backend(FakeEngine(step_s=0.0))
    assert backend.resolve_model(RunSettings(custom_model="/etc")) == ("/etc", None, "/etc")   # the loader decides
    assert backend.resolve_model(RunSettings(custom_model="../..")) == ("../..", None, "../..")
    err = _run(backend, "x" * 5000)["error"]
    assert err == (f"The custom model field is too long (5,000 characters): give a Hub id or a local folder of at "
                   f"most {MAX_FIELD_CHARS} characters, no name in it over 255.")
    assert _run(backend, "a\x00b")["error"] == ("The custom model field holds control characters: give a Hub id "
                                                "or a local folder.")
    with pytest.raises(UserError, match="must be text"):
        resolve_custom(["a/b"], ModelAccess(), FakeEngine())


# ---- app.py started as a public deployment -------------------------------------------------------

def _cache_model(hub: Path, repo_id: str, only: tuple[str, ...] | None = None) -> None:
    """Put a copy of the bundled target into a Hub cache under ``repo_id`` (as a download would)."""
    snap = hub / f"models--{repo_id.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True, exist_ok=True)
    for f in BUNDLED.iterdir():
        if f.is_file() and (only is None or f.name in only):
            shutil.copy(f, snap / f.name)
    (snap.parents[1] / "refs").mkdir(exist_ok=True)
    (snap.parents[1] / "refs" / "main").write_text("0" * 40)


@pytest.fixture
def start(tmp_path, monkeypatch):
    """``start(*argv, env=...)``: ``app.py``'s :func:`serve` on a free port; yields a client factory."""
    import gradio.networking
    import huggingface_hub
    from gradio_client import Client

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(gradio.networking, "setup_tunnel", lambda **kw: "https://fake-tunnel.gradio.live")
    for var in ("SPACE_ID", "SYSTEM", "SPECVLM_ALLOW_CUSTOM_MODELS", "SPECVLM_ALLOWED_MODELS", "SPECVLM_MODELS_DIR"):
        monkeypatch.delenv(var, raising=False)
    mod, demos = _app_module(), []

    def launch(*argv: str, env: dict[str, str] | None = None):
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        port = free_port()
        demo = mod.serve(["--port", str(port), "--device", "cpu", "--dtype", "float32", *argv])
        demos.append(demo)
        return SimpleNamespace(demo=demo, client=Client(f"http://127.0.0.1:{port}/", verbose=False))

    yield launch
    for d in demos:
        d.close()


def _compare_json(client, custom: str) -> dict:
    from gradio_client import handle_file
    out = client.predict(handle_file(str(sample_video())), custom=custom, frames=4, max_new=8,
                         api_name="/compare_json")
    return json.loads(out) if isinstance(out, str) else out


def _custom_box(demo) -> dict:
    return next(c["props"] for c in demo.config["components"] if c["props"].get("elem_id") == "custom-model")


def test_a_space_on_all_interfaces_answers_every_probe_with_one_line(start):
    app = start("--host", "0.0.0.0", env={"SPACE_ID": "someone/specvlm-studio", "SYSTEM": "spaces"})
    answers = {p: _compare_json(app.client, p) for p in (*PROBES, str(BUNDLED), "HuggingFaceTB/SmolVLM2-256M")}
    assert {a["status"] for a in answers.values()} == {"error"}
    assert {a["error"] for a in answers.values()} == {OFFERS_NOTHING}
    for probe, a in answers.items():
        _assert_hides_the_server(json.dumps(a), probe)
    from gradio_client import handle_file
    page = app.client.predict(handle_file(str(sample_video())), custom="/etc", frames=4, max_new=8,
                              api_name="/compare")   # the page's own endpoint
    assert page[0] == f"**Error:** {OFFERS_NOTHING}"
    box = _custom_box(app.demo)
    assert box["interactive"] is False and box["placeholder"] == "this server offers its presets only"
    assert _compare_json(app.client, "")["status"] == "done"   # the presets run


def test_an_allowlisted_id_and_a_folder_of_the_models_dir_load(start, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "target").symlink_to(BUNDLED)
    _cache_model(tmp_path / "hub", HUB_ID)
    app = start("--host", "0.0.0.0", "--models-dir", str(models), "--allowed-models", HUB_ID)
    refusal = ModelAccess("x", allowed_models=(HUB_ID,), models_dir=str(models)).refusal()
    for custom in ("target", HUB_ID):
        out = _compare_json(app.client, custom)
        assert out["status"] == "done" and out["identical"] is True, out
        assert out["vanilla"]["token_ids"] == out["speculative"]["token_ids"] and out["vanilla"]["tokens"] > 0
        assert str(tmp_path) not in json.dumps(out)   # the models directory's place stays on the server
    for probe in (*PROBES, "target/../../..", "someone/else"):
        out = _compare_json(app.client, probe)
        assert out["status"] == "error" and out["error"] == refusal, out
        _assert_hides_the_server(json.dumps(out), probe)
    assert _custom_box(app.demo)["interactive"] is True


def test_a_share_link_is_public_too(start):
    app = start("--share")
    assert app.demo.share_url == "https://fake-tunnel.gradio.live"
    assert _compare_json(app.client, "/etc")["error"] == OFFERS_NOTHING
    wider = start("--share", "--allow-custom-models", "--max-model-gb", "0.001")
    out = _compare_json(wider.client, "/etc")
    assert out["error"] == "The custom model field names no model this server offers: pick a preset; or a Hub id."


def test_the_loopback_default_is_unchanged(start):
    app = start()
    out = _compare_json(app.client, str(BUNDLED))   # any local folder, as before
    assert out["status"] == "done" and out["identical"] is True, out
    out = _compare_json(app.client, "/etc")
    assert out["status"] == "error" and out["error"].startswith("Could not load model '/etc': "), out
    out = _compare_json(app.client, "x" * 5000)
    assert out["error"].startswith("The custom model field is too long (5,000 characters)")
    assert "xxxx" not in out["error"]
    box = _custom_box(app.demo)
    assert box["interactive"] is not False and box["placeholder"] == "overrides the preset when filled"
