"""Summary, checks and markdown report of the re-selection evaluation (:mod:`training.eval_reselect`).

Source: the statistics of :mod:`training.reselect_stats`; the report layout of training/eval_sparse.py.
"""
from __future__ import annotations

from training import reselect_stats as stats

PAIR_NAMES = {"self": "Self-SD", "std": "Std-SD (1-layer draft)"}
RUN_NAMES = {"none": "unpruned draft (r = 0)", "specvlm": "SpecVLM (r = 0.9)",
             "reselect": "SpecVLM + re-selection", "adaptive": "SpecVLM + adaptive r",
             "textkept": "SpecVLM, text tokens forced in"}
DIFF_NAMES = {
    "reselect-specvlm:tau": "τ: re-selection − SpecVLM",
    "adaptive-specvlm:tau": "τ: adaptive r − SpecVLM",
    "none-specvlm:tau": "τ lost to pruning: unpruned − SpecVLM",
    "textkept-specvlm:tau": "τ: text tokens forced into the kept set − SpecVLM",
    "reselect-specvlm:tokens_per_s": "tokens/s: re-selection − SpecVLM",
    "adaptive-specvlm:tokens_per_s": "tokens/s: adaptive r − SpecVLM",
    "adaptive-specvlm:tau_per_kcost": "τ per 1k draft reads: adaptive r − SpecVLM",
    "reselect-specvlm:tau_per_kcost": "τ per 1k draft reads: re-selection − SpecVLM",
}
TARGET_SHARE = 0.5
"""Share of the τ lost to pruning that re-selection should recover on the burned-in-text set."""


def summarise(rows: list[dict], sets: list[str], pairs: list[str], runs: list[str], n_boot: int = 2000,
              min_share: float = stats.ReselectConfig.min_share) -> dict:
    """set -> pair -> :func:`training.reselect_stats.summarise_pair` (sets and pairs without a finished clip
    left out; ``min_share``: re-selection's threshold)."""
    out: dict = {}
    for kind in sets:
        for pair in pairs:
            s = stats.summarise_pair(rows, kind, pair, tuple(runs), n_boot=n_boot, min_share=min_share)
            if s is not None:
                out.setdefault(kind, {})[pair] = s
    return out


def _ci(d: dict | None, pct: bool = False) -> str:
    if d is None:
        return "n/a"
    f = (lambda x: f"{100 * x:+.0f}%") if pct else (lambda x: f"{x:+.2f}")
    extra = f"; per clip {d['wins']} / {d['ties']} / {d['losses']} up / same / down" if "wins" in d else ""
    return f"{f(d['diff'])} (95% CI {f(d['lo'])}..{f(d['hi'])}{extra})"


def share_text(s: dict | None) -> str:
    """One line for :func:`training.reselect_stats.recovered_share`."""
    if s is None:
        return "n/a"
    head = f"τ lost to pruning {s['lost']:+.2f}, recovered {s['recovered']:+.2f}"
    if s["share"] is None:
        return head + ": pruning lost no τ, no share"
    ci = f"95% CI {100 * s['lo']:.0f}%..{100 * s['hi']:.0f}%" if s["lo"] is not None else "no CI"
    und = f"; {s['undefined']} bootstrap replicates lost no τ" if s["undefined"] else ""
    return f"{head}: **{100 * s['share']:.0f}%** recovered ({ci}{und})"


def goals(summary: dict) -> dict:
    """The checks of the shipped evaluation, each -> {"met": bool, "detail": str}."""
    g: dict = {}
    for kind, by_pair in summary.items():
        for pair, s in by_pair.items():
            tag = f"{kind}, {PAIR_NAMES[pair]}"
            sh = s.get("recovered_share")
            if kind == "text" and sh is not None:
                g[f"{tag}: re-selection recovers >= {TARGET_SHARE:.0%} of the τ lost to pruning, CI above 0"] = {
                    "met": sh["share"] is not None and sh["share"] >= TARGET_SHARE and sh["lo"] > 0,
                    "detail": share_text(sh)}
            d = s["diff"].get("reselect-specvlm:tau")
            if kind != "text" and d is not None:
                g[f"{tag}: re-selection loses no τ (CI reaches 0 or above)"] = {"met": d["hi"] >= 0,
                                                                               "detail": _ci(d)}
            d = s["diff"].get("adaptive-specvlm:tau_per_kcost")
            if d is not None:
                g[f"{tag}: adaptive r no worse than r = 0.9 in τ per draft cost (CI reaches 0 or above)"] = {
                    "met": d["hi"] >= 0, "detail": _ci(d)}
    bad = sum(r.get("mismatches", 0) for p in summary.values() for s in p.values() for r in s["runs"].values())
    runs = sum(s["clips"] * (len(s["runs"]) - 1) for p in summary.values() for s in p.values())
    g["greedy output identical to vanilla in every run"] = {"met": bad == 0, "detail": f"{bad} of {runs} differ"}
    return g


def _num(x, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def _run_table(s: dict) -> list[str]:
    L = ["| run | τ | tokens/s | vs vanilla | draft video tokens | draft reads / step (k) | τ per 1k reads "
         "| draft ms / step | tokens added / clip | differs from vanilla |", "|---|" + "---|" * 9]
    L.append(f"| vanilla | | {_num(s['runs']['vanilla']['tokens_per_s'], '.1f')} | 1.00x | | | | | | |")
    for run, r in s["runs"].items():
        if run == "vanilla":
            continue
        L.append(f"| {RUN_NAMES[run]} | {_num(r['tau'], '.2f')} | {_num(r['tokens_per_s'], '.1f')} | "
                 f"{_num(r['speedup'], '.2f')}x | {r['draft_video_tokens']:.0f} | {r['kcost_per_step']:.1f} | "
                 f"{_num(r['tau_per_kcost'], '.3f')} | {r['draft_ms_per_step']:.1f} | {r['added_per_clip']:.1f} | "
                 f"{r['mismatches']} of {s['clips']} |")
    return L


def _diagnosis(s: dict) -> list[str]:
    L = []
    res = s["runs"].get("reselect")
    if res is not None:
        u = res.get("unseen_share") or {"measured": 0}
        line = (f"- re-selection: {u['measured']} measured steps, tokens added after {res['steps_added']} of them, "
                f"in {res['clips_added']} of {s['clips']} clips")
        if u["measured"]:
            line += (f"; share of the measured position's video attention on tokens the draft lacked: mean "
                     f"{100 * u['mean']:.0f}%, median {100 * u['median']:.0f}%, above the threshold at "
                     f"{u['above_min']} of them")
        L.append(line)
    spec = s["runs"].get("specvlm")
    for t, what in (("text", "on-screen text"), ("flash", "flashing shape")):
        if spec is not None and f"{t}_kept" in spec:
            line = (f"- {what}: SpecVLM's kept set holds ≥ 1 of its tokens in {100 * spec[f'{t}_kept']:.0f}% of "
                    f"clips, {100 * spec[f'{t}_kept_share']:.0f}% of them all (Stage I "
                    f"{100 * spec[f'{t}_stage1_share']:.0f}%)")
            if res is not None and f"{t}_added" in res:
                line += (f"; re-selection added {res[f'{t}_added']} of its tokens, the draft then held ≥ 1 in "
                         f"{100 * res[f'{t}_final']:.0f}%")
            L.append(line)
    ad = s["runs"].get("adaptive", {}).get("r_used")
    if ad:
        L.append(f"- adaptive r: mean {ad['mean']:.3f} (min {ad['min']:.3f}, max {ad['max']:.3f}); e.g. "
                 + " / ".join(f"\"{x}\"" for x in ad["examples"]))
    pr = s.get("pruning_refusals")
    if pr:
        L.append(f"- refusals SpecVLM's draft meets where the unpruned draft met none: {pr['extra']} in "
                 f"{pr['clips']} clips, {pr['on_text']} on the on-screen-text sentence, {pr['on_fact']} on the "
                 f"subtitle-fact sentence")
    v = s["vanilla"]
    said = [f"the {what} right in {100 * v[a]:.0f}% of the {v[f'clips_with_{a}']} clips with one"
            for a, what in (("text", "on-screen text"), ("fact", "subtitle fact")) if v[a] is not None]
    if said:
        L.append("- vanilla output names " + "; ".join(said))
    return L


def markdown(summary: dict, goal: dict, meta: dict) -> str:
    """The report: per set and pair a table of the runs, the paired differences, the recovered share, what
    re-selection and adaptive r did, then the checks and the command."""
    L = ["# Re-selection and adaptive r: evaluation on the bundled sparse pair", "",
         f"Held-out clips (seeds from 3x10^9), greedy, {meta['max_new_tokens']} new tokens at most, r = "
         f"{meta['drop_rate']}, λ = {meta['top_p']}, each pair's preset draft tree. τ counts "
         "accepted draft tokens per verify step, pooled over clips; differences are paired over clips (95% "
         "percentile bootstrap). Draft reads: Σ over verify steps of the draft's context × nodes drafted. "
         "Times are wall times on a shared CPU.", ""]
    for kind, by_pair in summary.items():
        for pair, s in by_pair.items():
            L += [f"## {kind}, {PAIR_NAMES[pair]}: {s['clips']} clips", ""] + _run_table(s) + [""]
            L += [f"- {DIFF_NAMES[k]}: {_ci(d)}" for k, d in s["diff"].items()]
            if s.get("recovered_share") is not None:
                L.append(f"- share of the τ lost to pruning that re-selection recovers: "
                         f"{share_text(s['recovered_share'])}")
            L += _diagnosis(s) + [""]
    L += ["## Checks", ""] + [f"- [{'x' if v['met'] else ' '}] {k}: {v['detail']}" for k, v in goal.items()]
    L += ["", f"Rows: {meta['rows']}; {meta['machine']}, {meta['threads']} torch thread(s); "
              f"command `{meta['command']}`.", ""]
    return "\n".join(L)
