"""``advisor fix``: apply mechanical ONNX rewrites (verified with onnxruntime), or write ATC config files
from a report's fusion-switch / AIPP / atc-option fixes."""

from __future__ import annotations

import json
from pathlib import Path

import click
import onnx
from onnx.external_data_helper import load_external_data_for_model, uses_external_data
from rich.console import Console

from advisor.cli.console import make_console
from advisor.common.errors import InputError, OutputError, UsageError
from advisor.common.output import check_output, output_target, write_atomic
from advisor.fix import atc_config
from advisor.fix.pipeline import FixOptions, run_fix, scan
from advisor.fix.render import atc_json, fix_json, print_atc, print_fix, print_rewrites
from advisor.fix.rewrites import REWRITES
from advisor.fix.verify import OPT_LEVELS, VerifySettings, load_onnxruntime

MAX_PROTO_BYTES = 2**31 - 1


@click.command("fix")
@click.argument("model", required=False, type=click.Path(path_type=Path))
@click.option("--apply", "apply_", multiple=True, metavar="RULE[,RULE]",
              help=f"Rewrites to apply, in order ('all' for every one): {', '.join(REWRITES)}.")
@click.option("-o", "--output", "out", type=click.Path(path_type=Path),
              help="Rewritten model (default MODEL.fixed.onnx); with --atc-config, the directory for the files "
                   "(default ./atc_config).")
@click.option("--param", "params", multiple=True, metavar="RULE.NAME=VALUE",
              help="A rewrite parameter, e.g. mish-to-leakyrelu.alpha=0.1 (repeatable).")
@click.option("--allow-contrib", is_flag=True,
              help="Below the opset of the native op, fuse into com.microsoft contrib ops (onnxruntime only).")
@click.option("--accept-approx", is_flag=True, help="Keep rewrites that change the model's function (e.g. Mish->LeakyRelu).")
@click.option("--accept", "accept", multiple=True, metavar="RULE[,RULE]",
              help="Keep this approximate rewrite (per-rule --accept-approx; repeatable).")
@click.option("--verify", is_flag=True, help="Run onnxruntime (CPU) before/after each rewrite: difference and latency.")
@click.option("--runs", type=click.IntRange(1), default=20, show_default=True, help="Timed runs per model.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True, help="Untimed runs first.")
@click.option("--atol", type=click.FloatRange(0), default=1e-4, show_default=True,
              help="Absolute tolerance for numerics-preserving rewrites.")
@click.option("--rtol", type=click.FloatRange(0), default=1e-4, show_default=True,
              help="Relative tolerance for numerics-preserving rewrites.")
@click.option("--min-gain", type=float, default=0.0, show_default=True, metavar="PCT",
              help="Keep a verified rewrite only when median latency improves by at least PCT % (negative "
                   "tolerates a slowdown).")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=D0,D1,...",
              help="Input shape for --verify (dynamic dims default to 1; repeatable).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--ort-opt", type=click.Choice(OPT_LEVELS), default="disable", show_default=True,
              help="onnxruntime graph optimizations while verifying ('disable' measures the graph as written).")
@click.option("--atc-config", "report_path", type=click.Path(path_type=Path),
              help="An advisor JSON report: write fusion_switch.cfg, aipp.cfg and atc_command.txt from its fixes.")
@click.option("--merge-switch", "merge_switch", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="With --atc-config: the build's own fusion switch file, merged into fusion_switch.cfg (its "
                   "settings kept) instead of replaced.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def command(model: Path | None, apply_: tuple[str, ...], out: Path | None, params: tuple[str, ...],
            allow_contrib: bool, accept_approx: bool, accept: tuple[str, ...], verify: bool, runs: int, warmup: int,
            atol: float, rtol: float, min_gain: float, shapes: tuple[str, ...], seed: int, ort_opt: str,
            report_path: Path | None, merge_switch: Path | None, fmt: str) -> None:
    """Apply mechanical fixes: rewrite an ONNX MODEL (--apply, checked, optionally --verify'd), or turn a
    report's ATC fixes into config files (--atc-config). Without either, list what would match in MODEL."""
    console = make_console()
    if report_path is not None:
        if apply_:
            raise UsageError("--atc-config and --apply are separate modes; run them one at a time")
        _atc(report_path, model, out or Path("atc_config"), fmt, console, merge_switch)
        return
    if model is None:
        if apply_:
            raise UsageError("missing MODEL (the .onnx file to rewrite)")
        print_rewrites(console)
        return
    rules = _rules(apply_) if apply_ else list(REWRITES)
    per_rule = _params(params, allow_contrib)
    target = output_target(out or model.with_name(f"{model.stem}.fixed.onnx"), None, [model]) if apply_ else None
    if verify:
        load_onnxruntime()
    proto = load_model(model, target)
    if not apply_:
        steps = scan(proto, rules, per_rule)
        if fmt == "json":
            click.echo(json.dumps({"model": str(model), "rewrites": [s.to_dict() for s in steps]}, indent=2))
        else:
            from advisor.fix.pipeline import FixRun

            print_fix(FixRun(proto, steps), console, f"rewrites that match {model} (nothing written)", False)
        return
    options = FixOptions(params=per_rule, accept_all=accept_approx, accept=set(_rules(accept)) if accept else set())
    if verify:
        options.verify = VerifySettings(runs=runs, warmup=warmup, atol=atol, rtol=rtol, min_gain_pct=min_gain,
                                        seed=seed, shapes=_shapes(shapes), opt_level=ort_opt)
    run = run_fix(proto, rules, options, source=model)
    assert target is not None
    written = None
    if run.kept:
        data = run.model.SerializeToString() if run.model.ByteSize() <= MAX_PROTO_BYTES else None
        if data is None:
            raise UsageError("the rewritten model is larger than 2 GB; save with external data is not supported")
        write_atomic(target, data)
        written = str(target)
    meta = {"model": str(model), "output": written, "verify": options.verify.to_dict() if options.verify else None}
    if fmt == "json":
        click.echo(fix_json(run, meta), nl=False)
    else:
        print_fix(run, console, f"advisor fix {model.name}", verify)
    if written:
        click.echo(f"advisor: wrote {written} ({len(run.kept)} rewrite(s) kept)", err=True)
    else:
        click.echo("advisor: no rewrite kept; nothing written", err=True)


def load_model(path: Path, target: Path | None = None) -> onnx.ModelProto:
    """The ONNX model at ``path`` with its external data, or a one-line InputError. The external-data files are
    inputs too: an output ``target`` that is one of them (or a link to one) is refused before they are read."""
    if not path.exists():
        raise InputError(path, "no such file")
    if path.is_dir():
        raise InputError(path, "is a directory, expected an .onnx file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf and onnx raise several types for a non-ONNX file
        raise InputError(path, f"not an ONNX model ({type(e).__name__})") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise InputError(path, "not an ONNX model (no IR version, graph or opset import)")
    if target is not None:
        check_output(target, external_data_files(model, path.parent))
    try:
        load_external_data_for_model(model, str(path.parent))
    except Exception as e:  # noqa: BLE001 - a missing or refused tensor file raises OSError or onnx errors
        raise InputError(path, f"its external data could not be read ({type(e).__name__}: {e})") from None
    return model


def external_data_files(model: onnx.ModelProto, base: Path) -> list[Path]:
    """The files the tensors of ``model`` (initializers, node attributes, subgraphs) keep their data in."""
    files: dict[str, Path] = {}

    def tensors(graph: onnx.GraphProto):
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    yield from tensors(sub)

    for tensor in tensors(model.graph):
        if uses_external_data(tensor):
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location:
                files.setdefault(location, base / location)
    return list(files.values())


def _rules(values: tuple[str, ...]) -> list[str]:
    """Comma/repeat-separated rule ids, in order, without duplicates; 'all' is every rewrite."""
    out: list[str] = []
    for v in values:
        for name in (p.strip() for p in v.split(",")):
            if not name:
                continue
            names = list(REWRITES) if name == "all" else [name]
            for n in names:
                if n not in REWRITES:
                    raise UsageError(f"unknown rewrite '{n}' (known: {', '.join(REWRITES)})")
                if n not in out:
                    out.append(n)
    return out


def _params(values: tuple[str, ...], allow_contrib: bool) -> dict[str, dict[str, object]]:
    """``--param RULE.NAME=VALUE`` parsed and typed per rule; ``--allow-contrib`` sets allow_contrib."""
    out: dict[str, dict[str, object]] = {}
    if allow_contrib:
        for r in REWRITES.values():
            if any(p.name == "allow_contrib" for p in r.params):
                out.setdefault(r.name, {})["allow_contrib"] = True
    for v in values:
        key, sep, text = v.partition("=")
        rule, dot, name = key.strip().partition(".")
        if not sep or not dot:
            raise UsageError(f"--param {v!r}: expected RULE.NAME=VALUE")
        if rule not in REWRITES:
            raise UsageError(f"--param {v!r}: unknown rewrite '{rule}' (known: {', '.join(REWRITES)})")
        spec = {p.name: p for p in REWRITES[rule].params}
        if name not in spec:
            known = ", ".join(spec) or "none"
            raise UsageError(f"--param {v!r}: {rule} has no parameter '{name}' (parameters: {known})")
        try:
            out.setdefault(rule, {})[name] = spec[name].parse(text)
        except ValueError as e:
            raise UsageError(f"--param {v!r}: {e}") from None
    return out


def _shapes(values: tuple[str, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for v in values:
        name, sep, dims = v.partition("=")
        try:
            parsed = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
        except ValueError:
            parsed = []
        if not sep or not name or not parsed or any(d <= 0 for d in parsed):
            raise UsageError(f"--shape {v!r}: expected NAME=D0,D1,... with positive dims")
        out[name.strip()] = parsed
    return out


def _atc(report_path: Path, model: Path | None, out_dir: Path, fmt: str, console: Console,
         merge_switch: Path | None = None) -> None:
    report = atc_config.load_report(report_path)
    cfg = atc_config.build(report, out_dir, str(model) if model is not None else None, merge_switch)
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(out_dir, "is not a directory (--atc-config writes several files into -o)")
    targets = {name: output_target(out_dir / name, None, [report_path, model, merge_switch]) for name in cfg.files}
    written = []
    for name, text in cfg.files.items():
        write_atomic(targets[name], text)
        written.append(str(out_dir / name))
    if fmt == "json":
        click.echo(atc_json(cfg, str(out_dir), written), nl=False)
    else:
        print_atc(cfg, console, written)
