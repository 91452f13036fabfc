"""Replicas behind a load balancer, the events that drive them, and the KV link between
the prefill and decode pools of a disaggregated server.

Every event's ``handle`` returns its follow-up events. Arrivals route a request and
return the next arrival; a step's end applies the step and returns the next step's end;
a KV transfer's end hands the sequence to its decode replica.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from phasewise.errors import InputError, nearest_hint
from phasewise.serving import engine
from phasewise.serving.replica import Plan, Replica, Seq
from phasewise.serving.requests import ClosedLoop, Requests
from phasewise.specs import Link

# ---------------------------------------------------------------- load balancers


class RoundRobin:
    """Replicas in turn, whatever their load."""

    def __init__(self) -> None:
        self._next = 0

    def pick(self, pool: list[Replica]) -> Replica:
        replica = pool[self._next % len(pool)]
        self._next += 1
        return replica


class LeastOutstanding:
    """The replica with the fewest requests routed to it and not yet done; ties go to the
    lowest index."""

    def pick(self, pool: list[Replica]) -> Replica:
        return min(pool, key=lambda r: (r.outstanding, r.index))


LOAD_BALANCERS: dict[str, Callable[[], RoundRobin | LeastOutstanding]] = {
    "round-robin": RoundRobin,
    "least-outstanding": LeastOutstanding,
}


def load_balancer(name: str) -> RoundRobin | LeastOutstanding:
    if name not in LOAD_BALANCERS:
        raise InputError(f"unknown load balancer '{name}'.{nearest_hint(name, list(LOAD_BALANCERS))}"
                         f" Known: {', '.join(LOAD_BALANCERS)}.")
    return LOAD_BALANCERS[name]()


# ---------------------------------------------------------------- events


class Arrival:
    __slots__ = ("time_s", "cluster", "seq")
    priority = engine.ARRIVAL

    def __init__(self, time_s: float, cluster: Cluster, seq: Seq) -> None:
        self.time_s, self.cluster, self.seq = time_s, cluster, seq

    def handle(self) -> list:
        return self.cluster.arrive(self.seq, self.time_s)


class StepEnd:
    __slots__ = ("time_s", "replica", "plan")
    priority = engine.STEP_END

    def __init__(self, time_s: float, replica: Replica, plan: Plan) -> None:
        self.time_s, self.replica, self.plan = time_s, replica, plan

    def handle(self) -> list:
        out: list = []
        self.replica.end_step(self.plan, self.time_s, out)
        return out


class Wake:
    """An idle replica has work: plan a step now (after this instant's arrivals)."""

    __slots__ = ("time_s", "replica")
    priority = engine.WAKE

    def __init__(self, time_s: float, replica: Replica) -> None:
        self.time_s, self.replica = time_s, replica

    def handle(self) -> list:
        out: list = []
        self.replica.start_step(self.time_s, out)
        return out


class KVTransferred:
    __slots__ = ("time_s", "seq", "dest")
    priority = engine.KV_TRANSFERRED

    def __init__(self, time_s: float, seq: Seq, dest: Replica) -> None:
        self.time_s, self.seq, self.dest = time_s, seq, dest

    def handle(self) -> list:
        out: list = []
        seq, dest = self.seq, self.dest
        seq.transfer_s += self.time_s
        seq.pieces.append(self.time_s)  # the first token streams from the decode replica
        seq.holder().release(seq, self.time_s, out)
        seq.source = None
        dest.pulling -= 1
        dest.pulled.append(seq)
        dest.poke(self.time_s, out)
        return out


# ---------------------------------------------------------------- the cluster


class Cluster:
    """The front pool (colocated replicas, or the prefill pool) and, when disaggregated,
    the decode pool; requests enter through ``arrive`` and leave through ``done``."""

    source: Source  # where requests come from: set by the Source built on this cluster

    def __init__(self, front: list[Replica], decode_pool: list[Replica], balancer_name: str,
                 *, link: Link | None = None, kv_bytes_per_token: float = 0.0) -> None:
        self.front, self.decode_pool = front, decode_pool
        self.balancer = load_balancer(balancer_name)
        self.router = load_balancer(balancer_name)
        self.link, self.kv_bytes_per_token = link, kv_bytes_per_token
        self.transfers: list[tuple[float, float, int, int, int]] = []  # start, s, src, dst, id
        self.finished: list[Seq] = []

    @property
    def replicas(self) -> list[Replica]:
        return self.front + self.decode_pool

    def arrive(self, seq: Seq, now_s: float) -> list:
        out: list = []
        replica = self.balancer.pick(self.front)
        replica.outstanding += 1
        replica.waiting.append(seq)
        replica.poke(now_s, out)
        self.source.after_arrival(seq, out)
        return out

    # hooks the replicas call
    def wake(self, now_s: float, replica: Replica) -> Wake:
        return Wake(now_s, replica)

    def step_end(self, time_s: float, replica: Replica, plan: Plan) -> StepEnd:
        return StepEnd(time_s, replica, plan)

    def done(self, seq: Seq, now_s: float, replica: Replica, out: list) -> None:
        seq.done_s = now_s
        replica.outstanding -= 1
        self.finished.append(seq)
        self.source.after_done(seq, now_s, out)

    def prefilled(self, seq: Seq, now_s: float, replica: Replica, out: list) -> None:
        """Disaggregated: route a prefilled sequence to a decode replica, which pulls its KV
        when it has room. The response streams from the decode replica (as with vLLM's
        disaggregated-prefill proxy and NVIDIA Dynamo), so the first token reaches the user
        when the KV lands there: TTFT includes the hand-off, as in the estimate."""
        replica.outstanding -= 1
        seq.transfer_s = -now_s  # becomes the wait from prefill end to KV arrival
        dest = self.router.pick(self.decode_pool)
        dest.outstanding += 1
        seq.source = replica
        dest.to_pull.append(seq)
        dest.poke(now_s, out)

    def transfer(self, seq: Seq, dest: Replica) -> KVTransferred:
        """KV of the prompt moves over the prefill replica's link, one transfer after
        another: latency + bytes ÷ (link bandwidth × devices sending in parallel)."""
        src, now_s, link = seq.holder(), dest.now_s, self.link
        if link is None:
            raise RuntimeError("a disaggregated cluster moves KV over a link; none was given")
        tokens = seq.isl + seq.generated - 1
        lanes = min(src.devices, dest.devices)  # each device sends its shard on its own NIC
        duration_s = link.latency_s + tokens * self.kv_bytes_per_token / (
            link.bandwidth_bytes_per_s * lanes)
        start_s = max(now_s, src.link_free_s)
        src.link_free_s = start_s + duration_s
        self.transfers.append((start_s, duration_s, src.index, dest.index, seq.id))
        return KVTransferred(src.link_free_s, seq, dest)


# ---------------------------------------------------------------- request sources


class Source:
    """Where requests come from: an open loop (times fixed in advance) or a closed loop
    (each client's next request follows its last answer)."""

    def __init__(self, cluster: Cluster, requests: Requests, closed: ClosedLoop | None) -> None:
        self.cluster, self.closed = cluster, closed
        self.isl = requests.input_tokens.tolist()
        self.osl = requests.output_tokens.tolist()
        # an open loop's arrival times (a closed loop's follow its answers)
        self.arrival: list[float] = requests.arrival_s.tolist() \
            if requests.arrival_s is not None else []
        n = len(self.isl)
        self.prefix = requests.prefix_tokens.tolist() if requests.prefix_tokens is not None \
            else [0] * n
        self.prefix_id = requests.prefix_id.tolist() if requests.prefix_id is not None \
            else [-1] * n
        self.issued = 0
        self.total = n
        cluster.source = self

    def _seq(self, time_s: float, client: int = -1) -> Seq:
        i = self.issued
        self.issued += 1
        return Seq(i, time_s, self.isl[i], self.osl[i], prefix_tokens=self.prefix[i],
                   prefix_id=self.prefix_id[i], client=client)

    def first_events(self) -> Iterable:
        if self.closed is None:
            return [Arrival(self.arrival[0], self.cluster, self._seq(self.arrival[0]))]
        clients = min(self.closed.clients, self.total)
        return [Arrival(self.closed.start_s(c), self.cluster, self._seq(self.closed.start_s(c), c))
                for c in range(clients)]

    def after_arrival(self, seq: Seq, out: list) -> None:
        if self.closed is None and self.issued < self.total:
            t = self.arrival[self.issued]
            out.append(Arrival(t, self.cluster, self._seq(t)))

    def after_done(self, seq: Seq, now_s: float, out: list) -> None:
        if self.closed is not None and self.issued < self.total:
            t = now_s + self.closed.think_time_s
            out.append(Arrival(t, self.cluster, self._seq(t, seq.client)))
