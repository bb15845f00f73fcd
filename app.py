"""Start SpecVLM Studio: ``python app.py [--host HOST] [--port PORT] [--share]``.

Also the ``app_file`` of the Hugging Face Space. Models load on the first Run, not here.
"""
from __future__ import annotations

import argparse
import logging
import os


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see ``python app.py --help``)."""
    p = argparse.ArgumentParser(description="SpecVLM Studio: vanilla vs speculative decoding of video LLMs, "
                                            "side by side, in the browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="interface to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                   help="port (default 7860)")
    p.add_argument("--share", action="store_true", help="create a public gradio.live link")
    p.add_argument("--device", default=None, help="model device, e.g. cpu or cuda:0 (default: CUDA if available)")
    p.add_argument("--dtype", default=None, help="model dtype, e.g. float32 or bfloat16 (default: engine's choice)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Build the page over a real backend and serve it until interrupted."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from app.backend import Backend
    from app.ui import build_demo

    demo = build_demo(Backend(device=args.device, dtype=args.dtype))
    demo.queue(default_concurrency_limit=1).launch(server_name=args.host, server_port=args.port,
                                                  share=args.share)


if __name__ == "__main__":
    main()
