"""The reference transformer built layer by layer: every mixer and MLP kind holds the
parameters the ledger counts for it (and a hand count), recurrent layers hold the fixed
state the memory model reserves, sliding-window layers keep only their window, a decode
step continues exactly where a whole forward pass would be, and anything without a
reference form is refused in one line."""

import pytest

torch = pytest.importorskip("torch")

from phasewise.errors import InputError  # noqa: E402
from phasewise.ledger import param_counts  # noqa: E402
from phasewise.ledger.layers import mixer_params, mlp_params  # noqa: E402
from phasewise.ledger.memory import (  # noqa: E402
    kv_cache_bytes_per_device,
    state_bytes_per_device,
)
from phasewise.measure.profile import precision_for  # noqa: E402
from phasewise.measure.recurrent import delta_rule_scan  # noqa: E402
from phasewise.measure.reference import build_model, decode_one_token, prefill  # noqa: E402
from phasewise.measure.types import Ceilings  # noqa: E402
from phasewise.specs import ModelSpec, Parallelism  # noqa: E402
from phasewise.specs.model import (  # noqa: E402
    Attention,
    CrossAttention,
    DenseMLP,
    LatentAttention,
    Layer,
    LinearAttention,
    LinearMixer,
    LinearMLP,
    Mamba2,
    MoE,
    ShortConv,
)

H = 64  # hidden size of every layer below
FP32 = precision_for("fp32")
CEILINGS = Ceilings(device="cpu", device_name="test CPU", device_class="cpu", threads=1,
                    clock="thread-cpu", versions={"torch": "x"}, memory_bytes=16e9,
                    gemm_flops_per_s={"fp32": 1e11, "bf16": 2e11}, gemm_size=64,
                    copy_bytes_per_s=2e10, read_bytes_per_s=2.5e10, buffer_bytes=2**20,
                    warmup=0, repeats=1)

# (mixer, hand count of its parameters at hidden 64)
MIXERS = {
    # q 64·64, k and v 64·(2·16) each, o 64·64
    "gqa": (Attention(4, 2, 16), 64 * 64 + 2 * 64 * 32 + 64 * 64),
    "sliding": (Attention(4, 2, 16, window=8), 12_288),
    "chunked": (Attention(4, 2, 16, chunk=8), 12_288),
    # the output gate doubles q: 64·128 + k, v 2·64·32 + o 64·64
    "gated": (Attention(4, 2, 16, gated=True), 8_192 + 4_096 + 4_096),
    # values 24 wide: q 64·64, k 64·32, v 64·48, o 96·64
    "wide-values": (Attention(4, 2, 16, value_dim=24), 4_096 + 2_048 + 3_072 + 6_144),
    # q_a 64·20 + norm 20 + q_b 20·(4·24); kv_a 64·(24+8) + norm 24 + kv_b 24·(4·(16+12));
    # o (4·12)·64
    "mla": (LatentAttention(4, 20, 24, 8, 16, 12), 1_280 + 20 + 1_920 + 2_048 + 24 + 2_688
            + 3_072),
    # plus the indexer: wq_b 20·(2·16), wk 64·16, its LayerNorm 2·16, weights_proj 64·2
    "mla-sparse": (LatentAttention(4, 20, 24, 8, 16, 12, index_topk=4, index_heads=2,
                                   index_head_dim=16), 11_052 + 640 + 1_024 + 32 + 128),
    # d_model 64, d_state 16, 1 group, expand 2 (inner 128), head_dim 16 (8 heads), conv 4:
    # in_proj 64·(2·128 + 2·1·16 + 8) = 18,944; conv (128 + 32)·(4 + 1 bias) = 800;
    # dt_bias, A_log, D 3·8 = 24; gated norm 128; out_proj 128·64 = 8,192
    "mamba2": (Mamba2(heads=8, head_dim=16, state_size=16, groups=1, conv_kernel=4),
               18_944 + 800 + 24 + 128 + 8_192),
    # 2 key heads, 4 value heads of 16: in_proj 64·(2·32 + 2·64 + 2·4) = 12,800;
    # conv (32 + 32 + 64)·4 = 512; dt_bias 4 + A_log 4; norm 16; out_proj 64·64
    "gated-deltanet": (LinearAttention(2, 4, 16, 16, 4), 12_800 + 512 + 8 + 16 + 4_096),
    # 4 heads of 16: q, k, v 64·192; f_a 64·16, f_b 16·64, g_a 64·16, g_b 16·64; b_proj 64·4;
    # conv 192·4; A_log 4; dt_bias 64 (one per key channel); norm 16; o_proj 64·64
    "kda": (LinearAttention(4, 4, 16, 16, 4, variant="kda"),
            12_288 + 4 * 1_024 + 256 + 768 + 4 + 64 + 16 + 4_096),
    # in_proj 64·(3·64), conv 64·3, out_proj 64·64
    "shortconv": (ShortConv(width=64, kernel=3), 12_288 + 192 + 4_096),
    # q 64·64, k and v 64·(2·2·16), o 64·64, q and k norms 2·16
    "xattn": (CrossAttention(4, 2, 16), 4_096 + 4_096 + 4_096 + 32),
    "linear": (LinearMixer(), 64 * 64),
}

MLPS = {
    "gated": (DenseMLP(96), 3 * 64 * 96),
    "plain": (DenseMLP(96, gated=False), 2 * 64 * 96),
    # router 64·4, experts 4·3·64·32, shared 3·64·48
    "moe": (MoE(4, 2, 32, shared_width=48), 256 + 24_576 + 9_216),
    # router 64·4, latent down and up 2·64·16, experts 4·2·16·32 (ungated, in the latent
    # width), a plain dense MLP beside 2·64·40
    "moe-latent-dense": (MoE(4, 2, 32, gated=False, latent_size=16, dense_width=40),
                         256 + 2_048 + 4_096 + 5_120),
    "linear": (LinearMLP(), 64 * 64),
}


def model_of(*layers: Layer, name: str = "tiny-hybrid", **changes) -> ModelSpec:
    """A spec given layer by layer; the uniform fields describe its first attention layer,
    as the config readers fill them."""
    fields = dict(name=name, hidden_size=H, num_layers=len(layers), num_heads=4,
                  num_kv_heads=2, head_dim=16, intermediate_size=96, vocab_size=101,
                  layer_specs=tuple(layers))
    return ModelSpec(**(fields | changes))


def held(module) -> int:
    return sum(p.numel() for p in module.parameters())


def cache_bytes(module) -> int:
    return sum(b.numel() * b.element_size() for b in module.buffers())


@pytest.mark.parametrize("kind", MIXERS)
def test_each_mixer_holds_the_parameters_the_ledger_and_a_hand_count_give(kind):
    mixer, by_hand = MIXERS[kind]
    block = build_model(model_of(Layer(mixer, None))).layers[0]
    assert held(block.attn) == mixer_params(mixer, H) == by_hand


@pytest.mark.parametrize("kind", MLPS)
def test_each_mlp_holds_the_parameters_the_ledger_and_a_hand_count_give(kind):
    mlp, by_hand = MLPS[kind]
    block = build_model(model_of(Layer(None, mlp))).layers[0]
    assert held(block.mlp) == mlp_params(mlp, H)[0] == by_hand


def test_a_hybrid_model_holds_the_ledgers_total_with_skipped_parts_counting_nothing():
    spec = model_of(Layer(MIXERS["mamba2"][0], None), Layer(None, DenseMLP(96, gated=False)),
                    Layer(Attention(4, 2, 16), None), Layer(MIXERS["gated-deltanet"][0],
                                                            MLPS["moe"][0]))
    model = build_model(spec)
    # embeddings 101·64 twice (untied), final norm 64; per layer its parts and one norm each
    by_hand = (2 * 101 * 64 + 64 + 28_088 + 64 + 12_288 + 64 + 12_288 + 64
               + 17_432 + 34_048 + 2 * 64)
    assert held(model) == param_counts(spec).total == by_hand
    assert model.layers[1].attn is None and model.layers[1].attn_norm is None


@pytest.mark.parametrize("kind, elements", [
    # conv (4 − 1)·(128 + 2·16) + SSM state 8 heads·16·16
    ("mamba2", 3 * 160 + 8 * 16 * 16),
    # conv (4 − 1)·(2·32 + 64) + delta-rule state 4 value heads·16·16
    ("gated-deltanet", 3 * 128 + 4 * 16 * 16),
    ("kda", 3 * 192 + 4 * 16 * 16),
    ("shortconv", 2 * 64),  # the conv's last kernel − 1 inputs
])
def test_a_recurrent_layer_holds_the_state_the_memory_model_reserves_whatever_the_context(
        kind, elements):
    spec = model_of(Layer(MIXERS[kind][0], None))
    model = build_model(spec)
    reserved = state_bytes_per_device(spec, FP32, Parallelism())
    assert reserved == elements * 4  # fp32
    sizes = set()
    for context in (8, 64, 512):
        model.setup_caches(2, context + 1)
        tokens = torch.randint(0, spec.vocab_size, (2, 1))
        decode_one_token(model, tokens, context)
        sizes.add(cache_bytes(model.layers[0]))
    assert sizes == {2 * reserved}  # two sequences, the same at every context


def test_a_sliding_window_layer_keeps_its_window_and_a_full_layer_every_token():
    window, context = 8, 100
    spec = model_of(Layer(Attention(4, 2, 16, window=window), None),
                    Layer(Attention(4, 2, 16), None))
    model = build_model(spec)
    model.setup_caches(1, context)
    per_token = 2 * 2 * 16 * 4  # K and V, 2 KV heads of 16, fp32
    assert cache_bytes(model.layers[0]) == window * per_token
    assert cache_bytes(model.layers[1]) == context * per_token
    assert cache_bytes(model) == kv_cache_bytes_per_device(spec, FP32, Parallelism(),
                                                           sequences=1, context_tokens=context)


HYBRIDS = [
    model_of(Layer(MIXERS["mamba2"][0], None), Layer(None, DenseMLP(96, gated=False)),
             Layer(Attention(4, 2, 16), None), name="nemotron-h-like", hidden_act="relu2"),
    model_of(Layer(MIXERS["gated-deltanet"][0], MLPS["moe"][0]),
             Layer(Attention(4, 2, 16, gated=True), MLPS["moe"][0]), name="qwen3-next-like"),
    model_of(Layer(MIXERS["kda"][0], DenseMLP(96)), Layer(MIXERS["mla"][0], DenseMLP(96)),
             name="kimi-linear-like"),
    model_of(Layer(MIXERS["mla-sparse"][0], MLPS["moe-latent-dense"][0]),
             Layer(MIXERS["mla-sparse"][0], DenseMLP(96)), name="sparse-mla"),
    model_of(Layer(Attention(4, 2, 16, chunk=6), DenseMLP(96)),
             Layer(Attention(4, 2, 16, value_dim=24, window=5), DenseMLP(64)),
             Layer(Attention(2, 1, 32), MoE(4, 1, 32)), name="per-layer-attention"),
    model_of(Layer(MIXERS["shortconv"][0], DenseMLP(96)), Layer(CrossAttention(4, 2, 16),
                                                                DenseMLP(96)),
             Layer(LinearMixer(), LinearMLP()), Layer(None, None), name="conv-nas-vision"),
]


@pytest.mark.parametrize("spec", HYBRIDS, ids=lambda s: s.name)
def test_decoding_after_a_prefill_matches_one_forward_pass_over_the_whole_sequence(spec):
    """The caches (ring windows, recurrent states, the indexer's keys) carry exactly what a
    later step needs. 20 tokens: a prefill of 17 runs MLA decompressed, decode absorbed."""
    model = build_model(spec, seed=1)
    tokens = torch.randint(0, spec.vocab_size, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model.setup_caches(2, 24)
        whole = model(tokens, 0, all_logits=True)
        model.setup_caches(2, 24)
        prefill(model, tokens[:, :17])
        steps = [decode_one_token(model, tokens[:, i:i + 1], i) for i in range(17, 20)]
    for offset, logits in enumerate(steps):
        torch.testing.assert_close(logits, whole[:, 17 + offset], rtol=1e-4, atol=1e-4)


def test_a_chunked_layer_does_not_see_the_previous_chunk():
    spec = model_of(Layer(Attention(4, 2, 16, chunk=4), None), name="one-chunked-layer")
    model = build_model(spec, seed=3)
    tokens = torch.randint(1, spec.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[0, 7] = 0  # chunk 4–7; the last query, position 9, is in chunk 8–11
    with torch.inference_mode():
        model.setup_caches(1, 10)
        before = prefill(model, tokens)
        model.setup_caches(1, 10)
        after = prefill(model, changed)
    torch.testing.assert_close(before, after)


def test_the_delta_rule_writes_a_value_under_its_key_and_overwrites_it():
    """From a zero state with β = 1 and no decay, S = k vᵀ, so reading with q = k gives v;
    a second write under the same unit key replaces v (the delta rule's correction)."""
    k = torch.tensor([0.6, 0.8]).view(1, 1, 1, 2).expand(1, 2, 1, 2)
    v = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]]).view(1, 2, 1, 3)
    out, state = delta_rule_scan(k, k, v, torch.ones(1, 2, 1), torch.zeros(1, 2, 1),
                                 torch.zeros(1, 1, 2, 3))
    torch.testing.assert_close(out[0, :, 0], v[0, :, 0])
    torch.testing.assert_close(state[0, 0], torch.outer(torch.tensor([0.6, 0.8]), v[0, 1, 0]))


def test_a_mamba2_step_from_zero_state_is_dt_times_b_dot_c_times_x_plus_d_x():
    """Mamba-2 from a zero state: S = Δ·x ⊗ B, so y = Δ·(B·C)·x + D·x, before the gated norm."""
    spec = model_of(Layer(MIXERS["mamba2"][0], None))
    mixer = build_model(spec, seed=4).layers[0].attn
    mixer.make_cache(1, 4, torch.float32, "cpu")
    xs = torch.randn(1, 1, 8, 16)
    b, c = torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16)
    delta = torch.full((1, 1, 8), 0.5)
    with torch.inference_mode():
        y = mixer._scan(xs, b, c, delta, torch.full((1, 1, 8), 0.9), start=0)
    want = 0.5 * (b * c).sum(-1)[..., None] * xs
    torch.testing.assert_close(y, want)


@pytest.mark.parametrize("layer, words", [
    (Layer(LinearAttention(3, 4, 16, 16, 4), None), "4 value heads are not a multiple of 3"),
    (Layer(LinearAttention(2, 4, 16, 16, 4, variant="kda"), None), "one head count"),
    (Layer(Mamba2(heads=6, head_dim=16, state_size=16, groups=4, conv_kernel=4), None),
     "6 heads do not split into 4"),
    (Layer(Attention(4, 2, 15), None), "head_dim 15 is odd"),
    (Layer(Mamba2(heads=8, head_dim=16, state_size=16, groups=0, conv_kernel=4), None),
     "groups must be at least 1"),
    (Layer(LatentAttention(4, 20, 24, 8, 16, 12, index_topk=4), None),
     "index_heads, index_head_dim must be at least 1"),
])
def test_a_layer_without_a_reference_form_is_refused_in_one_line_naming_it(layer, words):
    spec = model_of(layer, name="odd")
    with pytest.raises(InputError, match=f"cannot build its {layer.label} layers: .*{words}") \
            as raised:
        build_model(spec)
    assert "\n" not in str(raised.value)


# Nemotron-H's layout scaled down: Mamba-2 (8 heads × 16, state 16, 1 group, 4 taps), a
# relu² MLP, GQA attention, as "M-*-".
TINY_NEMOTRON_H = {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
                   "hidden_size": 64, "num_hidden_layers": 4, "hybrid_override_pattern": "M-*-",
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                   "intermediate_size": 96, "vocab_size": 256, "mamba_num_heads": 8,
                   "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 1, "conv_kernel": 4,
                   "mlp_hidden_act": "relu2", "tie_word_embeddings": False}
# Qwen3-Next's layout scaled down: three Gated DeltaNet layers, then gated attention; MoE.
TINY_QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
                   "hidden_size": 64, "num_hidden_layers": 4, "full_attention_interval": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                   "intermediate_size": 96, "vocab_size": 256, "linear_num_key_heads": 2,
                   "linear_num_value_heads": 4, "linear_key_head_dim": 16,
                   "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4, "num_experts": 4,
                   "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                   "shared_expert_intermediate_size": 32, "tie_word_embeddings": False}


def run_cli(*args):
    from phasewise.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return exit_info.value.code or 0


def write_json(path, data):
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("config, non_attention", [
    (TINY_NEMOTRON_H, {"mamba2/- ×1", "-/mlp96 ×2"}),
    (TINY_QWEN3_NEXT, {"gated_deltanet/moe4x2 ×3"}),
], ids=["nemotron-h", "qwen3-next"])
def test_profile_runs_a_hybrid_end_to_end_and_splits_each_step_by_layer_group(
        tmp_path, capsys, config, non_attention):
    import json

    from phasewise.catalog import load_model
    from phasewise.ledger import Step, build_ledger
    from phasewise.measure.calibrate import spec_from_document
    from phasewise.measure.types import Profile

    model = write_json(tmp_path / "tiny" / "config.json", config)
    ceilings = write_json(tmp_path / "ceilings.json", json.loads(CEILINGS.model_dump_json()))
    out = tmp_path / "profile.json"
    args = ("profile", "--model", str(model), "--device", "cpu", "--ceilings", str(ceilings),
            "--prompt-lengths", "12", "--batch-size", "1,2", "--context", "24", "--repeats", "2",
            "--warmup", "0", "--out", str(out))
    assert run_cli(*args) == 0
    table = capsys.readouterr().out
    assert "By layer group" in table and all(group in table for group in non_attention)
    profile = Profile.model_validate_json(out.read_text())
    spec = load_model(str(model))
    assert spec_from_document(profile) == spec  # the document re-prices the same layers
    assert [p.label for p in profile.points] == ["pp12", "tg@24×1", "tg@24×2"]
    for point, step in zip(profile.points, (Step.prefill(12), Step.decode(1, 24),
                                            Step.decode(2, 24)), strict=True):
        ledger = build_ledger(spec, step, FP32)
        groups = {row.layers: row for row in point.layers}
        assert non_attention <= set(groups)
        for group in non_attention:  # its ledger operators, and a measured share
            ops = [op for op in ledger.ops if op.layers == group]
            assert groups[group].flops == pytest.approx(sum(op.flops for op in ops))
            assert groups[group].time_s > 0 and groups[group].sol_time_s > 0
        assert sum(r.flops for r in point.layers) == pytest.approx(point.flops)
        assert sum(r.time_s for r in point.layers) == pytest.approx(point.time_s)


def test_real_weights_for_a_per_layer_model_are_refused_in_one_line(tmp_path, capsys):
    model = write_json(tmp_path / "tiny" / "config.json", TINY_NEMOTRON_H)
    assert run_cli("profile", "--model", str(model), "--weights", str(tmp_path / "tiny"),
                   "--device", "cpu", "--ceilings", str(write_json(
                       tmp_path / "c.json", CEILINGS.model_dump(mode="json"))),
                   "--prompt-lengths", "8", "--batch-size", "1", "--context", "8") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --weights: real weights load into decoders whose layers "
                          "share one geometry") and err.count("\n") == 1


KDA_ONLY = model_of(Layer(MIXERS["kda"][0], DenseMLP(96)), Layer(MIXERS["kda"][0], None),
                    name="kda")


@pytest.mark.parametrize("spec", [HYBRIDS[0], HYBRIDS[1], KDA_ONLY, HYBRIDS[5]],
                         ids=lambda s: s.name)
def test_a_hybrid_prefills_gemm_flops_match_the_ledger(spec):
    """torch's FLOP counter over a real prefill: the projections of every layer kind (Mamba's
    in/out, DeltaNet's, KDA's with its low-rank decay and gate, gated attention's doubled
    query, short conv's, the linear maps, the routed experts on the tokens routed to them,
    the LM head on the last token) are the ledger's GEMMs. (MLA's absorbed kv_b runs as
    batched matmuls, which the counter files with attention's.)"""
    from torch.utils.flop_counter import FlopCounterMode

    from phasewise.ledger import Step, build_ledger

    model = build_model(spec)
    model.setup_caches(1, 16)
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        prefill(model, torch.randint(0, spec.vocab_size, (1, 16)))
    counted = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    gemm = sum(n for op, n in counted.items() if op.endswith((".mm", ".addmm")))
    ledger = build_ledger(spec, Step.prefill(16), FP32)
    assert gemm == pytest.approx(sum(op.flops for op in ledger.ops if op.kind == "gemm"),
                                 rel=1e-9)


def test_gpt_oss_swiglu_clamps_both_halves_and_offsets_the_up_half_by_one():
    """gpt-oss: (clamp(up, ±7) + 1) · g·sigmoid(1.702·g) with g = min(gate, 7)."""
    import math

    from phasewise.measure.reference import ACTIVATIONS, gated_activation

    fused = torch.tensor([[1.0, 10.0, 2.0, -9.0]])  # gates 1, 10; ups 2, −9
    got = gated_activation(fused, 2, True, ACTIVATIONS["swigluoai"])
    want = [1 / (1 + math.exp(-1.702)) * 3, 7 / (1 + math.exp(-7 * 1.702)) * -6]
    assert got[0].tolist() == pytest.approx(want)


def build_on_meta(spec):
    from phasewise.measure.reference import Transformer

    with torch.device("meta"):
        return Transformer(spec)


# One of each layout the catalog's readers produce: Mamba-2 hybrids, Gated DeltaNet with
# gated attention, NAS blocks, interleaved MoE with chunked attention, sparse MLA,
# per-layer attention geometry with a dense MLP beside the MoE, cross-attention, short conv.
LAYOUTS = ["nemotron-h-56b", "nemotron-3-nano-30b-a3b", "qwen3-next-80b-a3b-thinking",
           "qwen3.5-27b", "llama-3.3-nemotron-super-49b", "llama-4-maverick-17b-128e",
           "deepseek-v3.2-nvfp4", "gemma-4-26b-a4b", "tests/data/configs/llama-3.2-90b-vision.json",
           "tests/data/configs/lfm2.5-vl-1.6b.json", "tests/data/configs/mimo-v2-flash.json",
           "tests/data/configs/nemotron-3-ultra-550b-a55b.json"]


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_layout_the_catalog_reads_builds_with_the_ledgers_parameter_count(name):
    """Built on the meta device (no memory): the model cards' totals are checked against the
    ledger in tests/check_configs.py; here the reference holds exactly the ledger's."""
    from phasewise.catalog import load_model

    spec = load_model(name)
    assert sum(p.numel() for p in build_on_meta(spec).parameters()) == param_counts(spec).total


# Evaluation configs whose layers the ledger prices but the reference transformer has no
# module for (refused in one line), and those the config reader itself refuses.
NO_REFERENCE_MODULE = {"apertus-8b": "xielu", "apertus-70b": "xielu",
                       "falcon-h1-0.5b": "ParallelMixers", "falcon-mamba-7b": "Mamba1",
                       "jamba-1.5-mini": "Mamba1", "jamba-1.5-large": "Mamba1",
                       "minimax-m1-80k": "lightning", "step-3": "low-rank query",
                       "deepseek-v4-flash": "compressed attention",
                       "deepseek-v4-pro": "compressed attention"}
UNSUPPORTED = {"longcat-flash-chat", "recurrentgemma-9b", "openelm-3b"}


@pytest.mark.slow
def test_every_catalog_model_builds_with_the_ledgers_parameter_count_but_qkv_biases():
    """Every catalog model and test config; Qwen2's QKV biases are held but, as everywhere
    in the ledger, not counted."""
    import glob
    from pathlib import Path

    from phasewise.catalog import load_model, model_names

    refs = [*model_names(), *(p for p in sorted(glob.glob("tests/data/configs/*.json"))
                              if "quant_config" not in p and Path(p).stem not in UNSUPPORTED)]
    assert len(refs) > 80
    for ref in refs:
        spec = load_model(ref)
        if Path(ref).stem in NO_REFERENCE_MODULE:
            with pytest.raises(InputError, match=NO_REFERENCE_MODULE[Path(ref).stem]):
                build_on_meta(spec)
            continue
        model = build_on_meta(spec)
        biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith("wqkv.bias"))
        held = sum(p.numel() for p in model.parameters())
        assert held - biases == param_counts(spec).total, Path(ref).name


@pytest.mark.parametrize("prompt", [6, 20], ids=["absorbed", "decompressed"])
def test_sparse_mla_equals_dense_mla_when_top_k_covers_the_context_and_differs_below_it(prompt):
    """The indexer only chooses keys: with top-k at least the context every key is chosen
    and the sparse layer computes dense MLA; with top-k 2 it attends to fewer."""
    def logits(index_topk):
        sparse = LatentAttention(4, 20, 24, 8, 16, 12, index_topk=index_topk, index_heads=2,
                                 index_head_dim=16)
        spec = model_of(Layer(sparse, DenseMLP(96)), name=f"top{index_topk}")
        model = build_model(spec, seed=5)
        model.load_state_dict(dense_model.state_dict(), strict=False)  # the shared weights
        with torch.inference_mode():
            model.setup_caches(1, prompt)
            return prefill(model, tokens)

    dense_model = build_model(model_of(Layer(MIXERS["mla"][0], DenseMLP(96)), name="dense"),
                              seed=6)
    tokens = torch.randint(0, 101, (1, prompt), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        dense_model.setup_caches(1, prompt)
        dense = prefill(dense_model, tokens)
    torch.testing.assert_close(logits(index_topk=prompt), dense, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits(index_topk=2), dense, rtol=1e-3, atol=1e-3)


def test_profile_refuses_an_unbuildable_layer_before_measuring_anything(tmp_path, capsys):
    config = TINY_QWEN3_NEXT | {"linear_num_value_heads": 3}  # not a multiple of 2 key heads
    model = write_json(tmp_path / "odd" / "config.json", config)
    assert run_cli("profile", "--model", str(model), "--device", "cpu") == 2
    err = capsys.readouterr().err
    assert "measuring" not in err and err.count("\n") == 1
    assert err.startswith("error: model 'odd': the reference transformer cannot build its "
                          "gated_deltanet/moe4x2 layers: 3 value heads are not a multiple of 2")
