"""Request-level discrete-event simulation of an inference server (DESIGN.md, serving/)."""

from phasewise.serving.metrics import Slo, request_metrics, summarize
from phasewise.serving.requests import ClosedLoop, Requests, load_trace, parse_lengths, synthetic
from phasewise.serving.schedulers import SCHEDULERS
from phasewise.serving.simulator import Pool, Server, Simulation, simulate

__all__ = ["SCHEDULERS", "ClosedLoop", "Pool", "Requests", "Server", "Simulation", "Slo",
           "load_trace", "parse_lengths", "request_metrics", "simulate", "summarize", "synthetic"]
