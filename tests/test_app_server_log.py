"""The server's own log, as ``python app.py`` writes it: the page's address, no Gradio advice on share links,
no request lines of Gradio's HTTP client, and no traceback for an ordinary bad upload (the page and the API
get one line; the log needs no more)."""
from __future__ import annotations

import json

from helpers.served import app_process


def test_server_log_is_quiet_about_ordinary_things(tmp_path):
    from gradio_client import Client, handle_file
    with app_process(tmp_path, {"SPECVLM_THREADS": "1"}) as (url, port, log_path):
        bad = tmp_path / "notes.mp4"
        bad.write_text("this is not a video\n" * 50)
        client = Client(url, verbose=False)
        out = client.predict(handle_file(str(bad)), api_name="/compare_json")
        out = json.loads(out) if isinstance(out, str) else out
        assert out["status"] == "error" and out["error"].startswith("Could not read the video: notes.mp4")
    text = log_path.read_text()
    assert f"SpecVLM Studio is running at http://127.0.0.1:{port}" in text
    assert "share=True" not in text and "public link" not in text
    assert "HTTP Request:" not in text          # httpx's request lines
    assert "Traceback" not in text, text[-3000:]
