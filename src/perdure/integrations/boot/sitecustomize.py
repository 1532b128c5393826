"""perdure's start-up hook for a replica's cold interpreter (on PYTHONPATH by its supervisor):
`perdure.integrations.autoinstall.install()`, then the sitecustomize this file hides, if any.

Not a package: this directory holds this one file, and only a replica's PYTHONPATH names it.
"""

import importlib
import os
import sys


def _boot() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        from perdure.integrations import autoinstall

        autoinstall.install()
    except Exception as exc:  # never stop the replica's own script
        if os.environ.get("PERDURE_INTEGRATIONS"):  # else: an interpreter without perdure
            print(f"perdure: the spec's integrations could not be installed: {exc}",
                  file=sys.stderr)
    ours = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")  # the one this file hides, if any
    except ImportError:
        if ours is not None:
            sys.modules["sitecustomize"] = ours


_boot()
