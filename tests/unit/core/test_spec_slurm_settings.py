"""`slurm:` of a cluster file (issue 36.7, 36.8): sbatch_args may not override what perdure
sets or reads back, in any spelling sbatch takes; time_limit is Slurm's format, whole (no
trailing newline) and bounded. Names end where they seem to (no trailing newline either)."""

from __future__ import annotations

import json

import pytest

from perdure.backends.slurm import slurmcmd
from perdure.core.clusterspec import SlurmSpec, parse_cluster
from perdure.core.spec import parse_job_spec
from perdure.core.specread import SpecError


def cluster(slurm: dict[str, object]) -> str:
    return f"backend: slurm\nslurm: {json.dumps(slurm)}\n"


def refused(slurm: dict[str, object]) -> list[str]:
    with pytest.raises(SpecError) as err:
        parse_cluster(cluster(slurm), "cluster.yaml")
    return str(err.value).splitlines()[1:]


@pytest.mark.parametrize(("args", "index", "needle"), [
    (["--job-name=x"], 0, "--job-name/-J: perdure names the holder job"),
    (["--job-name", "x"], 0, "--job-name/-J"),
    (["-J", "x"], 0, "-J"),
    (["-Jx"], 0, "-J in -Jx (--job-name/-J)"),
    (["--job=x"], 0, "--job (--job-name/-J)"),
    (["-kJx"], 0, "-k in -kJx (--no-kill/-k)"),  # and -J, on a line of its own
    (["--wrap=sleep 9"], 0, "--wrap: the holder script"),
    (["--parsable"], 0, "--parsable"),
    (["--signal=B:USR2@60"], 0, "--signal: perdure asks"),
    (["--output=/tmp/o"], 0, "--output/-o"),
    (["-o", "/tmp/o"], 0, "-o"),
    (["--error", "/tmp/e"], 0, "--error/-e"),
    (["-e/tmp/e"], 0, "-e in -e/tmp/e (--error/-e)"),
    (["--no-kill"], 0, "--no-kill/-k"),
    (["-k"], 0, "--no-kill/-k"),
    (["--nodelist=n1,n2"], 0, "--nodelist/-w: perdure chooses every node"),
    (["-w", "n1"], 0, "--nodelist/-w"),
    (["--mem=4G", "-vw", "n1"], 1, "-w in -vw (--nodelist/-w)"),
    (["--time=1:00:00"], 0, "slurm.time_limit instead"),
    (["-p", "gpu"], 0, "slurm.partition instead"),
    (["--comment=x"], 0, "--comment: perdure reads Slurm's notices"),
    (["--mem", "4G", "holder.sh"], 2, "not an option: sbatch would run it as the job's script"),
    (["--exclusive", "holder.sh"], 1, "not an option"),
])
def test_options_perdure_sets_are_refused_in_every_spelling(
        args: list[str], index: int, needle: str) -> None:
    lines = refused({"sbatch_args": args})
    assert all(line.startswith(f"  slurm.sbatch_args.{index}: ") for line in lines), lines
    assert any(needle in line for line in lines), lines


def test_each_refused_option_has_its_own_line() -> None:
    lines = refused({"sbatch_args": ["-J", "x", "--mem=4G", "--output=o", "--parsable"]})
    assert [line.split(":")[0] for line in lines] == [
        "  slurm.sbatch_args.0", "  slurm.sbatch_args.3", "  slurm.sbatch_args.4"]


@pytest.mark.parametrize("args", [
    [], ["--exclusive"], ["--mem=64G", "--constraint", "a100"], ["-C", "a100", "--mem", "8G"],
    ["--time-min=30"], ["--exclusive=user"], ["--requeue", "--mail-type=END"],
    ["--gres-flags=enforce-binding"], ["-v"],
])
def test_options_perdure_leaves_alone_pass_to_sbatch(args: list[str]) -> None:
    spec = parse_cluster(cluster({"sbatch_args": args})).slurm
    assert spec is not None
    argv = slurmcmd.sbatch_args(spec, "n", ["a"], 1, 10)
    assert argv[len(argv) - len(args):] == args


@pytest.mark.parametrize(("limit", "needle"), [
    ("24:00:00\n", "use Slurm's time format"),
    ("99999999999999999999", "use Slurm's time format"),
    ("600-0", "more than 365 days; use UNLIMITED"),
    ("530000", "more than 365 days"),
    ("1:2:3:4", "use Slurm's time format"),
    ("UNLIMITED\n", "use Slurm's time format"),
])
def test_a_time_limit_is_whole_and_bounded(limit: str, needle: str) -> None:
    lines = refused({"time_limit": limit})
    assert len(lines) == 1 and lines[0].startswith("  slurm.time_limit: ") and needle in \
        lines[0], lines


@pytest.mark.parametrize("limit", ["30", "90:00", "24:00:00", "2-12", "2-12:30", "365-0",
                                   "UNLIMITED", "INFINITE"])
def test_slurm_time_formats_pass(limit: str) -> None:
    assert SlurmSpec(time_limit=limit).time_limit == limit


@pytest.mark.parametrize("text", [
    'name: "job\\n"\npools: [{name: w, command: [t]}]\n',
    'name: job\npools: [{name: "w\\n", command: [t]}]\n',
])
def test_a_name_with_a_trailing_newline_is_refused(text: str) -> None:
    with pytest.raises(SpecError, match="use lowercase letters"):
        parse_job_spec(text)


def test_a_node_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(SpecError, match=r"nodes.0.name: use lowercase letters"):
        parse_cluster('nodes: [{name: "a\\n", slots: 1}]\n')
