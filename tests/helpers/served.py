"""``app.py`` serving: its ``serve`` loaded from the file, and the page's Run through a running server with
``gradio_client``, its streamed outputs folded as the browser folds them."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from helpers.fakes import ROOT, free_port


def app_main() -> ModuleType:
    """``app.py`` loaded as a module (``app_main``): its ``parse_args``, ``serve`` and ``main``."""
    spec = importlib.util.spec_from_file_location("app_main", ROOT / "app.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def app_process(folder: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, int, Path]]:
    """``python app.py --port P`` in its own process, as a user starts it (run in ``folder``; ``env`` added to
    this process's); yields (page address, port, server log path) once the server says it runs; ends it after.
    """
    port = free_port()
    log_path = Path(folder) / "server.log"
    full = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", str(port)], cwd=folder, env=full,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while "is running at" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/", port, log_path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def through_server(port: int, video: str, max_new: int = 24) -> dict:
    """``/compare`` through the server with ``gradio_client``, folded as the browser folds its updates (an update
    without a value leaves a component as it was), then ``/compare_json`` with the same inputs: the final panels'
    text, the vanilla panel's text after each update, and the JSON's status and texts."""
    from gradio_client import Client, handle_file

    from app.views.downloads import panel_text

    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    labels = [r["label"] for r in client.view_api(return_format="dict", print_info=False)
              ["named_endpoints"]["/compare"]["returns"]]
    inputs = dict(video=handle_file(video), max_new_tokens=max_new, frames=8)
    shown: dict[str, object] = {}
    texts = []
    for values in client.submit(**inputs, api_name="/compare"):
        for label, v in zip(labels, values):
            if isinstance(v, dict) and v.get("__type__") == "update":
                if "value" in v:
                    shown[label] = v["value"]
            else:
                shown[label] = v
        texts.append(panel_text(shown.get("Vanilla text")))
    ref = client.predict(**inputs, api_name="/compare_json")
    return dict(served_status=str(shown.get("Status", "")), served_vanilla=panel_text(shown.get("Vanilla text")),
                served_spec=panel_text(shown.get("SpecVLM text")), served_streamed=texts,
                json_status=ref["status"], json_vanilla=ref["vanilla"]["text"], json_spec=ref["speculative"]["text"])
