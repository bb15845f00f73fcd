"""Growing a bundled target (training/grow.py): the grown model computes what the small one computes."""
from pathlib import Path

import pytest
import torch

from specvlm.bench import synth
from training import data as tdata
from training import grow
from training import model as tmodel

ROOT = Path(__file__).resolve().parents[1]

SMALL = tmodel.ModelSize(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, v_hidden=32, v_depth=1,
                         v_heads=2, v_intermediate=64)
BIG = tmodel.ModelSize(hidden=128, layers=5, heads=8, kv_heads=4, intermediate=256, v_hidden=32, v_depth=3,
                       v_heads=2, v_intermediate=128)


@pytest.fixture(scope="module")
def processor():
    from transformers import AutoProcessor
    return AutoProcessor.from_pretrained(str(ROOT / "assets" / "model" / "target"))


@pytest.fixture(scope="module")
def pair(processor):
    small = tmodel.build_model(processor.tokenizer, SMALL, seed=3).eval()
    big = tmodel.build_model(processor.tokenizer, BIG, seed=4)
    big.load_state_dict(grow.grow_state(small.state_dict(), SMALL, BIG, noise=0.05, seed=1))
    return small, big.eval()


def test_layer_order_interleaves_identity_layers():
    assert grow.grown_layer_order(4, 8) == [0, None, 1, None, 2, None, 3, None]
    assert grow.grown_layer_order(2, 5) == [0, None, None, 1, None]
    assert grow.grown_layer_order(3, 3) == [0, 1, 2]
    with pytest.raises(ValueError, match="cannot grow 4 layers into 2"):
        grow.grown_layer_order(4, 2)


def test_grown_model_gives_the_same_logits_on_video_prompts(processor, pair):
    small, big = pair
    batch = tdata.make_batch(processor, tdata.SMOKE_RECIPE, seed=11, step=0, single_object=False)
    with torch.no_grad():
        a = small(**tdata.model_inputs(batch)).logits
        b = big(**tdata.model_inputs(batch)).logits
    assert a.shape == b.shape
    assert (a - b).abs().max().item() < 1e-4 * max(1.0, a.abs().max().item())
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def test_grown_model_decodes_the_same_tokens(processor, pair):
    small, big = pair
    frames = synth.generate(5, synth.SceneSpec(num_frames=4, height=56, width=56))[0]
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Describe the video."}]}],
        add_generation_prompt=True)
    inputs = processor(text=[text], videos=[frames], return_tensors="pt",
                       videos_kwargs={"do_sample_frames": False})
    kw = dict(max_new_tokens=12, do_sample=False, eos_token_id=None)
    with torch.no_grad():
        out_small = small.generate(**inputs, **kw)
        out_big = big.generate(**inputs, **kw)
    assert out_small.tolist() == out_big.tolist()


def test_noise_breaks_the_symmetry_between_copies(pair):
    _, big = pair
    q = big.state_dict()["model.language_model.layers.0.self_attn.q_proj.weight"]   # (128, 128)
    left, right = q[:, :64], q[:, 64:]
    assert not torch.allclose(left, right)          # the copies differ, so training can separate them
    assert torch.allclose(q[:64], q[64:])           # duplicated heads (rows) are copies


def test_new_layers_add_nothing_until_trained(pair):
    _, big = pair
    sd = big.state_dict()
    assert sd["model.language_model.layers.1.self_attn.o_proj.weight"].abs().sum() == 0
    assert sd["model.language_model.layers.1.mlp.down_proj.weight"].abs().sum() == 0
    assert sd["model.language_model.layers.1.mlp.up_proj.weight"].abs().sum() > 0
    assert sd["model.visual.blocks.2.attn.proj.weight"].abs().sum() == 0


@pytest.mark.parametrize("change, match", [
    (dict(hidden=96, heads=6, kv_heads=3), "hidden: 96 is not a multiple of 64"),
    (dict(heads=4), "heads and kv_heads must grow with hidden"),
    (dict(v_hidden=64), "vision tower's hidden size"),
    (dict(intermediate=200), "intermediate: 200"),
])
def test_sizes_that_cannot_grow_are_refused(pair, change, match):
    small, _ = pair
    with pytest.raises(ValueError, match=match):
        grow.grow_state(small.state_dict(), SMALL, tmodel.ModelSize(**{**BIG.__dict__, **change}))


def test_large_size_reads_its_weights_from_memory():
    """The large target's text weights are over three times a 32 MB L3 cache; the draft's are under a tenth."""
    def text_params(s):
        head = s.hidden // s.heads
        attn = s.hidden * s.hidden * 2 + 2 * s.hidden * s.kv_heads * head
        return s.layers * (attn + 3 * s.hidden * s.intermediate) + 512 * s.hidden
    big, draft = text_params(tmodel.LARGE_TARGET_SIZE) * 4, text_params(tmodel.DRAFT_SIZE) * 4
    assert big > 3 * 32 * 2**20
    assert draft < big / 10


def test_shipped_bf16_folder_loads_as_float32_with_the_rounded_weights(tmp_path):
    from training import export
    from specvlm.models.loading import load_pair
    from transformers import AutoModelForImageTextToText

    src = ROOT / "assets" / "model" / "draft"
    nbytes = export.ship(src, tmp_path / "draft", torch.bfloat16)
    assert nbytes < 0.6 * (src / "model.safetensors").stat().st_size
    assert (tmp_path / "draft" / "training_info.json").exists() and (tmp_path / "draft" / "tokenizer.json").exists()
    pair = load_pair(str(tmp_path / "draft"), device="cpu")
    orig = AutoModelForImageTextToText.from_pretrained(str(src), dtype=torch.float32).state_dict()
    got = pair.target.state_dict()
    for name in ("model.language_model.layers.0.mlp.up_proj.weight", "model.visual.blocks.0.attn.qkv.weight"):
        assert got[name].dtype == torch.float32
        assert torch.equal(got[name], orig[name].to(torch.bfloat16).float())
    with pytest.raises(FileNotFoundError, match="no model there"):
        export.ship(tmp_path / "nothing", tmp_path / "x", torch.bfloat16)
