"""A replica's PATH and PYTHONPATH: perdure's interpreter first, its start-up hook first, and
a warm standby still good for a launch whose only difference is that hook."""

from __future__ import annotations

import os
import sys

from perdure.backends.node.localranks import python_first
from perdure.backends.node.standby import env_matches
from perdure.integrations.autoinstall import BOOT_DIR, with_boot, without_boot


def test_the_launchs_interpreter_directory_comes_first_on_path() -> None:
    assert python_first("/usr/bin:/bin", "/opt/venv/bin/python") == "/opt/venv/bin:/usr/bin:/bin"
    assert python_first("/opt/venv/bin:/usr/bin", "/opt/venv/bin/python3.11") == (
        "/opt/venv/bin:/usr/bin")  # already first: unchanged
    assert python_first("/usr/bin:/opt/venv/bin", "/opt/venv/bin/python") == (
        "/opt/venv/bin:/usr/bin")  # moved, not doubled
    here = os.path.dirname(sys.executable)
    assert python_first("/usr/bin", "bash").split(os.pathsep)[0] == here  # not a python


def test_the_boot_hook_is_first_and_no_difference_for_a_standby() -> None:
    assert with_boot("") == BOOT_DIR
    assert with_boot(f"/src:{BOOT_DIR}") == f"{BOOT_DIR}:/src"
    assert without_boot(with_boot("/src")) == "/src"
    assert env_matches({"PYTHONPATH": with_boot("/src")}, {"PYTHONPATH": "/src"})
    assert env_matches({"PYTHONPATH": with_boot("")}, {})
    assert not env_matches({"PYTHONPATH": with_boot("/other")}, {"PYTHONPATH": "/src"})
