"""The torch versions perdure supports, and the one-line refusal of any other.

pyproject.toml declares the same range (a unit test holds the two together): from the oldest
torch docs/compat-matrix.json tests to one past the newest. `import perdure` calls `check_torch`,
which reads torch/version.py without importing torch (a supervisor imports perdure too).
No side effects beyond reading that file.
"""

from __future__ import annotations

import re
from importlib.util import find_spec
from pathlib import Path

SUPPORTED = (2, 6), (2, 15)
"""(major, minor) of the oldest supported torch, and of the first unsupported one after it."""
TORCH_RANGE = f">={SUPPORTED[0][0]}.{SUPPORTED[0][1]},<{SUPPORTED[1][0]}.{SUPPORTED[1][1]}"
"""As pyproject.toml's dependency states it."""


def torch_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of a torch version string ("2.10.0+cpu" -> (2, 10)); None when it is
    not one. No side effects."""
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def unsupported_torch(text: str) -> str | None:
    """The one line that refuses torch ``text`` when it is outside the supported range; None
    inside it (and for a version string that is not one: a source build). No side effects."""
    version = torch_version(text)
    low, high = SUPPORTED
    if version is None or low <= version < high:
        return None
    newest = f"{high[0]}.{high[1] - 1}" if high[1] else f"{high[0] - 1}.x"
    return (f"perdure needs torch {TORCH_RANGE} ({low[0]}.{low[1]} to {newest}) and this "
            f"environment has torch "
            f"{text}: install a supported one (pip install 'torch{TORCH_RANGE}') or use an "
            "environment that has one.")


def installed_torch() -> str | None:
    """The installed torch's ``__version__``, read from its torch/version.py; None when there
    is no torch, or its version is not written there."""
    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            text = (Path(folder) / "version.py").read_text()
        except OSError:
            continue
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found[1]
    return None


def check_torch() -> None:
    """Exit at once with one line when the installed torch is outside the supported range."""
    text = installed_torch()
    problem = None if text is None else unsupported_torch(text)
    if problem is not None:
        raise SystemExit(problem)
