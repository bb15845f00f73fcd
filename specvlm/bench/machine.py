"""What the machine is and how fast it is right now, so reports from different machines compare.

Machines of one kind differ (the same clip can take 3.5x longer on a 2.0 GHz vCPU pair than on a
2.6 GHz one, with the same speedup ratios), so every report carries two quick calibration figures
measured just before the run: fp32 matmul throughput and memory copy bandwidth.
"""
from __future__ import annotations

import platform
import time
from pathlib import Path
from typing import Any, Callable

import torch

def _cpuinfo() -> tuple[str | None, float | None]:
    """(CPU model name, current MHz of the first core) from /proc/cpuinfo; (platform.processor(), None)
    where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None, None
    fields = dict(line.split(":", 1) for line in text.splitlines()[:40] if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    mhz = fields.get("cpu MHz")
    return fields.get("model name") or platform.processor() or None, float(mhz) if mhz else None


def machine_info(device: torch.device | str = "cpu", seconds: float = 0.2) -> dict:
    """What the machine is and how fast it is right now, so reports from different machines compare.

    Every report carries two quick calibration figures measured on the CPU just before the run: fp32 matmul throughput (a 512 x 512
    ``torch.mm``, best of repeated calls, 2 n^3 FLOP each) and memory copy bandwidth (a 64 MiB
    ``Tensor.copy_``, bytes read + written). About ``seconds`` each.

    Returns:
        dict: ``cpu_model`` (str or None), ``cpu_mhz`` (float or None), ``torch_threads`` (int),
        ``matmul_gflops`` (GFLOP/s), ``copy_gb_per_s`` (GB/s, 1e9 bytes); ``gpu`` (name or None).
    """
    model, mhz = _cpuinfo()
    dev = torch.device(device)

    def best(fn: Callable[[], Any]) -> float:
        fn()
        t_end, fastest = time.perf_counter() + seconds, float("inf")
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            fastest = min(fastest, time.perf_counter() - t0)
        return fastest

    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    src, dst = torch.empty(16 * 2**20), torch.empty(16 * 2**20)
    return {
        "cpu_model": model, "cpu_mhz": mhz, "torch_threads": torch.get_num_threads(),
        "matmul_gflops": round(2 * n**3 / best(lambda: torch.mm(a, b)) / 1e9, 1),
        "copy_gb_per_s": round(2 * src.numel() * 4 / best(lambda: dst.copy_(src)) / 1e9, 1),
        "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None,
    }
