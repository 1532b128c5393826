"""The user's environment variables in an exported JobSet, checked as the API server will.

No side effects. Each check raises ExportError naming the spec field (`env.NAME`,
`pools.N.env.NAME`) and what to do. Kubernetes refuses a pod whose env name is not
`[-._a-zA-Z][-._a-zA-Z0-9]*` (the rule every supported release enforces; a relaxed rule is
behind a feature gate), and a user variable named like one perdure sets would shadow it in
`$(NAME)` references: a `PERDURE_POD_INDEX: "7"` gave every pod `RANK=7`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from perdure.core.spec import JobSpec
from perdure.export.gaps import ExportError

ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")  # .match: no trailing newline
# Defaults perdure gives that a user may override (the contract's own names always win).
OVERRIDABLE = frozenset({"OMP_NUM_THREADS"})


def _shown(name: str) -> str:
    return name if ENV_NAME.match(name) else repr(name)[:80]


def check_env(spec: JobSpec, reserved: Iterable[str]) -> None:
    """Refuse an env name Kubernetes rejects, or one of the names perdure sets (`reserved`)."""
    taken = set(reserved) - OVERRIDABLE
    where = [("env", spec.env)] + [(f"pools.{i}.env", p.env) for i, p in enumerate(spec.pools)]
    for field, env in where:
        for name in env:
            if not ENV_NAME.match(name):
                raise ExportError(
                    f"{field}.{_shown(name)}: Kubernetes refuses this environment variable "
                    "name; use letters, digits, '_', '-' and '.', not starting with a digit "
                    "(no spaces, tabs, newlines or non-ASCII characters)")
            if name in taken:
                raise ExportError(
                    f"{field}.{name}: perdure sets {name} in every pod (torchrun's and "
                    "perdure's environment); a value here would shadow it. Remove it, or "
                    "rename it")
