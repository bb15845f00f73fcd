"""The sampling law through the one engine with re-selection on and off.

Sampled SpecVLM on a tiny random Qwen2.5-VL pair, re-selection adding video tokens to the draft before the
first draft and after every verify: the joint law of the first three tokens is vanilla sampling's at the same
temperature (two-sample chi-square, alpha = 1e-3, the bundled pair's test in
``tests/test_bundled_model.py`` at a tiny pair's cost). The step-level check of one re-selected step is
``tests/test_static_reselect.py::test_sampled_steps_after_reselection_keep_the_target_law``.
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from helpers.chisquare import two_sample_chi_square
from helpers.media import make_clip
from specvlm.config import DecodeConfig, PruneConfig, ReselectConfig, SamplingConfig, TreeConfig
from specvlm.engine.prefill import prefill_target
from specvlm.engine.prepare import prepare
from specvlm.engine.stream import generate

PROMPT = "describe this video in detail"
TOKENS = 3
# at temperature 1 the tiny target spreads three tokens over hundreds of outcomes (no cell holds 10 draws); at 0.3
# they fall on ~70, the most likely holding a quarter of the mass
TEMPERATURE = 0.3
RUNS, VANILLA_RUNS, ALPHA = 250, 500, 1e-3
TREE = TreeConfig(shape="dynamic", depth=2, top_k=3, total_tokens=6)   # siblings: recursive rejection over several
# the draft sees 16 of the 64 video tokens: close enough to the target that about half its guesses are accepted,
# with 48 left for re-selection to add
PRUNE = PruneConfig(drop_rate=0.75)


def _every(sync: bool) -> ReselectConfig:
    """Re-selection that adds 3 video tokens before the first draft and after every verify (up to 12)."""
    return ReselectConfig(enabled=True, min_share=0.0, step_tokens=3, total_tokens=12, trigger="every", sync=sync)


@pytest.fixture(scope="module")
def setups(qwen_tiny):
    """{"self" | "std": (pair, inputs, the target's prefill)}. The Std-SD draft is a second instance of the
    target's weights (its own prefill, buffer and partial prefills): the conftest's Std-SD draft, another random
    model, agrees with the target on so few guesses that a fault in their acceptance would barely move the law."""
    from specvlm.models.pair import pair_from_models
    from specvlm.testing.tiny import tiny_qwen2_5_vl

    clip = make_clip()
    out = {}
    for mode, pair in (("self", pair_from_models(*qwen_tiny)),
                       ("std", pair_from_models(*qwen_tiny, *tiny_qwen2_5_vl(seed=0)))):
        inputs = prepare(pair, clip, PROMPT)
        with torch.inference_mode():
            tp = prefill_target(pair, inputs.for_target(), with_scores=True)   # one prefill, copied by every run
        out[mode] = (pair, inputs, tp)
    assert torch.equal(out["self"][1].input_ids, out["std"][1].input_ids)    # one target prompt: one vanilla law
    return out


def _runs(setup, method: str, reselect: ReselectConfig, seeds: range):
    pair, inputs, tp = setup
    for seed in seeds:
        cfg = DecodeConfig(method=method, max_new_tokens=TOKENS, stop_at_eos=False, prune=PRUNE, tree=TREE,
                           reselect=reselect, sampling=SamplingConfig(temperature=TEMPERATURE, top_p_sampling=1.0,
                                                                      seed=seed))
        yield generate(pair, inputs, cfg, prefill=tp)


@pytest.fixture(scope="module")
def vanilla(setups) -> Counter:
    """The target's law: vanilla sampling, on seeds no speculative run uses."""
    return Counter(tuple(r.token_ids[:TOKENS])
                   for r in _runs(setups["self"], "vanilla", ReselectConfig(), range(10_000, 10_000 + VANILLA_RUNS)))


@pytest.mark.parametrize("mode, reselect", [("self", _every(True)), ("self", _every(False)), ("std", _every(False)),
                                            ("self", ReselectConfig())],
                         ids=["self-sd-sync", "self-sd-no-sync", "std-sd", "self-sd-off"])
def test_sampled_specvlm_keeps_the_target_law_with_reselection(setups, vanilla, mode, reselect):
    """The first three tokens of sampled SpecVLM (re-selection on: Self-SD with and without sync, Std-SD; and off)
    over 250 seeds against vanilla sampling over 500 others: one law (chi-square p > 1e-3; outcomes with fewer
    than 10 draws in both pooled). Re-selection really added tokens on the way (every run before its first draft;
    many after a verify that another draft followed), and the draft's guesses made up much of the output, so
    neither the re-selection nor the acceptance of its guesses is left out."""
    got, first, later, accepted = Counter(), 0, 0, 0
    for r in _runs(setups[mode], "specvlm", reselect, range(RUNS)):
        assert len(r.token_ids) == TOKENS
        got[tuple(r.token_ids)] += 1
        first += bool(r.steps[0].added)
        later += any(s.added for s in r.steps[1:-1])     # added after a verify, before the next draft
        accepted += sum(r.accept_lengths)
    if reselect.enabled:
        assert first == RUNS and later >= RUNS // 10, (first, later)
    else:
        assert first == later == 0
    assert accepted >= RUNS // 4, accepted
    chi = two_sample_chi_square(vanilla, got)
    label = ("sync" if reselect.sync else "no sync") if reselect.enabled else "re-selection off"
    print(f"{mode}-sd, {label}: p = {chi.p:.3g} (chi-square {chi.stat:.1f}, dof {chi.dof}); "
          f"added before the first draft {first}/{RUNS}, after a verify {later}; accepted {accepted}")
    assert chi.dof >= 3 and chi.p > ALPHA, chi
