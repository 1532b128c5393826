"""`perdure sim`: a large run's ETTR policy by policy; `perdure sim calibrate`: measure costs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from perdure.cli.common import load_spec, read_bytes
from perdure.core.clusterspec import parse_cluster
from perdure.core.specread import SpecError
from perdure.sim import calibrate as calibrating
from perdure.sim import calibration, failures, policies, report


def sim(
    spec: Annotated[str, typer.Argument(help="The job spec (or `calibrate`: measure costs "
                                              "on this machine and write a calibration file).")],
    cluster: Annotated[Path | None, typer.Option("--cluster", help="The cluster file.")] = None,
    failure_file: Annotated[str, typer.Option(
        "--failures", help="A failure file, or `llama3` (Table 5 of the Llama 3 paper).")
    ] = "llama3",
    days: Annotated[float, typer.Option("--days", min=0.001, max=3650)] = 54.0,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help=f"Repeat to compare: {', '.join(policies.POLICIES)} "
                         f"(default: {', '.join(policies.DEFAULT)}).")
    ] = None,
    calib: Annotated[str, typer.Option(
        "--calibration", help="A calibration file, or `h100-405b` (published H100 figures).")
    ] = "h100-405b",
    as_json: Annotated[bool, typer.Option("--json")] = False,
    out: Annotated[Path, typer.Option("--out", help="calibrate: where to write.")] = Path(
        "calibration.yaml"),
    quick: Annotated[bool, typer.Option("--quick", help="calibrate: shorter runs.")] = False,
) -> None:
    """Simulate a run's failures through the real core: ETTR and badput per policy."""
    try:
        if spec == "calibrate":
            typer.echo(calibrating.calibrate(out, quick))
            return
        if cluster is None:
            raise SpecError("--cluster: give the cluster file the run would use (its nodes)")
        job = load_spec(Path(spec))
        clus = parse_cluster(read_bytes(cluster, "cluster file"), str(cluster))
        chosen = policies.by_names(policy or list(policies.DEFAULT))
        results, meta = report.run(job, spec, clus, failures.load(failure_file), failure_file,
                                   calibration.load(calib), calib, chosen, days, seed)
    except (SpecError, ValueError) as exc:
        typer.echo(f"perdure sim: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(json.dumps(report.to_json(results, meta), indent=2) if as_json
               else report.table(results, meta))


def register(app: typer.Typer) -> None:
    app.command()(sim)
