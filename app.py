"""Start SpecVLM Studio: ``python app.py [--host HOST] [--port PORT] [--share] [limits]``.

Also the ``app_file`` of the Hugging Face Space. The default preset's models load here, at start,
so a Run's GPU window is spent decoding: on ZeroGPU to ``cuda`` in this process, under the ``spaces``
CUDA emulation (:mod:`app.runs.zerogpu`; ``spaces`` moves them to the GPU it lends each Run), the same
path as on a dedicated GPU. Every limit has an environment variable (used when the flag is absent;
``app.inputs.settings.Limits`` holds the defaults), e.g. on a Space:
``SPECVLM_MAX_UPLOAD_MB=100 SPECVLM_MAX_DURATION_S=300``. A public server (a Space, ``--share``, a host
beyond loopback) offers its presets only unless the operator widens that (:mod:`app.inputs.access`).
"""
from __future__ import annotations

try:  # ZeroGPU: ``spaces`` must be imported before anything initialises CUDA
    import spaces  # noqa: F401
except ImportError:
    pass

import argparse
import logging
import os

LIMIT_HELP = {
    "max_upload_mb": "largest video upload in MB",
    "max_duration_s": "longest video in seconds",
    "max_prompt_chars": "longest prompt in characters",
    "max_frames": "most frames sampled per video",
    "max_new_tokens": "largest generation budget per run",
    "video_timeout_s": "time limit to probe and decode one video",
}
"""``app.inputs.settings.Limits`` field -> flag help (the default and env variable are added from ``Limits``)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (see ``python app.py --help``)."""
    p = argparse.ArgumentParser(description="SpecVLM Studio: vanilla vs speculative decoding of video LLMs, "
                                            "side by side, in the browser.")
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                   help="interface to listen on (default: GRADIO_SERVER_NAME, else 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
                   help="port (default: GRADIO_SERVER_PORT, else 7860; `make run PORT=7870`)")
    p.add_argument("--share", action="store_true", help="create a public gradio.live link")
    p.add_argument("--device", default=None, help="model device, e.g. cpu or cuda:0 (default: CUDA if available)")
    p.add_argument("--devices", default=None,
                   help="devices that each hold a pair and serve one Run at a time, e.g. cuda:0,cuda:1 (Runs beyond "
                        "that wait in line); default: every visible GPU that holds the default preset by itself, "
                        "else one device")
    from specvlm.dtypes import DTYPES
    p.add_argument("--dtype", default=None, choices=DTYPES,
                   help="model dtype (default: float32 on CPU, bfloat16 on CUDA)")
    from app.inputs.settings import Limits
    g = p.add_argument_group("limits (per request)")
    defaults = Limits.from_env()
    for name, text in LIMIT_HELP.items():
        value = getattr(defaults, name)
        g.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value,
                       help=f"{text} (env {Limits.ENV[name]}, default {getattr(Limits, name):g})")
    g.add_argument("--max-queue", type=int, default=int(os.environ.get("SPECVLM_MAX_QUEUE") or 64),
                   help="requests waiting at most; later ones are told the queue is full "
                        "(env SPECVLM_MAX_QUEUE, default 64)")
    g.add_argument("--cache-ttl-s", type=int, default=int(os.environ.get("SPECVLM_CACHE_TTL_S") or 3600),
                   help="delete Gradio's cached files (gallery images) older than this "
                        "(env SPECVLM_CACHE_TTL_S, default 3600; 0 = keep)")
    from app.inputs.access import AccessError, access_from_args, add_arguments
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        args.access = access_from_args(args, os.environ)
    except AccessError as e:
        p.error(str(e))
    if not 0 <= args.port <= 65535:
        p.error(f"--port {args.port} is out of range: use 0-65535 (0 = any free port)")
    if args.device is not None and args.devices is not None:
        p.error("--device and --devices both name devices: give one of them.")
    if args.devices is not None:
        import torch

        from app.runs.devices import DeviceError, parse_devices
        try:
            args.devices = parse_devices(args.devices, torch.cuda.device_count() if torch.cuda.is_available() else 0)
        except DeviceError as e:
            p.error(str(e))
    if args.device is not None:
        from specvlm.models.errors import ModelLoadError
        from specvlm.models.loading import check_device
        try:
            check_device(args.device)
        except ModelLoadError as e:
            p.error(f"--device: {e}")
    for name in (*LIMIT_HELP, "max_queue"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    return args


def limits_from_args(args: argparse.Namespace):
    """The :class:`app.inputs.settings.Limits` the flags describe."""
    from app.inputs.settings import Limits
    return Limits(**{name: getattr(args, name) for name in LIMIT_HELP})


def serving_devices(args: argparse.Namespace) -> list[str | None]:
    """``--devices``; else ``[--device]``; else every visible GPU that holds the default preset by itself
    (one device on a CPU, on ZeroGPU, and when no single GPU holds it)."""
    if args.devices:
        return list(args.devices)
    if args.device is not None or os.environ.get("SPACES_ZERO_GPU"):
        return [args.device]
    from app.runs.devices import default_devices
    from specvlm.models.fit import detect_gpus

    gpus = detect_gpus()
    if not gpus:
        return [None]
    from specvlm.models.presets import default_preset

    return default_devices(default_preset(), gpus)


def serve(argv: list[str] | None = None):
    """Build the page over a real backend and start serving it (returns the launched ``gradio.Blocks``)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # Gradio's own requests to itself are not news
    from app.inputs.settings import MB
    from app.page.ui import build_demo
    from app.runs.backend import Backend

    from specvlm.runtime.threads import ThreadsError, configure

    try:
        # torch's threads (SPECVLM_THREADS overrides); one CPU stays with the web server and page updates
        machine = configure(reserve=1).describe()
    except ThreadsError as e:
        raise SystemExit(f"app.py: error: {e}") from None
    limits = limits_from_args(args)
    backend = Backend(device=args.device, dtype=args.dtype, limits=limits, devices=serving_devices(args),
                      access=args.access)
    note = backend.preload()  # the default pair loads now, not inside the first Run's GPU window
    if note:
        logging.getLogger("app").warning(note)
    n = len(backend.pool)
    devices = (f"{n} Runs at once, one per device: " + ", ".join(backend.pool.label(s) for s in backend.pool.slots)
               if n > 1 else "")
    demo = build_demo(backend, cache_ttl_s=args.cache_ttl_s or None,
                      footer=" · ".join(x for x in (machine, devices, note) if x))
    try:  # quiet: the page's address is logged below, without Gradio's advice on share links
        demo.queue(default_concurrency_limit=1, max_size=args.max_queue).launch(
            server_name=args.host, server_port=args.port, share=args.share, quiet=True, prevent_thread_lock=True,
            max_file_size=int(limits.max_upload_mb * MB))
    except OSError as e:  # the port is taken, or the host cannot be bound
        raise SystemExit(f"app.py: error: cannot listen on {args.host}:{args.port} ({e.strerror or 'in use'}); "
                         "pick another --port (or GRADIO_SERVER_PORT), or stop what uses it.") from None
    logging.getLogger("app").info("SpecVLM Studio is running at %s; %s", demo.local_url, args.access.describe())
    return demo


def main(argv: list[str] | None = None) -> None:
    """Serve the page (:func:`serve`) until interrupted."""
    serve(argv).block_thread()


if __name__ == "__main__":
    main()
