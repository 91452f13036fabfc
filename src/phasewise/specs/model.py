"""The architecture of a decoder-only model as a sequence of layers, each with its own token
mixer and MLP, plus the parts beside the decoder (embeddings, MTP layers, a vision tower).

Built from a Hugging Face ``config.json`` by ``catalog.hf_config``; a what-if is a
``dataclasses.replace`` of this spec. The ledger prices one layer of each distinct kind and
multiplies by its count (``layer_groups``).

A spec built with the uniform fields alone (``num_heads``, ``intermediate_size``, …) gets
its layers from them; a reader of a hybrid or NAS model gives ``layers`` explicitly and fills
the uniform fields from its attention layers. The profiler's reference transformer builds
the layers, whichever way they were given.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from phasewise.errors import InputError

# ---- token mixers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attention:
    """Softmax attention over a KV cache of ``kv_heads`` × (``head_dim`` keys, ``v_dim``
    values) per token. ``window``: a sliding window; ``chunk``: chunked local attention
    (Llama-4: a query sees the keys of its own chunk); ``gated``: an output gate projected
    beside the query (Qwen3-Next), which doubles the query projection; ``q_rank``: a
    low-rank query, hidden → q_rank, a norm, then q_rank → heads·head_dim (Step-3's
    multi-matrix factorisation attention, ``share_q_dim``)."""

    heads: int
    kv_heads: int
    head_dim: int
    value_dim: int = 0  # 0: the same as head_dim
    window: int | None = None
    chunk: int | None = None
    gated: bool = False
    q_rank: int = 0

    @property
    def v_dim(self) -> int:
        return self.value_dim or self.head_dim

    @property
    def label(self) -> str:
        if self.window:
            return f"swa{self.window}"
        return f"chunk{self.chunk}" if self.chunk else "attn"


@dataclass(frozen=True, slots=True)
class LatentAttention:
    """DeepSeek-V2/V3 multi-head latent attention; with ``index_topk`` > 0 the DeepSeek-V3.2
    sparse form, whose lightning indexer (``index_heads`` × ``index_head_dim``) scores every
    cached token and attention reads the top ``index_topk`` of them."""

    heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def label(self) -> str:
        return f"mla-top{self.index_topk}" if self.index_topk else "mla"


@dataclass(frozen=True, slots=True)
class CompressedAttention:
    """DeepSeek-V4's attention (inference/model.py, class Attention): multi-query attention
    with one shared key/value of ``head_dim`` (latent + ``rope_head_dim`` rope dims) per
    entry, a low-rank query (``q_lora_rank``) and a grouped low-rank output projection
    (``o_groups`` groups of heads, each projected to ``o_lora_rank``). Every layer attends
    to a raw sliding ``window`` of recent tokens; with ``compress_ratio`` r > 0 also to a
    cache of one compressed entry per r tokens: all of them (HCA, r = 128), or, at r = 4
    (CSA), the ``index_topk`` a lightning indexer (``index_heads`` × ``index_head_dim``,
    over its own compressed keys) selects."""

    heads: int
    head_dim: int
    rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window: int
    compress_ratio: int = 0
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def sparse(self) -> bool:
        """CSA: compressed entries chosen by the indexer (the reference builds an Indexer
        exactly when compress_ratio == 4)."""
        return self.compress_ratio == CSA_COMPRESS_RATIO and self.index_topk > 0

    @property
    def overlap(self) -> bool:
        """The ratio-4 compressor pools overlapping windows of 2r tokens (Compressor.overlap),
        so its projections are twice as wide."""
        return self.compress_ratio == CSA_COMPRESS_RATIO

    @property
    def label(self) -> str:
        if not self.compress_ratio:
            return f"swa{self.window}"
        if self.sparse:
            return f"csa{self.compress_ratio}-top{self.index_topk}"
        return f"hca{self.compress_ratio}"


# DeepSeek-V4 inference/model.py: Compressor.overlap = compress_ratio == 4 and
# Attention builds its Indexer only when compress_ratio == 4.
CSA_COMPRESS_RATIO = 4


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5) and Kimi Delta Attention: a fixed matrix state of
    ``value_heads`` × ``key_head_dim`` × ``value_head_dim`` per sequence, updated once per
    token, and a short causal convolution over q, k and v."""

    key_heads: int
    value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    variant: str = "gated_deltanet"  # or "kda"

    @property
    def label(self) -> str:
        return self.variant


@dataclass(frozen=True, slots=True)
class Mamba2:
    """A Mamba-2 state-space mixer (Dao & Gu 2024): ``heads`` × ``head_dim`` channels, a
    state of ``state_size`` per channel, ``groups`` shared B/C projections and a causal
    convolution of ``conv_kernel`` taps."""

    heads: int
    head_dim: int
    state_size: int
    groups: int
    conv_kernel: int

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def label(self) -> str:
        return "mamba2"


@dataclass(frozen=True, slots=True)
class Mamba1:
    """A Mamba (selective SSM, Gu & Dao 2023) mixer: ``inner`` channels, a state of
    ``state_size`` per channel, a causal convolution of ``conv_kernel`` taps and a low-rank
    time step of ``dt_rank``; ``dt_norms``: RMSNorms over dt, B and C (Jamba's mixer)."""

    inner: int
    state_size: int
    conv_kernel: int
    dt_rank: int
    dt_norms: bool = False

    @property
    def label(self) -> str:
        return "mamba1"


@dataclass(frozen=True, slots=True)
class ShortConv:
    """LFM2's gated short convolution: in_proj to (B, C, x) of ``width`` each, a depthwise
    causal conv of ``kernel`` taps over B·x, C gating, out_proj; a state of kernel−1 inputs."""

    width: int
    kernel: int

    @property
    def label(self) -> str:
        return "shortconv"


@dataclass(frozen=True, slots=True)
class CrossAttention:
    """Cross-attention to a fixed set of image tokens (Llama-3.2-Vision's
    ``cross_attention_layers``): text tokens add nothing to its cache."""

    heads: int
    kv_heads: int
    head_dim: int

    @property
    def label(self) -> str:
        return "xattn"


@dataclass(frozen=True, slots=True)
class LinearMixer:
    """A block whose attention a NAS search replaced by one hidden×hidden linear map
    (Nemotron NAS ``replace_with_linear``)."""

    @property
    def label(self) -> str:
        return "linear"


@dataclass(frozen=True, slots=True)
class ParallelMixers:
    """Token mixers that read the same normed input side by side and add their outputs
    (Falcon-H1: attention and Mamba-2 in every layer); each part keeps its own cache."""

    parts: tuple[Attention | Mamba2, ...]

    @property
    def label(self) -> str:
        return "+".join(part.label for part in self.parts)


Mixer = (Attention | LatentAttention | CompressedAttention | LinearAttention | Mamba2 | Mamba1
         | ShortConv | CrossAttention | LinearMixer | ParallelMixers)


def projection_names(mixer: Mixer | None) -> tuple[str, ...]:
    """The module names a Hugging Face checkpoint gives a mixer's projections (the names its
    quantization config excludes or quantizes one by one): transformers' LlamaAttention and
    DeepseekV3Attention, and DeepSeek-V3.2's indexer as one part."""
    if isinstance(mixer, Attention):
        return ("q_proj", "k_proj", "v_proj", "o_proj")
    if isinstance(mixer, LatentAttention):
        query = ("q_a_proj", "q_b_proj") if mixer.q_lora_rank else ("q_proj",)
        indexer = ("indexer",) if mixer.index_topk else ()
        return (*query, "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", *indexer)
    return ()


# ---- MLPs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DenseMLP:
    """Gated (SwiGLU/GeGLU: gate, up, down) or plain (up, activation, down: GELU, relu²)."""

    width: int
    gated: bool = True

    @property
    def label(self) -> str:
        return f"mlp{self.width}"


@dataclass(frozen=True, slots=True)
class MoE:
    """Routed experts (``experts``, top ``top_k``, each ``width`` wide), shared experts of
    ``shared_width`` in all, a latent projection of ``latent_size`` that experts run in
    (Nemotron-3's latent MoE), and a dense MLP of ``dense_width`` beside the experts."""

    experts: int
    top_k: int
    width: int
    shared_width: int = 0
    gated: bool = True
    latent_size: int = 0
    dense_width: int = 0

    @property
    def label(self) -> str:
        return f"moe{self.experts}x{self.top_k}"


@dataclass(frozen=True, slots=True)
class LinearMLP:
    """An MLP a NAS search replaced by one hidden×hidden linear map."""

    @property
    def label(self) -> str:
        return "linear"


MLP = DenseMLP | MoE | LinearMLP


@dataclass(frozen=True, slots=True)
class Layer:
    """One decoder block: a token mixer and an MLP, either of which may be absent (a
    skipped block counts nothing)."""

    mixer: Mixer | None
    mlp: MLP | None

    @property
    def label(self) -> str:
        return f"{self.mixer.label if self.mixer else '-'}/{self.mlp.label if self.mlp else '-'}"


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Identical layers: the ledger prices one and multiplies by ``count``."""

    layer: Layer
    count: int

    @property
    def label(self) -> str:
        return self.layer.label

    @property
    def attention(self) -> str:
        mixer = self.layer.mixer
        return "sliding" if isinstance(mixer, Attention) and mixer.window else "full"

    @property
    def mlp(self) -> str:
        return "moe" if isinstance(self.layer.mlp, MoE) else "dense"


# ---- the checkpoint's number formats ------------------------------------------------------



@dataclass(frozen=True, slots=True)
class CheckpointFormats:
    """The weight format of each module class as the checkpoint stores it, its KV-cache
    format where it declares one, and where each came from."""

    weights: tuple[tuple[str, str], ...]  # (module class, format name)
    kv_cache: str | None = None
    method: str = ""
    source: str = ""
    # Attention projections stored otherwise than their class (projection name, format):
    # a checkpoint that excludes q_a/q_b/kv_a/kv_b from quantization but not o_proj.
    projections: tuple[tuple[str, str], ...] = ()

    def format_of(self, module_class: str) -> str | None:
        return dict(self.weights).get(module_class)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    max_context: int = 4096
    model_type: str = ""
    # Not needed by the arithmetic; the reference transformer in measure/ uses them.
    rope_theta: float = 10000.0
    rope_scaling: str = ""  # rope_type of rope_scaling / rope_parameters ("llama3", "yarn", …)
    norm_eps: float = 1e-5
    hidden_act: str = "silu"
    # Uniform description (one geometry for every layer), read when ``layers`` is empty.
    layer_types: tuple[str, ...] = ()  # "full" | "sliding" per layer; empty: all full
    sliding_window: int | None = None
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[bool, ...] = ()
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Per-layer description; ``layers`` derives it from the uniform fields when not given.
    layer_specs: tuple[Layer, ...] = ()
    # Beside the decoder: multi-token-prediction layers (each also has its own norms and a
    # 2h→h projection, DeepSeek-V3 §2.2), and a vision tower's parameter count.
    mtp_layers: tuple[Layer, ...] = ()
    vision_params: float = 0.0
    # Hyper-connections (DeepSeek-V4's mHC, ``hc_mult``): the residual stream is this many
    # copies of the hidden state, mixed before and after every sub-block; 0 or 1: a plain one.
    hyper_connections: int = 0
    checkpoint: CheckpointFormats | None = None
    # What the config reader noticed and could not price (shown as warnings).
    notes: tuple[str, ...] = ()
    _layers: tuple[Layer, ...] = field(default=(), init=False, repr=False, compare=False)
    _groups: tuple[LayerGroup, ...] = field(default=(), init=False, repr=False, compare=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        positive: tuple[str, ...] = ("hidden_size", "num_layers", "vocab_size")
        if not self.layer_specs:
            positive += ("num_heads", "num_kv_heads", "head_dim")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"model '{self.name}': {name} must be a positive whole number, "
                                 f"got {value!r}; check the config.json.")
        layers = self.layer_specs
        if not layers:
            self._check_uniform()
            layers = uniform_layers(self)
        object.__setattr__(self, "_layers", layers)
        if len(self.layers) != self.num_layers:
            raise InputError(f"model '{self.name}': {len(self.layers)} layer descriptions for "
                             f"{self.num_layers} layers.")
        for layer in (*self.layers, *self.mtp_layers):
            _check_layer(self.name, layer)
        object.__setattr__(self, "_groups", _group(self.layers))

    def _check_uniform(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise InputError(f"model '{self.name}': {self.num_heads} attention heads are not "
                             f"a multiple of {self.num_kv_heads} KV heads.")
        for name, per_layer in (("layer_types", self.layer_types), ("moe_layers", self.moe_layers)):
            if per_layer and len(per_layer) != self.num_layers:
                raise InputError(f"model '{self.name}': {name} lists {len(per_layer)} layers "
                                 f"but the model has {self.num_layers}.")
        if self.num_experts and not (0 < self.experts_per_token <= self.num_experts):
            raise InputError(f"model '{self.name}': experts per token must be in "
                             f"1..{self.num_experts}, got {self.experts_per_token}.")
        if "sliding" in self.layer_types and not self.sliding_window:
            raise InputError(f"model '{self.name}': sliding layers need a sliding_window.")

    def __hash__(self) -> int:
        """The hash of the compared fields, computed once: the ledger's cache looks a model
        up on every step, and a per-layer spec is long to hash."""
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(tuple(
                getattr(self, f.name) for f in fields(self) if f.compare)))
        return self._hash  # type: ignore[return-value]

    # ---- views over the layers ----

    @property
    def layers(self) -> tuple[Layer, ...]:
        return self._layers

    @property
    def layer_groups(self) -> tuple[LayerGroup, ...]:
        return self._groups

    @property
    def mixers(self) -> tuple[Mixer, ...]:
        """The distinct token mixers, one per layer group, parallel parts each on its own."""
        mixers: list[Mixer] = []
        for group in self._groups:
            mixer = group.layer.mixer
            if isinstance(mixer, ParallelMixers):
                mixers += mixer.parts
            elif mixer is not None:
                mixers.append(mixer)
        return tuple(mixers)

    @property
    def is_moe(self) -> bool:
        return any(isinstance(g.layer.mlp, MoE) for g in self._groups)

    @property
    def is_mla(self) -> bool:
        return any(isinstance(m, LatentAttention) for m in self.mixers)

    @property
    def is_hybrid(self) -> bool:
        """Some layers hold a fixed recurrent state instead of a KV cache."""
        return any(isinstance(m, LinearAttention | Mamba2 | Mamba1 | ShortConv)
                   for m in self.mixers)

    @property
    def is_sliding_any(self) -> bool:
        return "sliding" in self.layer_types

    @property
    def qk_head_dim(self) -> int:
        """Query/key width per head: nope + rope parts for MLA, head_dim otherwise."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.kv_lora_rank else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.kv_lora_rank else self.head_dim

    def layer_attention(self, index: int) -> str:
        return self.layer_types[index] if self.layer_types else "full"

    def layer_is_moe(self, index: int) -> bool:
        return isinstance(self.layers[index].mlp, MoE)


def uniform_layers(model: ModelSpec) -> tuple[Layer, ...]:
    """The layers of a model described by its uniform fields."""
    layers = []
    for index in range(model.num_layers):
        window = model.sliding_window if model.layer_attention(index) == "sliding" else None
        mixer: Mixer
        if model.kv_lora_rank:
            mixer = LatentAttention(model.num_heads, model.q_lora_rank, model.kv_lora_rank,
                                    model.qk_rope_head_dim, model.qk_nope_head_dim,
                                    model.v_head_dim)
        else:
            mixer = Attention(model.num_heads, model.num_kv_heads, model.head_dim, window=window)
        sparse = model.num_experts and (model.moe_layers[index] if model.moe_layers else True)
        mlp: MLP = (MoE(model.num_experts, model.experts_per_token, model.moe_intermediate_size,
                        model.shared_expert_intermediate_size, model.gated_mlp)
                    if sparse else DenseMLP(model.intermediate_size, model.gated_mlp))
        layers.append(Layer(mixer, mlp))
    return tuple(layers)


def _group(layers: tuple[Layer, ...]) -> tuple[LayerGroup, ...]:
    counts: dict[Layer, int] = {}
    for layer in layers:
        counts[layer] = counts.get(layer, 0) + 1
    return tuple(LayerGroup(layer, count) for layer, count in counts.items())


def _check_layer(name: str, layer: Layer) -> None:
    """Every width of a layer is a positive whole number; heads divide as attention needs."""
    if isinstance(layer.mixer, ParallelMixers):
        if not layer.mixer.parts:
            raise InputError(f"model '{name}': a parallel mixer needs at least one part.")
        for part in layer.mixer.parts:
            _check_layer(name, Layer(part, layer.mlp))
        return
    for component in (layer.mixer, layer.mlp):
        if component is None:
            continue
        for key in component.__dataclass_fields__:
            value = getattr(component, key)
            if isinstance(value, bool) or value is None or isinstance(value, str):
                continue
            if not isinstance(value, int) or value < 0:
                raise InputError(f"model '{name}': {type(component).__name__}.{key} must be a "
                                 f"non-negative whole number, got {value!r}; check the config.json.")
    mixer = layer.mixer
    if isinstance(mixer, Attention):
        if min(mixer.heads, mixer.kv_heads, mixer.head_dim) <= 0 or mixer.heads % mixer.kv_heads:
            raise InputError(f"model '{name}': attention with {mixer.heads} heads, "
                             f"{mixer.kv_heads} KV heads and head size {mixer.head_dim} is not "
                             "possible (heads must be a positive multiple of KV heads).")
    if isinstance(mixer, CompressedAttention):
        _check_compressed(name, mixer)
    if isinstance(layer.mlp, DenseMLP) and layer.mlp.width < 1:
        raise InputError(f"model '{name}': a dense MLP of width {layer.mlp.width} is not "
                         "possible; does the config.json lack intermediate_size?")
    if isinstance(layer.mlp, MoE) and (layer.mlp.width < 1 or layer.mlp.experts < 1):
        raise InputError(f"model '{name}': a MoE of {layer.mlp.experts} experts "
                         f"{layer.mlp.width} wide is not possible; check the config.json's "
                         "expert count and moe_intermediate_size.")
    if isinstance(layer.mlp, MoE) and not 0 < layer.mlp.top_k <= layer.mlp.experts:
        raise InputError(f"model '{name}': experts per token must be in 1..{layer.mlp.experts}, "
                         f"got {layer.mlp.top_k}.")


def _check_compressed(name: str, mixer: CompressedAttention) -> None:
    """Groups of whole heads, rope dims inside the head, a window, and the indexer's sizes
    where the layer selects entries."""
    problem = ""
    if min(mixer.heads, mixer.head_dim, mixer.o_groups, mixer.o_lora_rank, mixer.window) <= 0:
        problem = "heads, head_dim, o_groups, o_lora_rank and the window must be positive"
    elif mixer.heads % mixer.o_groups:
        problem = f"{mixer.heads} heads do not split into {mixer.o_groups} output groups"
    elif mixer.rope_head_dim >= mixer.head_dim:
        problem = f"rope dims {mixer.rope_head_dim} do not fit in head_dim {mixer.head_dim}"
    elif mixer.sparse and min(mixer.index_heads, mixer.index_head_dim) <= 0:
        problem = "a ratio-4 layer with index_topk needs index_n_heads and index_head_dim"
    if problem:
        raise InputError(f"model '{name}': compressed attention: {problem}; check the "
                         "config.json.")
