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
    """Tensor (tp), pipeline (pp) and expert (ep) parallel degrees of one replica.

    Attention and dense layers are split tp ways and data-parallel over ep // tp groups
    when ep > tp; experts are split ep ways. A replica holds pp * max(tp, ep) devices.
    """

    tp: int = 1
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"{name} must be a whole number of at least 1, got {value!r}.")
        big, small = max(self.tp, self.ep), min(self.tp, self.ep)
        if big % small:
            raise InputError(f"ep {self.ep} and tp {self.tp}: one must divide the other.")

    @property
    def devices(self) -> int:
        return self.pp * max(self.tp, self.ep)

    @property
    def attention_dp(self) -> int:
        """Data-parallel groups for attention and dense layers (1 unless ep > tp)."""
        return max(1, self.ep // self.tp)
