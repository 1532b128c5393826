"""Read a failure or calibration file given by path, or a built-in one by name.

Side effects: reads one file, at most what a spec may hold (`/dev/zero` or a huge file is
refused with its name, not read until memory runs out).
"""

from __future__ import annotations

from importlib import resources

from perdure.core import yamlload
from perdure.core.specread import SpecError

LIMIT = 4 * yamlload.SPEC.text  # bytes: up to 4 per character in UTF-8


def read_source(source: str, what: str, builtins: tuple[str, ...]) -> tuple[str | bytes, str]:
    """The text of `source` (a path, or one of `builtins` shipped in perdure.sim.data) and the
    name its errors give; SpecError naming the file when it cannot be read or is too large."""
    if source in builtins:
        text = resources.files("perdure.sim.data").joinpath(f"{source}.yaml").read_text()
        return text, f"{source} (built in)"
    choose = f"give a path or one of {', '.join(builtins)}"
    try:
        with open(source, "rb") as f:
            data = f.read(LIMIT + 1)
    except OSError as exc:
        raise SpecError(f"{source}: cannot read the {what} ({exc.strerror or exc}); "
                        f"{choose}") from None
    if len(data) > LIMIT:
        raise SpecError(f"{source}: larger than the {LIMIT} bytes a {what} may have; {choose}")
    return data, source
