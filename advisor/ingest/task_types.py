"""The core a device task ran on, from the runtime's task type -- for profiles that record no op core.

At profiler level 0 (torch_npu ``Level0``, msprof ``--task-time=l0``) the op's own task type is not collected:
``COMPUTE_TASK_INFO.taskType`` / kernel_details ``Accelerator Core`` are ``N/A`` (CANN op_summary docs: "task_time
为l0时,不采集该字段,显示为N/A"). The device's task records still carry the runtime task type (``TASK.taskType``:
``KERNEL_AIVEC``, ``KERNEL_AICORE``...), the type the runtime registers for profiling (CANN runtime
``profiling_agent.cc``: ``KERNEL_AICORE``, ``KERNEL_MIX_AIC``, ``KERNEL_MIX_AIV``, ``KERNEL_AICPU``...). That is
the core the kernel was launched on -- never inferred from the op's name.

Checked against the level-1 torch_npu export (msinsight ``db/level1``), where both are recorded: every
``KERNEL_AIVEC`` compute task is ``AI_VECTOR_CORE``, every ``MIX_AIV`` task ``MIX_AIV``, both ``STARS_COMMON``
compute tasks ``DSA_SQE``; ``KERNEL_AICORE`` is ``AI_CORE`` for 23 tasks and ``MIX_AIV`` for 8 (a mix kernel the
runtime launches as an AI Core kernel), so at level 0 those few mix kernels count as ``AI_CORE``.

Not mapped: the STARS SQE type ``AI_CORE`` that traces write, which covers cube and vector kernels alike (on the
torch_npu level-2 sample it is ``AI_CORE`` for 23 and ``AI_VECTOR_CORE`` for 149 kernels).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TASK_TYPE_CORE: dict[str, str] = {
    "KERNEL_AICORE": "AI_CORE",
    "KERNEL_AIVEC": "AI_VECTOR_CORE",
    "KERNEL_MIX_AIC": "MIX_AIC",
    "KERNEL_MIX_AIV": "MIX_AIV",
    "MIX_AIC": "MIX_AIC",
    "MIX_AIV": "MIX_AIV",
    "KERNEL_AICPU": "AI_CPU",
    "AI_CPU": "AI_CPU",
    "STARS_COMMON": "DSA_SQE",
}
"""Runtime task type of a *compute* task -> the normalized ``core`` (see ``advisor.model.OP_ID_COLUMNS``)."""


def core_from_task_type(task_types: pd.Series | pd.Categorical | np.ndarray) -> np.ndarray:
    """Runtime task type names -> normalized core names (object array); unknown or missing types become None.

    Mapped on the distinct values only (a million-row profile has a handful of task types).
    """
    cat = task_types if isinstance(task_types, pd.Categorical) else pd.Categorical(np.asarray(task_types, dtype=object))
    lut = np.array([TASK_TYPE_CORE.get(str(c).strip().upper()) for c in cat.categories] + [None], dtype=object)
    return lut[cat.codes]  # code -1 (missing) picks the trailing None


def fill_missing_cores(core: pd.Series, task_types: pd.Series | pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """``core`` (object array) with its missing values taken from ``task_types``; also the mask of rows that were
    missing."""
    current = pd.Series(core, copy=False).astype(object).to_numpy()
    missing = pd.isna(current)
    if not missing.any():
        return current, missing
    derived = core_from_task_type(pd.Series(task_types).array if isinstance(task_types, pd.Series) else task_types)
    return np.where(missing, derived, current), missing


__all__ = ["TASK_TYPE_CORE", "core_from_task_type", "fill_missing_cores"]
