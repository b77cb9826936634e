"""What the report and the cluster analysis keep of one rank once its knowledge bases have run.

Built on the worker that read the rank (``advisor.pipeline.executor``): small, no op rows, cheap to send between processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from advisor.config.loader import EffectiveRules
from advisor.kb import RankData
from advisor.model import Profile
from advisor.pipeline import cluster_data, score
from advisor.timemodel import TimeModel
from advisor.toolkit.time import FREE_TIME_KEY, OTHER_COMM_KEY, comm_op_names


@dataclass
class RankSummary:
    """What the report needs of one rank once its knowledge bases have run (small: no op rows)."""

    meta: Any
    ops: int
    device_time_us: float
    busy_us: float
    by_type: pd.DataFrame  # index type: count, sum
    by_core: pd.Series
    steps: pd.DataFrame
    join_ops: pd.DataFrame  # name, type, duration_us aggregated per unique name (the graph join, the score's caps)
    comm: pd.DataFrame
    """One row per communication op (``advisor.pipeline.cluster_data.COLLECTIVE_COLUMNS``), not per op x transport."""
    communication_matrix: Any
    """Per-link sums of communication_matrix.json (``advisor.pipeline.cluster_data.LINK_COLUMNS``)."""
    available: set[str]
    time: TimeModel
    """The rank's time model (window, steps, compute / communication / free): small, no op rows."""
    small_extras: dict[str, Any]
    """Extras cheap to pass between processes (profiler metadata), for cluster-scope knowledge bases."""
    model_summary: dict[str, Any] | None = None
    """The rank's ``model_summary`` (advisor.toolkit.model_summary: work, utilization, block dim, memory traffic, Memory
    Bound, L2 hit rate, execute calls)."""
    step_time: pd.DataFrame = field(default_factory=pd.DataFrame)
    transports: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: dict[str, Any] = field(default_factory=dict)
    comm_op_names: set[str] | None = None
    """The names savings of the rank's uncovered communication go to (``advisor.toolkit.time.comm_op_names``)."""
    kernels: list[dict[str, Any]] | None = None
    """The report's ``kernels`` of a kernel-development run (advisor.toolkit.kernels: speed of light per side,
    launch against the cores, memory workload); None for other runs."""

    def rank_data(self) -> RankData:
        return RankData(self.meta.rank, self.meta, self.steps, self.comm, self.communication_matrix, self.busy_us,
                        self.device_time_us, self.time, step_time=self.step_time, transports=self.transports,
                        groups=self.groups, comm_op_names=self.comm_op_names)

    @classmethod
    def of(cls, profile: Profile, platform: dict[str, Any] | None = None, rules: EffectiveRules | None = None
           ) -> RankSummary:
        """Reduce a rank's profile to what the report and the cluster analysis need (no op rows travel)."""
        busy = profile.busy_time_us()  # first, while nothing else is held: a union of every task
        ops = profile.ops
        by_type = ops.groupby("type", observed=True)["duration_us"].agg(["count", "sum"])
        by_core = ops.groupby("core", observed=True)["duration_us"].sum()
        join_ops = _join_ops(ops)
        metadata = profile.extras.get("profiler_metadata")
        return cls(profile.meta, len(ops), profile.device_time_us(), busy, by_type, by_core,
                   profile.steps, join_ops, cluster_data.collectives(profile.comm),
                   cluster_data.links(profile.extras.get("communication_matrix"), profile.comm),
                   set(profile.available), profile.time.portable(),
                   {"profiler_metadata": metadata} if metadata else {},
                   _model_summary(profile, platform, rules, busy),
                   step_time=cluster_data.step_time(profile), transports=cluster_data.transports(profile.comm),
                   groups=cluster_data.parallel_groups(metadata, profile.meta.rank),
                   comm_op_names=comm_op_names(profile), kernels=_kernels(profile, platform, rules))

    def limits(self) -> score.Limits:
        """What a finding on this rank may claim (see :func:`advisor.pipeline.score.bound_savings`)."""
        t = self.time
        op_us = dict(zip(self.join_ops["name"].astype(str), self.join_ops["duration_us"].astype(float), strict=True))
        return score.Limits(t.window_us, op_us, {FREE_TIME_KEY: t.free_us,
                                                 OTHER_COMM_KEY: t.uncovered_communication_us})

    @property
    def window_us(self) -> float:
        """The analyzed window of this rank (``time.window_us``): what every share and the score divide by."""
        return self.time.window_us


def _join_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """Per op name: its first type, summed duration and count -- one reduction each (a named aggregation's fixed
    cost is several times theirs on a small table)."""
    by_name = ops.groupby("name", observed=True)
    return pd.DataFrame({"type": by_name["type"].first(), "duration_us": by_name["duration_us"].sum(),
                         "count": by_name["duration_us"].size()}).reset_index()


def _model_summary(profile: Profile, platform: dict[str, Any] | None, rules: EffectiveRules | None,
                   busy_us: float) -> dict[str, Any] | None:
    if platform is None or rules is None:
        return None
    from advisor.toolkit.model_summary import summarize

    return summarize(profile, platform, rules, busy_us=busy_us)


def _kernels(profile: Profile, platform: dict[str, Any] | None, rules: EffectiveRules | None
             ) -> list[dict[str, Any]] | None:
    """The kernels section, for the runs the kernel rules apply to (rules/kernel.yaml ``contexts``)."""
    if platform is None or rules is None:
        return None
    kernel_rules = rules.for_kb("kernel")
    if not kernel_rules or str(profile.meta.context or "unknown") not in set(kernel_rules.get("contexts") or ()):
        return None
    from advisor.toolkit.bound import builtin_rules
    from advisor.toolkit.kernels import kernel_table, kernel_views

    bound = rules.for_kb("bound") or builtin_rules()
    return kernel_table(kernel_views(profile, platform, bound, kernel_rules)) or None
