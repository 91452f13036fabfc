"""Search over hardware, parallelism, formats, batching and pool layouts under SLOs and
cost: an analytic screen of every candidate, then the serving simulator on the best."""

from phasewise.plan.executors import LocalPool, RayExecutor, Serial, executor
from phasewise.plan.screen import Problem
from phasewise.plan.search import Study, plan
from phasewise.plan.space import Load, RequestClass, SearchSpace, Target, Traffic
from phasewise.plan.types import PlanReport

__all__ = ["Load", "LocalPool", "PlanReport", "Problem", "RayExecutor", "RequestClass",
           "SearchSpace", "Serial", "Study", "Target", "Traffic", "executor", "plan"]
