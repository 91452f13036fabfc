"""What is asked of the model (lengths, batch) and how it is spread over devices."""

from __future__ import annotations

from dataclasses import dataclass

from phasewise.errors import InputError

# As long as the longest published context window (Llama 4 Scout: 10M tokens); a length
# past this is a typo, not a workload.
ABSURD_TOKENS = 10_000_000


@dataclass(frozen=True, slots=True)
class Workload:
    """One batch of identical requests: ``batch_size`` prompts of ``isl`` tokens, each
    generating ``osl`` tokens (ISL/OSL as serving benchmarks name them)."""

    isl: int = 2048
    osl: int = 256
    batch_size: int = 1

    def __post_init__(self) -> None:
        for name in ("isl", "osl", "batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"{name} must be a positive whole number, got {value!r}.")
            if value > ABSURD_TOKENS:
                raise InputError(f"{name} {value:,} is beyond any real workload (limit "
                                 f"{ABSURD_TOKENS:,}); check the number.")

    @property
    def max_context(self) -> int:
        """Tokens held in the cache at the last decode step."""
        return self.isl + self.osl - 1


@dataclass(frozen=True, slots=True)
class Parallelism:
    """Tensor (tp), pipeline (pp), expert (ep) and attention data (dp) parallel degrees of
    one replica.

    With ``dp`` = 1, attention and dense layers are split tp ways and data-parallel over
    ep // tp groups when ep > tp; experts are split ep ways, each expert's width tp / ep ways
    when tp > ep; the MoE exchanges tokens by all-to-all. A replica holds pp * max(tp, ep)
    devices.

    ``dp`` > 1 states the attention data parallelism apart: a replica holds pp * tp * dp
    devices, each of the dp ranks runs attention tp-way on its own sequences, and the MoE
    layers run over the whole group of tp * dp ranks with experts split ep ways and each
    expert's width (tp * dp) / ep ways. The tokens of every rank are gathered before the
    experts and reduce-scattered after them: SGLang's DP attention with MoE TP
    (``--enable-dp-attention`` without ``--ep-size``, layers/dp_attention.py dp_gather /
    dp_scatter), vLLM's data parallelism without ``--enable-expert-parallel`` (the MoE's
    TP group flattens DP × TP, FusedMoEParallelConfig; the ``allgather_reducescatter``
    exchange, docs/serving/expert_parallel_deployment.md).
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{name} must be a whole number of at least 1, got {value!r}.")
        if self.dp > 1:
            group = self.tp * self.dp
            if group % self.ep:
                raise InputError(f"ep {self.ep} must divide the {group} devices of attention "
                                 f"tp {self.tp} × dp {self.dp}.")
            return
        big, small = max(self.tp, self.ep), min(self.tp, self.ep)
        if big % small:
            raise InputError(f"ep {self.ep} and tp {self.tp}: one must divide the other.")

    @property
    def devices(self) -> int:
        return self.pp * max(self.tp * self.dp, self.ep)

    @property
    def attention_dp(self) -> int:
        """Data-parallel groups for attention and dense layers (``dp``, or ep // tp)."""
        return self.dp if self.dp > 1 else max(1, self.ep // self.tp)

    @property
    def moe_tp(self) -> int:
        """Ways each routed expert's width is split: the MoE group's devices over ep."""
        return max(1, self.tp * self.attention_dp // self.ep)

    @property
    def gathers_moe_tokens(self) -> bool:
        """The MoE group gathers every rank's tokens and reduce-scatters its output (``dp``
        given apart) rather than exchanging them all-to-all."""
        return self.dp > 1
