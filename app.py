"""Start SpecVLM Studio: ``python app.py [--host HOST] [--port PORT] [--share] [limits]``.

Also the ``app_file`` of the Hugging Face Space. Models load on the first Run, not here.
Every limit has an environment variable (used when the flag is absent), e.g. on a Space:
``SPECVLM_MAX_UPLOAD_MB=100 SPECVLM_MAX_DURATION_S=300``.
"""
from __future__ import annotations

import argparse
import logging
import os


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


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
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="model dtype (default: float32 on CPU, bfloat16 on CUDA)")
    g = p.add_argument_group("limits (per request)")
    g.add_argument("--max-upload-mb", type=float, default=float(_env("SPECVLM_MAX_UPLOAD_MB", "200")),
                   help="largest video upload in MB (env SPECVLM_MAX_UPLOAD_MB, default 200)")
    g.add_argument("--max-duration-s", type=float, default=float(_env("SPECVLM_MAX_DURATION_S", "600")),
                   help="longest video in seconds (env SPECVLM_MAX_DURATION_S, default 600)")
    g.add_argument("--max-prompt-chars", type=int, default=int(_env("SPECVLM_MAX_PROMPT_CHARS", "2000")),
                   help="longest prompt in characters (env SPECVLM_MAX_PROMPT_CHARS, default 2000)")
    g.add_argument("--max-frames", type=int, default=int(_env("SPECVLM_MAX_FRAMES", "256")),
                   help="most frames sampled per video (env SPECVLM_MAX_FRAMES, default 256)")
    g.add_argument("--max-new-tokens", type=int, default=int(_env("SPECVLM_MAX_NEW_TOKENS", "1024")),
                   help="largest generation budget per run (env SPECVLM_MAX_NEW_TOKENS, default 1024)")
    g.add_argument("--video-timeout-s", type=float, default=float(_env("SPECVLM_VIDEO_TIMEOUT_S", "60")),
                   help="time limit to probe and decode one video (env SPECVLM_VIDEO_TIMEOUT_S, default 60)")
    g.add_argument("--max-queue", type=int, default=int(_env("SPECVLM_MAX_QUEUE", "64")),
                   help="requests waiting at most; later ones are told the queue is full "
                        "(env SPECVLM_MAX_QUEUE, default 64)")
    g.add_argument("--cache-ttl-s", type=int, default=int(_env("SPECVLM_CACHE_TTL_S", "3600")),
                   help="delete Gradio's cached files (gallery images) older than this "
                        "(env SPECVLM_CACHE_TTL_S, default 3600; 0 = keep)")
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port} is out of range: use 0-65535 (0 = any free port)")
    if args.device is not None:
        from specvlm.models import ModelLoadError, check_device
        try:
            check_device(args.device)
        except ModelLoadError as e:
            p.error(f"--device: {e}")
    for name in ("max_upload_mb", "max_duration_s", "max_prompt_chars", "max_frames", "max_new_tokens",
                 "video_timeout_s", "max_queue"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    return args


def limits_from_args(args: argparse.Namespace):
    """The :class:`app.backend.Limits` the flags describe."""
    from app.backend import Limits
    return Limits(max_upload_mb=args.max_upload_mb, max_duration_s=args.max_duration_s,
                  max_prompt_chars=args.max_prompt_chars, max_frames=args.max_frames,
                  max_new_tokens=args.max_new_tokens, video_timeout_s=args.video_timeout_s)


def main(argv: list[str] | None = None) -> None:
    """Build the page over a real backend and serve it until interrupted."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from app.backend import MB, Backend
    from app.ui import build_demo

    limits = limits_from_args(args)
    demo = build_demo(Backend(device=args.device, dtype=args.dtype, limits=limits),
                      cache_ttl_s=args.cache_ttl_s or None)
    try:
        demo.queue(default_concurrency_limit=1, max_size=args.max_queue).launch(
            server_name=args.host, server_port=args.port, share=args.share,
            max_file_size=int(limits.max_upload_mb * MB))
    except OSError as e:  # the port is taken, or the host cannot be bound
        raise SystemExit(f"app.py: error: cannot listen on {args.host}:{args.port} ({e.strerror or 'in use'}); "
                         "pick another --port (or GRADIO_SERVER_PORT), or stop what uses it.") from None


if __name__ == "__main__":
    main()
