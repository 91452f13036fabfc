"""Real weights for the reference transformer: a safetensors folder in Hugging Face layout,
or a GGUF file dequantized with the ``gguf`` package.

Both go through one table, ``checkpoint_layout``: for every parameter of the reference
model, the checkpoint tensors (Hugging Face names and shapes) that are concatenated, in
order, to make it. Shapes are checked against the config before anything is loaded, in
model order, so an error names the first tensor that disagrees.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phasewise.errors import InputError
from phasewise.specs import ModelSpec

# Checkpoint entries that are not parameters of the model (buffers some exporters save).
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


@dataclass(frozen=True, slots=True)
class Part:
    name: str  # Hugging Face tensor name
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Slot:
    """One reference parameter (or, with ``row``, one row of a stacked one: a routed
    expert's weights) and the checkpoint tensors concatenated (dim 0) to make it."""

    target: str
    parts: tuple[Part, ...]
    row: int | None = None


def checkpoint_layout(spec: ModelSpec) -> list[Slot]:
    """The Hugging Face Llama layout (and DeepSeek's MLA and Qwen/DeepSeek MoE names) mapped
    onto the reference transformer's fused parameters, in model order."""
    from phasewise.measure.reference import QKV_BIAS_MODEL_TYPES

    h = spec.hidden_size
    slots = [_one("embed.weight", "model.embed_tokens.weight", (spec.vocab_size, h))]
    for i in range(spec.num_layers):
        hf, ours = f"model.layers.{i}", f"layers.{i}"
        slots.append(_one(f"{ours}.attn_norm.weight", f"{hf}.input_layernorm.weight", (h,)))
        slots += _mla_slots(spec, hf, ours) if spec.is_mla else _attention_slots(
            spec, hf, ours, bias=spec.model_type in QKV_BIAS_MODEL_TYPES)
        slots.append(_one(f"{ours}.mlp_norm.weight", f"{hf}.post_attention_layernorm.weight",
                          (h,)))
        if spec.layer_is_moe(i):
            slots += _moe_slots(spec, hf, ours)
        else:
            slots += _mlp_slots(spec, f"{hf}.mlp", f"{ours}.mlp", spec.intermediate_size)
    slots.append(_one("norm.weight", "model.norm.weight", (h,)))
    if not spec.tie_word_embeddings:
        slots.append(_one("lm_head.weight", "lm_head.weight", (spec.vocab_size, h)))
    return slots


def _one(target: str, name: str, shape: tuple[int, ...]) -> Slot:
    return Slot(target, (Part(name, shape),))


def _attention_slots(spec: ModelSpec, hf: str, ours: str, *, bias: bool) -> list[Slot]:
    h, d, attn = spec.hidden_size, spec.head_dim, f"{hf}.self_attn"
    widths = {"q": spec.num_heads * d, "k": spec.num_kv_heads * d, "v": spec.num_kv_heads * d}
    slots = [Slot(f"{ours}.attn.wqkv.weight",
                  tuple(Part(f"{attn}.{p}_proj.weight", (w, h)) for p, w in widths.items()))]
    if bias:
        slots.append(Slot(f"{ours}.attn.wqkv.bias",
                          tuple(Part(f"{attn}.{p}_proj.bias", (w,)) for p, w in widths.items())))
    slots.append(_one(f"{ours}.attn.wo.weight", f"{attn}.o_proj.weight", (h, spec.num_heads * d)))
    return slots


def _mla_slots(spec: ModelSpec, hf: str, ours: str) -> list[Slot]:
    """DeepSeek-V2/V3 names: q_a_proj, q_a_layernorm, q_b_proj (q_proj without a q LoRA),
    kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj."""
    h, heads, lora, q_lora = spec.hidden_size, spec.num_heads, spec.kv_lora_rank, spec.q_lora_rank
    attn, mine = f"{hf}.self_attn", f"{ours}.attn"
    kv_a = Part(f"{attn}.kv_a_proj_with_mqa.weight", (lora + spec.qk_rope_head_dim, h))
    q_out = heads * spec.qk_head_dim
    if q_lora:
        q_a = Part(f"{attn}.q_a_proj.weight", (q_lora, h))
        slots = [Slot(f"{mine}.wqkv_a.weight", (q_a, kv_a)),
                 _one(f"{mine}.q_a_norm.weight", f"{attn}.q_a_layernorm.weight", (q_lora,)),
                 _one(f"{mine}.wq_b.weight", f"{attn}.q_b_proj.weight", (q_out, q_lora))]
    else:
        slots = [Slot(f"{mine}.wqkv_a.weight", (kv_a,)),
                 _one(f"{mine}.wq_b.weight", f"{attn}.q_proj.weight", (q_out, h))]
    kv_b_rows = heads * (spec.qk_nope_head_dim + spec.v_head_dim)
    return slots + [
        _one(f"{mine}.kv_a_norm.weight", f"{attn}.kv_a_layernorm.weight", (lora,)),
        _one(f"{mine}.wkv_b.weight", f"{attn}.kv_b_proj.weight", (kv_b_rows, lora)),
        _one(f"{mine}.wo.weight", f"{attn}.o_proj.weight", (h, heads * spec.v_head_dim)),
    ]


def _mlp_slots(spec: ModelSpec, hf: str, ours: str, width: int, *,
               expert: int | None = None) -> list[Slot]:
    """gate_proj and up_proj fuse into one GEMM; an ungated MLP has up_proj alone. A routed
    expert's go into row ``expert`` of the MoE layer's stacked w_up and w_down."""
    h = spec.hidden_size
    up = (("gate_proj", "up_proj") if spec.gated_mlp else ("up_proj",))
    suffix = ".weight" if expert is None else ""  # a stacked parameter has no .weight
    return [Slot(f"{ours}.w_up{suffix}", tuple(Part(f"{hf}.{p}.weight", (width, h)) for p in up),
                 expert),
            Slot(f"{ours}.w_down{suffix}", (Part(f"{hf}.down_proj.weight", (h, width)),), expert)]


def _moe_slots(spec: ModelSpec, hf: str, ours: str) -> list[Slot]:
    """Router mlp.gate, experts mlp.experts.{j}.*, shared experts mlp.shared_experts.*
    (DeepSeek and Qwen3-MoE names)."""
    slots = [_one(f"{ours}.mlp.router.weight", f"{hf}.mlp.gate.weight",
                  (spec.num_experts, spec.hidden_size))]
    for j in range(spec.num_experts):
        slots += _mlp_slots(spec, f"{hf}.mlp.experts.{j}", f"{ours}.mlp",
                            spec.moe_intermediate_size, expert=j)
    if spec.shared_expert_intermediate_size:
        slots += _mlp_slots(spec, f"{hf}.mlp.shared_experts", f"{ours}.mlp.shared",
                            spec.shared_expert_intermediate_size)
    return slots


def check_shapes(spec: ModelSpec, shapes: Mapping[str, tuple[int, ...]], origin: str) -> None:
    """Every tensor the layout needs is there with the config's shape, and nothing else is;
    the error names the first tensor (in model order) that disagrees."""
    layout = checkpoint_layout(spec)
    for slot in layout:
        for part in slot.parts:
            if part.name not in shapes:
                raise InputError(f"{origin}: tensor {part.name} is missing; the config of "
                                 f"{spec.name} needs it with shape {list(part.shape)}.")
            found = tuple(shapes[part.name])
            if found != part.shape:
                raise InputError(f"{origin}: tensor {part.name} has shape {list(found)} but the "
                                 f"config of {spec.name} gives {list(part.shape)}; the weights "
                                 "and the config.json are from different models.")
    known = {part.name for slot in layout for part in slot.parts}
    if spec.tie_word_embeddings:
        known.add("lm_head.weight")  # some exporters save the tied head as well
    for name in shapes:
        if name not in known and not name.endswith(IGNORED_SUFFIXES):
            raise InputError(f"{origin}: tensor {name} has no place in the reference "
                             f"transformer for {spec.name} (Hugging Face Llama layout); the "
                             "architecture is not one phasewise can load.")


def load_into(model: Any, spec: ModelSpec, get: Callable[[str], Any]) -> None:
    """Concatenate each slot's tensors (fetched by name with ``get``) into the model."""
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for slot in checkpoint_layout(spec):
            value = torch.cat([torch.as_tensor(get(p.name)) for p in slot.parts], dim=0)
            target = params[slot.target]
            (target if slot.row is None else target[slot.row]).copy_(value)
    if spec.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight


def load_safetensors_folder(model: Any, spec: ModelSpec, folder: str | Path) -> None:
    """Weights from every ``*.safetensors`` file in ``folder`` (one file or shards)."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no *.safetensors files; give a folder holding a model's "
                         "weights in Hugging Face layout, or a .gguf file.")
    where: dict[str, Path] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                where[name] = path
                shapes[name] = tuple(handle.get_slice(name).get_shape())
    check_shapes(spec, shapes, str(folder))
    handles = {path: safe_open(str(path), framework="pt") for path in files}
    load_into(model, spec, lambda name: handles[where[name]].get_tensor(name))
