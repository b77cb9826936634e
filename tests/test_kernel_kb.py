"""The kernel knowledge base on the shared kernel-development samples: each rule's figures are the ones the raw files
hold (recomputed here from the CSVs with pandas), its saving stays within the kernel's time, and a kernel whose
rewrite left nothing to move gets no finding.

Samples (../shared/samples): three msprof op rounds of an agent tuning a Cummin kernel (22.1 -> 9.1 -> 5.6 ms), the
AscendC contest's FastGeluGrad and MseLossGrad before and after their rewrite (single-kernel msprof PROF runs on a
310B), and a MIX kernel (chunk-scaled-dot-kkt) whose vector side limits it while its cube side waits.
"""

from __future__ import annotations

import shutil
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from advisor.findings import Finding
from advisor.knowledge_bases.kernel import KernelKB
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.testing import make_profile, run_kb

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"
CUMMIN = "Lulili520__ascendc-optim-agent/log/Cummin/round_{}/msprof_output"
MIX = ("Ryan12210801__chunk-scaled-dot-kkt-ascendc/results/device_profiles/perf_official_like_k128_20260723_173539/"
       "OPPROF_20260723173540_TGVEYIXEDZNYMEZV")
CONTEST = "hansheng1001__AscendCContest/{}/FrameworkLaunch/{}Test/output/{}"
FAST_GELU = ("03FastGeluGrad", "FastGeluGrad")
MSE = ("06MseLossGrad", "MseLossGrad")
BEFORE_AFTER = {
    FAST_GELU: ("PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB", "PROF_000001_20240418222714274_QCBFEEAPNECJJJJA"),
    MSE: ("PROF_000001_20240419182808128_KJPIFHBDARDPDJAB", "PROF_000001_20240421232712043_GCJHMABMLMCQENJC"),
}
RULES = yaml.safe_load((ROOT / "rules" / "kernel.yaml").read_text(encoding="utf-8"))
BOUND = yaml.safe_load((ROOT / "rules" / "bound.yaml").read_text(encoding="utf-8"))
PLATFORMS = yaml.safe_load((ROOT / "rules" / "platforms.yaml").read_text(encoding="utf-8"))


def _cummin(round_: str) -> Path:
    return next((SAMPLES / CUMMIN.format(round_)).glob("OPPROF_*"))


def _contest(kernel: tuple[str, str], which: int) -> Path:
    return SAMPLES / CONTEST.format(kernel[0], kernel[1], BEFORE_AFTER[kernel][which])


@cache
def _report(path: Path, chip: str | None = None) -> dict[str, Any]:
    if not path.exists():
        pytest.skip(f"{path} not available")
    return run_analysis(path, options=AnalysisOptions(chip=chip)).report


def _findings(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding of the kernel knowledge base, wherever the hierarchy put it."""
    out: list[dict[str, Any]] = []

    def walk(fs: list[dict[str, Any]]) -> None:
        for f in fs:
            if f["kb"] == "kernel":
                out.append(f)
            walk(f.get("symptoms") or [])
    walk(rep["findings"])
    return out


def _rule(rep: dict[str, Any], rule: str) -> list[dict[str, Any]]:
    return [f for f in _findings(rep) if f["rule"] == rule]


def _csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    return frame.loc[:, [c for c in frame.columns if not str(c).startswith("Unnamed")]]


def _basic(path: Path) -> pd.Series:
    return _csv(path / "OpBasicInfo.csv").iloc[0]


def _side_rows(path: Path, side: str) -> pd.DataFrame:
    pipe = _csv(path / "PipeUtilization.csv")
    return pipe[pipe["sub_block_id"].astype(str).str.startswith("vector" if side == "aiv" else "cube")]


def _weighted(rows: pd.DataFrame, column: str, side: str) -> float:
    w = rows[f"{side}_total_cycles"].astype(float)
    return float((rows[column].astype(float) * w).sum() / w.sum())


def _check_measured(f: dict[str, Any], path: Path) -> None:
    """Every measured figure names a file of the run and a column that file has."""
    assert f["evidence"]["measured"], f["rule"]
    for m in f["evidence"]["measured"]:
        files = list(path.rglob(m["file"]))
        assert files, m
        header = files[0].read_text(encoding="utf-8").splitlines()[0]
        for col in m["column"].split(" + "):
            assert col in header, (m, header[:200])


# ---------------------------------------------------------------------------------------------------------
# kernel.block-imbalance and kernel.scalar-bound: the Cummin rounds
# ---------------------------------------------------------------------------------------------------------
def test_cummin_round_000_blocks_unbalanced_as_the_csv_says() -> None:
    path = _cummin("000")
    rows = _side_rows(path, "aiv")
    times = rows["aiv_time(us)"].astype(float)
    spread = 1.0 - times.mean() / times.max()
    duration = float(_basic(path)["Task Duration(us)"])
    (f,) = _rule(_report(path), "kernel.block-imbalance")
    ev = f["evidence"]
    assert ev["spread"] == pytest.approx(spread, abs=1e-3)
    assert ev["slowest_us"] == pytest.approx(times.max(), abs=1e-2)
    assert ev["slowest_block"] == str(int(rows.loc[times.idxmax(), "block_id"]))
    assert ev["blocks"] == len(rows) == 32
    alone = duration * spread * RULES["imbalance"]["realism"]
    assert ev.get("saving_alone_us", f["estimated_saving_us"]) == pytest.approx(alone, rel=1e-3)
    _check_measured(f, path)


@pytest.mark.parametrize("round_", ["000", "002", "004"])
def test_cummin_scalar_bound_on_the_csv_ratios(round_: str) -> None:
    path = _cummin(round_)
    rows = _side_rows(path, "aiv")
    scalar = _weighted(rows, "aiv_scalar_ratio", "aiv")
    units = {c: _weighted(rows, c, "aiv") for c in ("aiv_vec_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")}
    top_unit = max(units.values()) / 0.8
    assert scalar / BOUND["pipe_saturation"]["scalar"] > top_unit and scalar >= BOUND["scalar_bound_ratio"]
    duration = float(_basic(path)["Task Duration(us)"])
    rep = _report(path)
    (f,) = _rule(rep, "kernel.scalar-bound")
    assert f["evidence"]["scalar_ratio"] == pytest.approx(scalar, abs=1e-3)
    roof = max(top_unit, scalar * RULES["scalar"]["kept_fraction"])
    alone = f["evidence"].get("saving_alone_us", f["estimated_saving_us"])
    assert alone == pytest.approx(duration * (1.0 - roof), rel=2e-3)
    # the fixes of one kernel compose: together they never claim its time
    assert sum(g["estimated_saving_us"] for g in _findings(rep)) < duration
    assert "aiv_scalar_ratio" in f["title"] and "vector instructions" in f["recommendation"]
    _check_measured(f, path)


def test_cummin_round_004_blocks_are_balanced() -> None:
    path = _cummin("004")
    times = _side_rows(path, "aiv")["aiv_time(us)"].astype(float)
    assert 1.0 - times.mean() / times.max() < RULES["imbalance"]["min_spread"]
    assert not _rule(_report(path), "kernel.block-imbalance")


def test_scores_follow_the_tuning_rounds() -> None:
    """The rounds' measured times fall 22.1 -> 9.1 -> 5.6 ms; each round's kernel findings stay within its time."""
    durations = [float(_basic(_cummin(r))["Task Duration(us)"]) for r in ("000", "002", "004")]
    assert durations == sorted(durations, reverse=True)
    for r, d in zip(("000", "002", "004"), durations, strict=True):
        assert 0 < sum(f["estimated_saving_us"] for f in _findings(_report(_cummin(r)))) < d


# ---------------------------------------------------------------------------------------------------------
# kernel.block-dim: never guessed from the kernel's own block dim
# ---------------------------------------------------------------------------------------------------------
def test_block_dim_needs_the_chips_core_count() -> None:
    path = _cummin("004")
    assert not _rule(_report(path), "kernel.block-dim")  # the run records no chip: nothing guessed
    assert not [f for f in _report(path)["findings"] if f["rule"] == "operator.block-dim"]


@pytest.mark.parametrize("chip", ["Ascend910B2", "Ascend910B4"])
def test_block_dim_against_the_named_chip(chip: str) -> None:
    path = _cummin("004")
    blocks = int(_basic(path)["Block Dim"])
    cores = int(PLATFORMS["chips"][chip]["vector_core_num"])
    rep = _report(path, chip)
    (f,) = _rule(rep, "kernel.block-dim")
    ev = f["evidence"]
    waves = -(-blocks // cores)
    assert (ev["blocks"], ev["cores"], ev["waves"]) == (blocks, cores, waves)
    assert ev["fill"] == pytest.approx(blocks / (waves * cores), abs=1e-4)
    duration = float(_basic(path)["Task Duration(us)"])
    alone = ev.get("saving_alone_us", f["estimated_saving_us"])
    assert alone == pytest.approx(duration * (1 - blocks / (waves * cores)) * RULES["block_dim"]["realism"], rel=1e-3)
    assert f"Block Dim {blocks} on {cores} vector cores" in f["title"]
    assert not [g for g in rep["findings"] if g["rule"] == "operator.block-dim"]  # said once


# ---------------------------------------------------------------------------------------------------------
# kernel.mix-balance: the MIX kernel whose cube side waits for its vector side
# ---------------------------------------------------------------------------------------------------------
def test_mix_kernel_vector_side_on_one_of_two_vector_cores() -> None:
    path = SAMPLES / MIX
    basic = _basic(path)
    assert int(basic["Block Dim"]) == int(basic["Mix Block Dim"]) == 20
    aic, aiv = _side_rows(path, "aic"), _side_rows(path, "aiv")
    cube_units = max(_weighted(aic, c, "aic") for c in ("aic_cube_ratio", "aic_mte1_ratio", "aic_mte2_ratio"))
    assert cube_units < RULES["mix"]["idle_unit_ratio"]  # the cube side's units idle ...
    aic_t, aiv_t = aic["aic_time(us)"].astype(float), aiv["aiv_time(us)"].astype(float)
    assert abs(aic_t.mean() - aiv_t.mean()) <= RULES["mix"]["same_time_tolerance"] * aiv_t.mean()  # ... as long
    rep = _report(path)
    (f,) = _rule(rep, "kernel.mix-balance")
    ev = f["evidence"]
    assert ev["idle_side"] == "aic" and ev["limiting_side"] == "aiv" and ev["vector_per_cube"] == 1
    duration = float(basic["Task Duration(us)"])
    span = duration * aiv_t.max() / max(aic_t.max(), aiv_t.max())
    assert f["estimated_saving_us"] == pytest.approx(span * 0.5 * RULES["mix"]["realism"], rel=1e-3)
    assert "KERNEL_TYPE_MIX_AIC_1_2" in f["recommendation"] and "cross-core" in f["recommendation"]
    # the cube side's scalar ratio is its wait on the vector side: not a scalar-bound finding
    assert _weighted(aic, "aic_scalar_ratio", "aic") > 0.9
    assert not _rule(rep, "kernel.scalar-bound")
    _check_measured(f, path)


# ---------------------------------------------------------------------------------------------------------
# the contest kernels: scalar bound before the rewrite, nothing to move after it
# ---------------------------------------------------------------------------------------------------------
def _summary(path: Path) -> pd.Series:
    return _csv(next(path.rglob("op_summary_*.csv"))).iloc[0]


@pytest.mark.parametrize("kernel", [FAST_GELU, MSE], ids=lambda k: k[1])
def test_contest_kernel_scalar_bound_before_its_rewrite(kernel: tuple[str, str]) -> None:
    path = _contest(kernel, 0)
    row = _summary(path)
    scalar = float(row["scalar_exe_ratio"])
    units = max(float(row[c]) for c in ("vec_exe_ratio", "mac_exe_ratio", "mte1_exe_ratio", "mte2_exe_ratio",
                                        "mte3_exe_ratio")) / 0.8
    (f,) = _findings(_report(path))
    assert f["rule"] == "kernel.scalar-bound"
    assert f["evidence"]["scalar_ratio"] == pytest.approx(scalar, abs=1e-3)
    duration = float(row["Task Duration(us)"])
    roof = max(units, scalar * RULES["scalar"]["kept_fraction"])
    assert f["estimated_saving_us"] == pytest.approx(duration * (1 - roof), rel=2e-3)
    # the rewrite realized more than the estimate (the estimate is against a practical roof, not a guess)
    after = float(_summary(_contest(kernel, 1))["Task Duration(us)"])
    assert f["estimated_saving_us"] < duration - after
    _check_measured(f, path)


@pytest.mark.parametrize("kernel", [FAST_GELU, MSE], ids=lambda k: k[1])
def test_contest_kernel_after_its_rewrite_gets_no_finding(kernel: tuple[str, str]) -> None:
    path = _contest(kernel, 1)
    row = _summary(path)
    assert float(row["scalar_exe_time(us)"]) < RULES["scalar"]["min_scalar_us"]  # the kernel's fixed setup
    rep = _report(path)
    assert not _findings(rep)
    assert rep["score"] == 100


# ---------------------------------------------------------------------------------------------------------
# rules the samples do not trigger, on copies of the real captures with one metric set to what the rule looks for
# ---------------------------------------------------------------------------------------------------------
def _edited(src: Path, dst: Path, csv: str, side: str, values: dict[str, float | str]) -> Path:
    """A copy of the capture ``src`` whose ``csv`` has, on every row of ``side``, ``values`` (a float is a share of
    the row's core time for ``*(us)`` columns, else the value itself)."""
    if not src.exists():
        pytest.skip(f"{src} not available")
    if not dst.exists():
        shutil.copytree(src, dst)
    frame = pd.read_csv(dst / csv, keep_default_na=False, dtype=str)
    rows = frame["sub_block_id"].str.startswith("vector" if side == "aiv" else "cube")
    core = frame.loc[rows, f"{side}_time(us)"].astype(float)
    for column, value in values.items():
        frame.loc[rows, column] = (core * float(value)).map(str) if column.endswith("(us)") else str(value)
    frame.columns = ["" if str(c).startswith("Unnamed") else c for c in frame.columns]
    frame.to_csv(dst / csv, index=False)
    return dst


def test_mte_bound_side_gets_the_transfer_advice(tmp_path: Path) -> None:
    path = _edited(_cummin("004"), tmp_path / "mte", "PipeUtilization.csv", "aiv",
                   {"aiv_scalar_ratio": 0.1, "aiv_scalar_time(us)": 0.1, "aiv_mte2_ratio": 0.5,
                    "aiv_mte2_time(us)": 0.5})
    rep = run_analysis(path).report
    (f,) = _findings(rep)
    assert f["rule"] == "kernel.mte-bound"
    duration = float(_basic(path)["Task Duration(us)"])
    # the practical roof of a memory-bound side: its MTE2 pipe at saturation
    assert f["estimated_saving_us"] == pytest.approx(duration * (1 - 0.5 / BOUND["pipe_saturation"]["mte2"]),
                                                     rel=1e-3)
    memory = _csv(path / "Memory.csv")
    kb = memory["read_main_memory_datas(KB)"].astype(float).sum() + \
        memory["write_main_memory_datas(KB)"].astype(float).sum()
    assert f["evidence"]["achieved_gbps"] == pytest.approx(kb * 1024 / (duration * 1e3), rel=1e-3)
    assert "DataCopy" in f["recommendation"] and "32-byte" in f["recommendation"]
    _check_measured(f, path)


def test_side_at_its_roof_gets_no_finding(tmp_path: Path) -> None:
    path = _edited(_cummin("004"), tmp_path / "roof", "PipeUtilization.csv", "aiv",
                   {"aiv_scalar_ratio": 0.1, "aiv_scalar_time(us)": 0.1, "aiv_mte2_ratio": 0.78,
                    "aiv_mte2_time(us)": 0.78})
    rep = run_analysis(path).report
    assert not _findings(rep) and rep["score"] == 100


def test_instruction_fetch_waits(tmp_path: Path) -> None:
    path = _edited(_cummin("004"), tmp_path / "ib", "PipeUtilization.csv", "aiv",
                   {"aiv_scalar_wait_ib_time(us)": 0.3})
    rep = run_analysis(path).report
    (f,) = _rule(rep, "kernel.icache")
    assert f["evidence"]["wait_ib_share"] == pytest.approx(0.3, abs=1e-3)
    duration = float(_basic(path)["Task Duration(us)"])
    alone = f["evidence"].get("saving_alone_us", f["estimated_saving_us"])
    assert alone == pytest.approx(duration * 0.3 * RULES["icache"]["realism"], rel=1e-3)
    assert "ICachePreLoad" in f["recommendation"]
    (s,) = _rule(rep, "kernel.scalar-bound")
    assert "kernel.icache" in s["recommendation"]
    # two fixes of one kernel: the smaller is sized on what the larger leaves
    assert f["estimated_saving_us"] + s["estimated_saving_us"] < duration


def test_ub_bank_conflicts(tmp_path: Path) -> None:
    path = _edited(SAMPLES / MIX, tmp_path / "bank", "ResourceConflictRatio.csv", "aiv",
                   {"aiv_vec_bankgroup_cflt_ratio": 0.1})
    # the vector side at its roof would get no tuning advice: its vector pipe below it here
    _edited(SAMPLES / MIX, path, "PipeUtilization.csv", "aiv", {"aiv_vec_ratio": 0.4, "aiv_vec_time(us)": 0.4})
    rep = run_analysis(path).report
    (f,) = _rule(rep, "kernel.bank-conflict")
    assert f["evidence"]["conflicts"] == {"aiv_vec_bankgroup_cflt_ratio": pytest.approx(0.1)}
    assert f["evidence"]["measured"][0]["file"] == "ResourceConflictRatio.csv"
    assert "bank group" in f["recommendation"]
    _check_measured(f, path)


# ---------------------------------------------------------------------------------------------------------
# kernel.cube-utilization: no shared sample has a custom matmul, so a single-kernel run as ingest leaves it
# ---------------------------------------------------------------------------------------------------------
def _matmul_run(mac: float, duration_us: float, blocks: int = 24) -> list[Finding]:
    n = 1024
    row = {"name": "MatmulCustom", "type": "MatmulCustom", "core": "AI_CORE", "duration_us": duration_us,
           "aicore_time_us": duration_us * 0.95, "block_dim": blocks, "mac_ratio": mac, "scalar_ratio": 0.3,
           "mte1_ratio": 0.2, "mte2_ratio": 0.25, "mte3_ratio": 0.0, "fixpipe_ratio": 0.05, "vec_ratio": 0.0,
           "cube_fops": 2.0 * n ** 3, "input_shapes": f"{n},{n};{n},{n}", "input_dtypes": "FLOAT16;FLOAT16",
           "output_shapes": f"{n},{n}", "output_dtypes": "FLOAT16"}
    profile = make_profile([row], chip="Ascend910B2", context="kernel-dev")
    found, _ = run_kb(KernelKB, profile, chip="Ascend910B2")
    return found


def test_cube_far_below_its_roof_at_a_compute_bound_intensity() -> None:
    peak = float(PLATFORMS["chips"]["Ascend910B2"]["fp16_tflops"])
    flops, nbytes = 2.0 * 1024 ** 3, 3 * 1024 * 1024 * 2
    assert flops / nbytes > peak * 1e12 / (float(PLATFORMS["chips"]["Ascend910B2"]["hbm_gbps"]) * 1e9)  # the ridge
    (f,) = _matmul_run(mac=0.31, duration_us=100.0)
    assert f.rule == "kernel.cube-utilization"
    share = max(0.31 / BOUND["pipe_saturation"]["mac"],
                flops / 100e-6 / (peak * 1e12) / BOUND["target_fraction_of_roof"])
    assert f.evidence["share_of_practical_roof"] == pytest.approx(share, abs=1e-3)
    assert f.estimated_saving_us == pytest.approx(100.0 * (1 - share), rel=1e-3)
    assert "baseM" in f.recommendation and "double-buffer" in f.recommendation


def test_cube_at_its_roof_gets_no_finding() -> None:
    assert not _matmul_run(mac=0.7, duration_us=100.0)
