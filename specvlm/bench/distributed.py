"""The benchmark over several processes: one rank per device (``torchrun``), one merged report.

Every rank loads its own pair on its own device, names every input of the run (the same seeded
dataset subset and generated clips as a single process), and measures a deterministic shard of
them: input ``i`` of the ``N`` not yet finished goes to rank ``i mod world_size``. Each input runs
the single-process protocol (:func:`specvlm.bench.protocol.bench_input`: warm-up, interleaved
methods, repeats). A rank appends one JSON line per finished input to its own file
(``<records dir>/rank-<R>.jsonl``) as it goes, so nothing measured is lost when a rank or the job
ends early; ``resume=True`` keeps the finished inputs of every ``rank-*.jsonl`` it finds and
measures only the rest. An input that cannot be read or prepared is recorded as failed and the
rank goes on (a rerun with ``resume`` tries it again).

When every rank is done, rank 0 gathers the records over ``torch.distributed`` (``gloo``:
records are small Python objects, and gloo reaches every rank of every node over TCP, CPU or
GPU), orders them as a single process would, times the isolated step costs on its own target
and returns a report of the same form as :func:`specvlm.bench.protocol.run_bench`'s, with one
``meta["ranks"]`` entry per rank (device, machine calibration, threads, inputs measured).

A rank that dies (killed, out of memory) is named by ``torchrun``'s failure summary, which
also ends the other ranks; their finished inputs stay in their files.

Source: PyTorch ``torch.distributed`` (``init_process_group`` from the ``torchrun`` environment,
``all_gather_object`` / ``gather_object``) and ``torchrun`` (elastic launch) documentation.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from specvlm.bench.inputs import PlannedInput
from specvlm.bench.load import BackgroundLoad
from specvlm.bench.machine import machine_info
from specvlm.bench.protocol import assemble_report, bench_input, failed_input, input_meta, threads_meta
from specvlm.bench.settings import BenchError, BenchSettings

log = logging.getLogger(__name__)

COLLECT_TIMEOUT = timedelta(hours=24)
"""How long a rank that finished its shard waits for the slowest rank at the final gather."""
BACKEND = "gloo"
"""The collectives' backend (records travel as pickled Python objects, never as GPU tensors)."""


@dataclass(frozen=True)
class RankInfo:
    """Where this process stands in the job (``torchrun`` sets the environment variables).

    Attributes:
        rank: global rank ``RANK``, 0..world_size - 1.
        world_size: ranks in the job ``WORLD_SIZE`` (all nodes).
        local_rank: rank on this node ``LOCAL_RANK`` (picks the device).
        local_world_size: ranks on this node ``LOCAL_WORLD_SIZE`` (share the CPUs).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "RankInfo | None":
        """The ``torchrun`` environment's ranks, or None outside ``torchrun`` (no ``WORLD_SIZE``).

        Raises:
            BenchError: the variables are not integers or contradict each other.
        """
        env = os.environ if environ is None else environ
        if "WORLD_SIZE" not in env:
            return None
        try:
            world = int(env["WORLD_SIZE"])
            info = cls(int(env.get("RANK", 0)), world, int(env.get("LOCAL_RANK", 0)),
                       int(env.get("LOCAL_WORLD_SIZE", world)))
        except ValueError as exc:
            raise BenchError(f"the torchrun environment is malformed ({exc}); launch with torchrun "
                             "--nproc-per-node N -m specvlm bench ...") from exc
        if not (0 <= info.rank < world and 0 <= info.local_rank < info.local_world_size <= world):
            raise BenchError(f"RANK={info.rank}, LOCAL_RANK={info.local_rank}, WORLD_SIZE={world}, LOCAL_WORLD_SIZE="
                             f"{info.local_world_size} contradict each other; launch with torchrun.")
        return info

    @property
    def distributed(self) -> bool:
        """True when there are other ranks to talk to."""
        return self.world_size > 1


def local_ranks(environ: Mapping[str, str] | None = None) -> int:
    """Ranks on this node that share its CPUs (``LOCAL_WORLD_SIZE``; 1 outside ``torchrun``)."""
    env = os.environ if environ is None else environ
    try:
        return max(1, int(env.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def rank_device(info: RankInfo, device: str | None, gpus_per_rank: int = 1,
                environ: dict | None = None) -> str:
    """The device this rank loads its pair on.

    With one GPU per rank: ``cuda:<local_rank>``. With a group of ``gpus_per_rank`` GPUs (a pair
    too large for one): ``CUDA_VISIBLE_DEVICES`` is narrowed to GPUs ``local_rank * k .. + k - 1``
    (of the ones visible to the job) and the pair loads on ``cuda``, which the loader shards over
    the group. Without CUDA (or with ``device="cpu"``): ``cpu``.

    Args:
        info: this rank.
        device: the ``--device`` given (``cpu``, ``cuda``; None = CUDA when available).
        gpus_per_rank: GPUs per pair (>= 1).
        environ: environment to narrow (``os.environ`` when None); must be set before CUDA starts.

    Raises:
        BenchError: ``gpus_per_rank`` < 1, an explicit ``cuda:N`` device, more ranks than GPUs, or a group
            beyond the visible GPUs.
    """
    import torch

    env = os.environ if environ is None else environ
    if gpus_per_rank < 1:
        raise BenchError(f"--gpus-per-rank {gpus_per_rank}: give 1 or more GPUs per rank.")
    if device and device.startswith("cuda:"):
        raise BenchError(f"--device {device}: each rank picks its own GPU from LOCAL_RANK; give --device cuda "
                         "(or leave it out), and narrow the GPUs with CUDA_VISIBLE_DEVICES.")
    if device == "cpu":
        return "cpu"
    if gpus_per_rank == 1:
        if not torch.cuda.is_available():
            return "cpu"
        if info.local_rank >= torch.cuda.device_count():
            raise BenchError(f"rank {info.rank} (LOCAL_RANK {info.local_rank}): this node has "
                             f"{torch.cuda.device_count()} visible GPU(s); give --nproc-per-node at most that, "
                             "or --device cpu.")
        return f"cuda:{info.local_rank}"
    visible = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    first = info.local_rank * gpus_per_rank
    if visible and first + gpus_per_rank > len(visible):
        raise BenchError(f"--gpus-per-rank {gpus_per_rank} x {info.local_world_size} ranks on this node needs "
                         f"{gpus_per_rank * info.local_world_size} GPUs; {len(visible)} are visible: lower "
                         "--nproc-per-node or --gpus-per-rank.")
    group = visible[first:first + gpus_per_rank] if visible else [str(first + i) for i in range(gpus_per_rank)]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(group)
    from specvlm.models.loading import default_device
    return default_device()


def shard(items: Sequence[Any], rank: int, world_size: int) -> list[Any]:
    """Rank ``rank``'s share of ``items``: every ``world_size``-th item from position ``rank``.

    Round robin keeps the shares within one item of each other and mixes long and short inputs of
    an ordered list; the order is the input order, so the shard depends only on the list.
    """
    return list(items[rank::world_size])


def fingerprint(pair: Any, settings: BenchSettings) -> str:
    """A short hash of what makes two records comparable (pair, methods, decoding settings, rounds)."""
    data = {"pair": pair.name, "methods": list(settings.methods), "config": asdict(settings.config),
            "repeats": settings.repeats, "warmup": settings.warmup, "lookup": settings.prompt_lookup_tokens}
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


class RankRecords:
    """One rank's record file: one JSON line per finished input, appended as the run goes.

    Args:
        folder: the records folder (made if missing).
        rank: this rank (the file is ``rank-<rank>.jsonl``).
        key: :func:`fingerprint` of the run; lines of other runs are ignored when reading.
    """

    def __init__(self, folder: str | os.PathLike, rank: int, key: str):
        self.folder, self.key = Path(folder), key
        self.path = self.folder / f"rank-{rank}.jsonl"

    def clear(self, local_rank: int) -> None:
        """Start afresh: the node's first rank removes every ``rank-*.jsonl`` here (call a barrier after)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        if local_rank == 0:
            for p in self.folder.glob("rank-*.jsonl"):
                p.unlink(missing_ok=True)

    def append(self, entry: dict) -> None:
        """Write one finished input's entry and flush it to disk."""
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({**entry, "key": self.key}, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def finished(self) -> dict[str, dict]:
        """Finished inputs of this run in every ``rank-*.jsonl`` of the folder, by name.

        Entries of an input that could not be read or prepared are left out (a resumed run tries it
        again), as are lines of runs with other settings and a line cut short by a crash.
        """
        done: dict[str, dict] = {}
        for p in sorted(self.folder.glob("rank-*.jsonl")):
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("%s line %d is cut short (a rank ended while writing it); skipped", p, n)
                    continue
                if entry.get("key") == self.key and not entry["input"].get("error"):
                    done[entry["name"]] = entry
                elif entry.get("key") != self.key:
                    log.warning("%s line %d was measured with other settings; skipped", p, n)
        return done


def measure_input(pair: Any, index: int, plan: PlannedInput, settings: BenchSettings,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Read and measure one input; a failure to read or prepare it becomes a failed entry.

    Returns:
        {index, name, input (the report's ``inputs`` entry), rows (per-method summaries)}.
    """
    try:
        inp = plan.make()
        for note in inp.clip.notes:
            if progress:
                progress(f"note: {inp.name}: {note}")
        rows = bench_input(pair, inp, settings, progress)
        meta = input_meta(inp, rows)
    except Exception as exc:  # noqa: BLE001 - recorded in the report, the rank goes on
        if isinstance(exc, ValueError):   # a typed input error (unreadable video, bad clip): its message says it
            log.warning("input %s failed: %s", plan.name, exc)
        else:
            log.exception("input %s failed", plan.name)
        error = f"{exc.__class__.__name__}: {str(exc)[:300]}"
        if progress:
            progress(f"[{plan.name}] failed: {error}")
        meta, rows = failed_input(plan.name, error, pair, settings)
    return {"index": index, "name": plan.name, "input": meta, "rows": rows}


def _all_gather(obj: Any, info: RankInfo) -> list[Any]:
    import torch.distributed as dist

    if not info.distributed:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def _gather(obj: Any, info: RankInfo) -> list[Any] | None:
    import torch.distributed as dist

    if not info.distributed:
        return [obj]
    done = dist.barrier(async_op=True)   # wait for the slowest rank in Python, where signals are handled:
    while not done.is_completed():       # a launcher's SIGTERM (another rank died) ends this rank at once
        time.sleep(0.2)
    done.wait()
    out: list[Any] | None = [None] * info.world_size if info.rank == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out


class process_group:
    """Context manager: the job's ``gloo`` process group from the ``torchrun`` environment (nothing
    for a single rank), destroyed at the end.

    Args:
        info: this rank.
        timeout: how long a collective waits for the slowest rank (:data:`COLLECT_TIMEOUT`).
    """

    def __init__(self, info: RankInfo, timeout: timedelta = COLLECT_TIMEOUT):
        self.info, self.timeout = info, timeout

    def __enter__(self) -> RankInfo:
        import torch.distributed as dist

        if self.info.distributed and not dist.is_initialized():
            dist.init_process_group(BACKEND, rank=self.info.rank, world_size=self.info.world_size,
                                    timeout=self.timeout)
        return self.info

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        if self.info.distributed and dist.is_initialized():
            dist.destroy_process_group()


def run_distributed(pair: Any, plans: Sequence[PlannedInput], settings: BenchSettings, info: RankInfo,
                    records: str | os.PathLike, *, resume: bool = False,
                    progress: Callable[[str], None] | None = None, threads: Any = None) -> dict | None:
    """Measure this rank's shard of ``plans``, then merge every rank's records into one report on rank 0.

    Call it on every rank, inside :class:`process_group`, with the same ``plans`` and ``settings``.

    Args:
        pair: this rank's ModelPair (on its own device).
        plans: every input of the run, in report order (:mod:`specvlm.bench.inputs` ``plan_*``).
        settings: the benchmark settings.
        info: this rank.
        records: the records folder, shared by the ranks of a node (``rank-<R>.jsonl`` per rank).
        resume: keep the finished inputs found in the folder and measure only the others; False
            empties the folder first.
        progress: called with one line per measured run.
        threads: this process's :class:`specvlm.runtime.threads.ThreadChoice` (``meta.ranks[i].threads``).

    Returns:
        On rank 0 the report (see :func:`specvlm.bench.protocol.run_bench`) with ``meta.ranks``:
        per rank {rank, local_rank, device, machine, threads, threads_used, background_load,
        inputs (names measured by this rank in this run)} and ``meta.resumed`` (names kept from
        the records); None on the other ranks.

    Raises:
        BenchError: no inputs, or two inputs with one name (records are keyed by name).
    """
    import torch.distributed as dist

    settings.validate()
    names = [p.name for p in plans]
    if not plans:
        raise BenchError("no inputs: give --video, --synthetic-tokens, --sweep or --dataset.")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise BenchError(f"inputs {', '.join(dup)} share a name; a distributed run keys its records by name: "
                         "give each video once (rename copies).")
    store = RankRecords(records, info.rank, fingerprint(pair, settings))
    if not resume:
        store.clear(info.local_rank)
        if info.distributed:
            dist.barrier()
    kept: dict[str, dict] = {}
    if resume:
        for part in _all_gather(store.finished(), info):   # each node may see only its own files
            kept.update(part)
        kept = {n: e for n, e in kept.items() if n in names}
        log.info("resume: %d of %d inputs already measured", len(kept), len(plans))
    todo = [(i, p) for i, p in enumerate(plans) if p.name not in kept]
    mine = shard(todo, info.rank, info.world_size)
    machine = machine_info(pair.device)
    entries = []
    with BackgroundLoad(settings.background_load) as load:
        for i, plan in mine:
            entry = measure_input(pair, i, plan, settings, progress)
            store.append(entry)
            entries.append(entry)
    used = Counter(n for e in entries for r in e["rows"] for n in (r.get("threads_per_round") or []) if n)
    rank_meta = {"rank": info.rank, "local_rank": info.local_rank, "device": str(pair.device), "machine": machine,
                 "threads": threads_meta(threads), "threads_used": {str(k): v for k, v in sorted(used.items())},
                 "background_load": load.summary.as_dict() if load.summary else None,
                 "inputs": [e["name"] for e in entries]}
    parts = _gather((rank_meta, entries), info)
    if parts is None:
        return None
    merged = dict(kept)
    for _, part in parts:
        merged.update({e["name"]: e for e in part})
    ordered = [merged[n] for n in names]
    report = assemble_report(pair, settings, [e["input"] for e in ordered],
                             [r for e in ordered for r in e["rows"]], machine, threads, load.summary)
    report["meta"].update(ranks=[m for m, _ in parts], world_size=info.world_size,
                          resumed=[n for n in names if n in kept])
    return report
