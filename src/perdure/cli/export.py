"""`perdure export k8s`: a job spec as a Kubernetes JobSet queued by Kueue, checked offline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from perdure.cli.common import die, load_spec, read_bytes
from perdure.cli.terminal import visible
from perdure.core import yamlload
from perdure.export.gaps import ExportError
from perdure.export.k8s import K8sOptions, export_k8s, to_yaml
from perdure.export.k8s_schema import validate_export

export_app = typer.Typer(
    help="Translate a job spec into another system's format.", no_args_is_help=True
)


@export_app.command("k8s")
def k8s(
    spec: Path,
    image: Annotated[str | None, typer.Option(
        "--image", help="The container image with the training code (required).")] = None,
    queue: Annotated[str | None, typer.Option(
        "--queue", help="Kueue LocalQueue (default: the spec's queue).")] = None,
    priority_class: Annotated[str | None, typer.Option(
        "--priority-class", help="A Kueue WorkloadPriorityClass (default: one made for the "
        "spec's priority, when it is not 0).")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", help="The JobSet's namespace.")]
    = None,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Fail, naming each field, when a field cannot be expressed.")] = False,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")]
    = None,
    crd: Annotated[Path | None, typer.Option(
        "--crd", help="Also validate against this JobSet CRD's openAPIV3Schema.")] = None,
) -> None:
    """Print the job as a jobset.x-k8s.io/v1alpha2 JobSet for Kueue, validated offline."""
    if image is None:
        die("--image is required: the container image with the training code, "
            "e.g. --image ghcr.io/acme/train:1.0")
    s = load_spec(spec)
    crd_text = _crd_text(crd) if crd is not None else None
    try:
        result = export_k8s(s, K8sOptions(image, queue, priority_class, namespace))
        notes = validate_export(result.documents, crd_text, str(crd))
    except ExportError as exc:
        die(str(exc))
    for note in notes:
        typer.echo(f"perdure: note: {visible(note)}", err=True)
    for gap in result.gaps:
        typer.echo(f"perdure: {'error' if strict else 'warning'}: {visible(gap)}", err=True)
    if strict and result.gaps:
        die(f"{len(result.gaps)} spec field(s) cannot be expressed as a JobSet (--strict); "
            "without --strict they are exported with the warnings above")
    text = to_yaml(result.documents)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        die(f"-o {output}: cannot write: {exc.strerror}")
    typer.echo(f"perdure: wrote {output}", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(export_app, name="export")


def _crd_text(path: Path) -> str:
    try:
        return read_bytes(path, "CRD file", yamlload.CRD).decode("utf-8")
    except UnicodeDecodeError as exc:
        die(f"CRD file {path}: not UTF-8 text (byte {exc.start}); pass the CRD's YAML or JSON")
