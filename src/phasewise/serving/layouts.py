"""The layouts serving engines run, as the ledger's ``Parallelism``.

Engines describe a replica by attention tensor parallelism T, attention data
parallelism D (DeepSeek-style "DP attention": each of D ranks holds the whole attention
and its own sequences), and the MoE layers' tensor (mt) and expert (me) parallelism,
with mt · me = T · D devices. The ledger splits attention ``tp`` ways in ``ep / tp`` data
groups and experts ``ep`` ways, each expert's width ``tp / ep`` ways when tp > ep
(``specs.Parallelism``), so:

- D = 1: Parallelism(tp=T, ep=me), experts TP mt = T / me inside EP me;
- D > 1, mt = 1: Parallelism(tp=T, ep=T · D), attention DP D with EP across every device;
- D > 1, mt > 1: Parallelism(tp=T, ep=me, dp=D), expert TP under DP attention (SGLang's
  ``--enable-dp-attention`` without EP, vLLM's ``--data-parallel-size`` without
  ``--enable-expert-parallel``): the MoE runs TP mt, EP me over the D · T ranks, which
  gather their tokens before it and reduce-scatter after it.
"""

from __future__ import annotations

from phasewise.errors import InputError
from phasewise.specs import Parallelism


def engine_layout(*, tp: int, attention_dp: int = 1, moe_tp: int | None = None,
                  moe_ep: int | None = None, pp: int = 1, is_moe: bool = True) -> Parallelism:
    """The ledger's parallelism for an engine's (T, D, mt, me) layout (module docstring)."""
    devices = tp * attention_dp
    if not is_moe:
        if attention_dp > 1:
            raise InputError(f"attention DP {attention_dp} on a dense model is {attention_dp} "
                             "replicas; give --replicas instead.")
        return Parallelism(tp, pp, 1)
    me = moe_ep or (devices // (moe_tp or 1))
    mt = moe_tp or devices // me
    if mt * me != devices:
        raise InputError(f"MoE TP {mt} × EP {me} must equal the replica's {devices} devices "
                         f"(attention TP {tp} × DP {attention_dp}); fix --ep or --attention-dp.")
    if attention_dp == 1:
        return Parallelism(tp, pp, me)
    if mt > 1:
        return Parallelism(tp, pp, me, attention_dp)
    return Parallelism(tp, pp, devices)
