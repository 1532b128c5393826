"""The job lifecycle as an SVG drawing: the states where LAYOUT puts them, every arrow from
JOB_TRANSITIONS (hover one for when it happens). No side effects.

A state missing from LAYOUT is an error that names it: a new state needs a place here.
"""

from __future__ import annotations

import math
from html import escape

from perdure.core.states import JOB_TRANSITIONS, JobState

# (column, row) of each state: the way to success along the top, suspension and
# cancellation below it, failure at the bottom
LAYOUT = {
    JobState.QUEUED: (0, 0), JobState.PENDING: (1, 0), JobState.RUNNING: (2, 0),
    JobState.SUCCEEDED: (3, 0),
    JobState.SUSPENDED: (0, 1), JobState.SUSPENDING: (1, 1), JobState.CANCELLING: (2, 1),
    JobState.CANCELLED: (3, 1),
    JobState.FAILED: (1.5, 2),
}
W, H, DX, DY, PAD = 128, 40, 190, 120, 30
BEND = 0.18  # an arrow's bow, as a share of its length: A -> B and B -> A bow apart


def _center(state: JobState) -> tuple[float, float]:
    if state not in LAYOUT:
        raise ValueError(f"the lifecycle drawing has no place for {state.value}: add it to "
                         "perdure.docgen.diagram.LAYOUT")
    col, row = LAYOUT[state]
    return PAD + W / 2 + col * DX, PAD + H / 2 + row * DY


def _border(cx: float, cy: float, tx: float, ty: float) -> tuple[float, float]:
    """Where the line from a box's center (cx, cy) towards (tx, ty) leaves the box."""
    dx, dy = tx - cx, ty - cy
    across = (W / 2 + 4) / abs(dx) if dx else math.inf
    down = (H / 2 + 4) / abs(dy) if dy else math.inf
    return cx + dx * min(across, down), cy + dy * min(across, down)


def _arrow(a: JobState, b: JobState, when: str) -> str:
    title = f"<title>{a.value} -> {b.value}: {escape(when)}</title>"
    if a is b:  # a new round: back to where it was
        x, y = _center(a)
        return (f'<path d="M {x - 20:.0f} {y - H / 2:.0f} C {x - 30:.0f} {y - H / 2 - 34:.0f} '
                f'{x + 30:.0f} {y - H / 2 - 34:.0f} {x + 20:.0f} {y - H / 2:.0f}" '
                f'class="edge" marker-end="url(#head)">{title}</path>')
    (ax, ay), (bx, by) = _center(a), _center(b)
    mx, my = (ax + bx) / 2 - (by - ay) * BEND, (ay + by) / 2 + (bx - ax) * BEND
    sx, sy = _border(ax, ay, mx, my)
    ex, ey = _border(bx, by, mx, my)
    return (f'<path d="M {sx:.0f} {sy:.0f} Q {mx:.0f} {my:.0f} {ex:.0f} {ey:.0f}" class="edge" '
            f'marker-end="url(#head)">{title}</path>')


def _box(state: JobState) -> str:
    x, y = _center(state)
    kind = "terminal" if state.terminal else "holds" if state.holds_capacity else "waits"
    return (f'<g class="{kind}"><rect x="{x - W / 2:.0f}" y="{y - H / 2:.0f}" width="{W}" '
            f'height="{H}" rx="8"/><text x="{x:.0f}" y="{y + 5:.0f}">{state.value}</text></g>')


def svg() -> str:
    """One line per element and no blank line, in a <div>: Markdown passes it through as one
    block of HTML."""
    width = PAD * 2 + W + DX * max(c for c, _ in LAYOUT.values())
    height = PAD * 2 + H + DY * max(r for _, r in LAYOUT.values())
    edges = [_arrow(a, b, when) for a, moves in JOB_TRANSITIONS.items() for b, when in moves]
    return "\n".join([
        '<div class="lifecycle-diagram">',
        f'<svg class="lifecycle" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} '
        f'{height:.0f}" role="img" aria-label="The job lifecycle: states and transitions">',
        "<style>.lifecycle text{font:600 13px sans-serif;text-anchor:middle;fill:#222}"
        ".lifecycle rect{stroke:#3f51b5;stroke-width:1.5;fill:#fff}"
        ".lifecycle .holds rect{fill:#e8eaf6}.lifecycle .terminal rect{stroke-width:3.5}"
        ".lifecycle .edge{fill:none;stroke:#777;stroke-width:1.3}"
        ".lifecycle .edge:hover{stroke:#e91e63;stroke-width:2.5}</style>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#777"/></marker></defs>',
        *edges,
        *(_box(s) for s in JobState),
        "</svg>",
        "</div>",
    ])
