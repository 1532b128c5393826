"""`python -m perdure.docgen [--check] [ROOT]`: rewrite (or check) the generated pages."""

from __future__ import annotations

import sys
from pathlib import Path

from perdure.docgen import pages, updated


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    root = Path(rest[0] if rest else ".")
    stale = []
    for page in pages():
        try:
            text, new = updated(page, root)
        except (OSError, ValueError) as exc:
            print(f"{page.path}: {exc}", file=sys.stderr)
            return 2
        if new == text:
            continue
        stale.append(page.path)
        if not check:
            (root / page.path).write_text(new)
            print(f"{page.path}: updated")
    if check and stale:
        print(f"stale: {', '.join(stale)}; run `make docs-reference`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
