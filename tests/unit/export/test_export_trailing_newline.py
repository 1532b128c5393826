"""A name Kubernetes checks whole is checked whole here too (issue 36.8: `$` let a trailing
newline through): an env name, a queue, a namespace or an image ending in "\\n" is refused."""

from __future__ import annotations

import pytest
from test_export_k8s import IMAGE, spec_of

from perdure.export.gaps import ExportError
from perdure.export.k8s import K8sOptions, export_k8s


@pytest.mark.parametrize(("text", "opts", "needle"), [
    ('env: {"NAME\\n": x}\n', K8sOptions(IMAGE), "Kubernetes refuses"),
    ("", K8sOptions(IMAGE, queue="q\n"), "--queue"),
    ("", K8sOptions(IMAGE, namespace="ns\n"), "--namespace"),
    ("", K8sOptions(IMAGE + "\n"), "image"),
])
def test_a_trailing_newline_is_refused(text: str, opts: K8sOptions, needle: str) -> None:
    with pytest.raises(ExportError, match=needle):
        export_k8s(spec_of(text), opts)
