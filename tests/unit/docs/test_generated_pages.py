"""The generated pages (reference, lifecycle, failure policy) are what the code says today:
each test fails when a page is stale, naming the command that rewrites it."""

from __future__ import annotations

from pathlib import Path

import pytest

from perdure.core.clusterspec import ClusterSpec
from perdure.core.policy import DEFAULT_RULES
from perdure.core.spec import JobSpec
from perdure.core.states import JOB_TRANSITIONS, REPLICA_TRANSITIONS, ErrorCode, JobState
from perdure.docgen import START, Page, pages, specref, splice, updated
from perdure.docgen.__main__ import main
from perdure.docgen.coreref import ERROR_HELP, RULE_HELP

ROOT = Path(__file__).parents[3]
PAGES = pages()


@pytest.mark.parametrize("page", PAGES, ids=[p.path for p in PAGES])
def test_the_generated_page_is_up_to_date(page: Page) -> None:
    text, new = updated(page, ROOT)
    assert new == text, f"{page.path} is stale: run `make docs-reference` and commit it"


def test_a_stale_page_is_found_and_rewritten(tmp_path: Path) -> None:
    for page in PAGES:
        target = tmp_path / page.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((ROOT / page.path).read_text())
    stale = tmp_path / "docs/reference/cli.md"
    stale.write_text(stale.read_text().replace("## `perdure validate`", "## `perdure old`"))
    assert main(["--check", str(tmp_path)]) == 1
    assert main([str(tmp_path)]) == 0
    assert stale.read_text() == (ROOT / "docs/reference/cli.md").read_text()
    assert main(["--check", str(tmp_path)]) == 0


def test_a_page_without_its_markers_is_named() -> None:
    with pytest.raises(ValueError, match="no generated block `cli`"):
        splice("# CLI\n", "cli", "body", "docs/reference/cli.md")
    assert START.format(name="cli") in (ROOT / "docs/reference/cli.md").read_text()


def test_every_spec_field_is_described() -> None:
    undescribed = [row[0] for model in (JobSpec, ClusterSpec) for row in specref.rows(model)
                   if row[3] == specref.UNDOCUMENTED]
    assert not undescribed, f"describe {undescribed}: give the field a Field(description=...)"


def test_every_error_code_and_rule_says_what_it_means() -> None:
    assert set(ERROR_HELP) == set(ErrorCode), "add the code to perdure.docgen.coreref.ERROR_HELP"
    assert {r.name for r in DEFAULT_RULES} == set(RULE_HELP), \
        "describe the rule in perdure.docgen.coreref.RULE_HELP"


def test_the_lifecycle_drawing_has_every_state_and_arrow() -> None:
    from perdure.docgen import diagram

    assert set(diagram.LAYOUT) == set(JobState)
    drawing = diagram.svg()
    arrows = sum(len(moves) for moves in JOB_TRANSITIONS.values())
    assert drawing.count('class="edge"') == arrows and drawing.count("<rect") == len(JobState)
    assert "\n\n" not in drawing  # a blank line would end Markdown's HTML block


def test_every_state_has_its_transitions() -> None:
    assert set(JOB_TRANSITIONS) == set(JobState)
    assert all(not JOB_TRANSITIONS[s] for s in JobState if s.terminal)
    assert all(JOB_TRANSITIONS[s] for s in JobState if not s.terminal)
    assert REPLICA_TRANSITIONS and all(REPLICA_TRANSITIONS.values())


def test_every_command_and_export_is_on_its_page() -> None:
    import typer

    from perdure.cli.main import app

    cli = (ROOT / "docs/reference/cli.md").read_text()
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="perdure")
    for name in root.list_commands(ctx):
        assert f"## `perdure {name}`" in cli, name
    api = (ROOT / "docs/reference/python-api.md").read_text()
    import perdure.runtime

    for name in perdure.runtime.__all__:
        assert f"`perdure.runtime.{name}`" in api, name
    http = (ROOT / "docs/reference/http-api.md").read_text()
    assert "`POST /api/v1/jobs`" in http and "`GET /metrics`" in http
