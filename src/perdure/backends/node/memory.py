"""Hold a replica to its `memory_mb`: a cgroup of its own (v2 or v1), else RSS polling.

Every replica gets a cgroup whenever one can be made, limit or not, so that its whole process
tree is killed at the end and a kernel OOM kill in it reads as out of memory. Its cgroup is
`$PERDURE_CGROUP_PARENT/<launch_id>`, else `<the supervisor's cgroup>/<group>/<launch_id>`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import zlib

from perdure.backends.base import BackendSettingError

MECHANISMS = ("auto", "cgroup-v2", "cgroup-v1", "rss")
CGROUP_PARENT_ENV = "PERDURE_CGROUP_PARENT"
GROUP_PREFIX = "perdure-"
RSS_POLL_SECONDS = 0.1


class MemoryLimitError(RuntimeError):
    """The requested memory mechanism cannot be used on this machine."""


class NoLimit:
    """No memory limit (peak RSS is still sampled by the supervisor)."""

    mechanism = "none"
    path: str | None = None
    poll_interval: float | None = None

    def join(self, pid: int | None = None) -> None:
        """Put `pid` (default: this process, a child before exec) under the limit."""

    def over_limit(self, rss_bytes: int) -> bool:
        return False

    def oom_killed(self) -> bool:
        return False

    def peak_bytes(self) -> int | None:
        return None

    def kill_all(self) -> None:
        """Kill whatever still runs under the limit."""

    def close(self) -> None:
        pass


class RssLimit(NoLimit):
    """Poll the process tree's RSS; the supervisor kills the group when it is over."""

    mechanism = "rss"
    poll_interval = RSS_POLL_SECONDS

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.tripped = False

    def over_limit(self, rss_bytes: int) -> bool:
        if rss_bytes > self.limit_bytes:
            self.tripped = True
        return self.tripped

    def oom_killed(self) -> bool:
        return self.tripped


class _Cgroup(NoLimit):
    """A cgroup of the replica's own; subclasses name one version's files."""

    events = ("", "")  # (file, key) counting the kernel's OOM kills
    peak_file = ""
    path: str

    def __init__(self, path: str, owns_parent: bool = False) -> None:
        self.path = path
        self.owns_parent = owns_parent  # `<own cgroup>/<group>`: removed once empty

    def join(self, pid: int | None = None) -> None:
        # Runs between fork and exec: plain os calls only.
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid() if pid is None else pid).encode())
        finally:
            os.close(fd)

    def oom_killed(self) -> bool:
        name, key = self.events
        for line in _read(os.path.join(self.path, name)).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == key:
                return int(parts[1]) > 0
        return False

    def peak_bytes(self) -> int | None:
        try:
            return int(_read(os.path.join(self.path, self.peak_file)).strip())
        except ValueError:
            return None

    def kill_all(self) -> None:
        for word in _read(os.path.join(self.path, "cgroup.procs")).split():
            try:
                os.kill(int(word), signal.SIGKILL)
            except ProcessLookupError:
                continue

    def close(self) -> None:
        # Killed tasks leave the cgroup a moment after the signal: retry for up to 2 s.
        deadline = time.monotonic() + 2.0
        while True:
            try:
                os.rmdir(self.path)
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    return
                self.kill_all()
                time.sleep(0.02)
        if self.owns_parent:
            # Leave no empty group cgroup behind; it fails while other replicas use it.
            try:
                os.rmdir(os.path.dirname(self.path))
            except OSError:
                return


class CgroupV1Limit(_Cgroup):
    mechanism = "cgroup-v1"
    events = ("memory.oom_control", "oom_kill")
    peak_file = "memory.max_usage_in_bytes"


class CgroupV2Limit(_Cgroup):
    mechanism = "cgroup-v2"
    events = ("memory.events", "oom_kill")
    peak_file = "memory.peak"

    def kill_all(self) -> None:
        kill = os.path.join(self.path, "cgroup.kill")  # Linux 5.14+: kills every task at once
        if os.path.exists(kill):
            try:
                _write(kill, "1")
                return
            except OSError:
                pass  # fall back to killing each task
        super().kill_all()


def group_name(launches_dir: str) -> str:
    """The cgroup holding one state dir's replica cgroups (no side effects)."""
    return f"{GROUP_PREFIX}{zlib.crc32(os.fsencode(launches_dir)):08x}"


def limit_for(
    launch_id: str, memory_mb: int | None, prefer: str = "auto", group: str = "perdure"
) -> NoLimit:
    """The limit of one replica (without `memory_mb`: a cgroup without a limit where one can
    be made, else NoLimit); MemoryLimitError if `prefer` is unavailable."""
    limit = None if memory_mb is None else memory_mb * 1024 * 1024
    errors: list[str] = []
    for version in ("cgroup-v2", "cgroup-v1"):
        if prefer in ("auto", version):
            try:
                return _make_cgroup(version, launch_id, limit, group)
            except OSError as err:
                errors.append(f"{version}: {err}")
    if limit is None:
        return NoLimit()
    if prefer in ("auto", "rss"):
        return RssLimit(limit)
    raise MemoryLimitError(
        f"memory mechanism {prefer!r} is not available here ({'; '.join(errors)}); "
        "use memory_mechanism='auto' to fall back to RSS polling"
    )


def _make_cgroup(version: str, launch_id: str, limit: int | None, group: str) -> NoLimit:
    owns_parent = not os.environ.get(CGROUP_PARENT_ENV)
    for attempt in range(3):
        path = os.path.join(_parent_dir(version, group), launch_id)
        if os.path.exists(path):  # left by a supervisor that was killed: empty it, start over
            _Cgroup(path).close()
        try:
            os.mkdir(path)
            break
        except FileNotFoundError:  # another replica's exit removed the empty parent just now
            if attempt == 2:
                raise
    try:
        if version == "cgroup-v1":
            if limit is not None:
                _write(os.path.join(path, "memory.limit_in_bytes"), str(limit))
                # No swapping past the limit (the file exists only with swap accounting).
                _try_write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(limit))
            # A warm standby joins with torch already imported: bring its anonymous memory
            # along, so it counts as it would in a cold start (v2 cannot move charges).
            _try_write(os.path.join(path, "memory.move_charge_at_immigrate"), "1")
            return CgroupV1Limit(path, owns_parent)
        if limit is not None:
            _write(os.path.join(path, "memory.max"), str(limit))
            _try_write(os.path.join(path, "memory.swap.max"), "0")
        return CgroupV2Limit(path, owns_parent)
    except OSError:
        os.rmdir(path)
        raise


class CgroupParentError(BackendSettingError):
    """`$PERDURE_CGROUP_PARENT` names no usable cgroup directory."""


def cgroup_parent() -> tuple[str, str] | None:
    """`$PERDURE_CGROUP_PARENT` and its version, None when unset; CgroupParentError when it is
    relative or not a cgroup directory."""
    parent = os.environ.get(CGROUP_PARENT_ENV)
    if not parent:
        return None
    setting = f"{CGROUP_PARENT_ENV}={parent}"
    if not os.path.isabs(parent):
        raise CgroupParentError(
            f"{setting} is a relative path, which each replica would read from its own working "
            "directory: give the absolute path of a cgroup directory this user can write, such "
            f"as {_example_parent()}")
    if os.path.exists(os.path.join(parent, "cgroup.controllers")):
        return parent, "cgroup-v2"
    if os.path.exists(os.path.join(parent, "memory.limit_in_bytes")):
        return parent, "cgroup-v1"
    what = "does not exist" if not os.path.isdir(parent) else "is not a cgroup directory"
    raise CgroupParentError(
        f"{setting} {what} (no cgroup.controllers for v2, no memory.limit_in_bytes for v1's "
        f"memory controller): give a cgroup directory this user can write, such as "
        f"{_example_parent()}, or unset it")


def _example_parent() -> str:
    for version in ("cgroup-v2", "cgroup-v1"):
        try:
            return os.path.join(own_cgroup_dir(version), "perdure")
        except OSError:
            continue
    return "/sys/fs/cgroup/<a delegated subtree>/perdure"


def _parent_dir(version: str, group: str) -> str:
    try:
        override = cgroup_parent()
    except CgroupParentError as exc:
        raise OSError(str(exc)) from None
    if override is not None:
        parent, found = override
        if found != version:
            raise OSError(f"{CGROUP_PARENT_ENV}={parent} is a {found} directory, not {version}")
    else:
        holder = own_cgroup_dir(version)
        if version == "cgroup-v2":
            if "memory" not in _read(os.path.join(holder, "cgroup.controllers")).split():
                raise OSError(f"the memory controller is not available in {holder}")
            # Fails (EBUSY) when `holder` has processes of its own and is not the root cgroup.
            _write_controller(os.path.join(holder, "cgroup.subtree_control"))
        elif not os.path.exists(os.path.join(holder, "memory.limit_in_bytes")):
            raise OSError(f"{holder} is not a cgroup v1 memory directory")
        parent = os.path.join(holder, group)
        os.makedirs(parent, exist_ok=True)
    if version == "cgroup-v2":
        _write_controller(os.path.join(parent, "cgroup.subtree_control"))
    return parent


def _write_controller(subtree_control: str) -> None:
    if "memory" not in _read(subtree_control).split():
        _write(subtree_control, "+memory")


def own_cgroup_dir(version: str) -> str:
    """This process's cgroup directory in the `version` hierarchy; OSError if there is none."""
    mounts = _cgroup_mounts()
    for line in _read("/proc/self/cgroup").splitlines():
        _, controllers, path = line.split(":", 2)
        if version == "cgroup-v2" and controllers == "" and "cgroup2" in mounts:
            mount_root, mount_point = mounts["cgroup2"]
        elif version == "cgroup-v1" and "memory" in controllers.split(","):
            if "memory" not in mounts:
                break
            mount_root, mount_point = mounts["memory"]
        else:
            continue
        relative = os.path.relpath(path, mount_root) if path.startswith(mount_root) else "."
        return os.path.realpath(os.path.join(mount_point, relative))
    raise OSError(f"this process is in no {version} memory hierarchy")


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """{"cgroup2" | "memory": (root inside the hierarchy, mount point)}."""
    found: dict[str, tuple[str, str]] = {}
    for line in _read("/proc/self/mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2":
            found.setdefault("cgroup2", (root, point))
        elif tail[0] == "cgroup" and "memory" in tail[2].split(","):
            found.setdefault("memory", (root, point))
    return found


def _unescape(field: str) -> str:
    # mountinfo escapes spaces, tabs, newlines and backslashes as octal.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _read(path: str) -> str:
    """The file's text, "" when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _try_write(path: str, text: str) -> None:
    with contextlib.suppress(OSError):
        _write(path, text)


def remove_cgroup(path: str) -> None:
    """Kill what is left in a replica's cgroup and remove it (after its supervisor died)."""
    if os.path.isdir(path):
        group = os.path.basename(os.path.dirname(path))
        _Cgroup(path, owns_parent=group == "perdure" or group.startswith(GROUP_PREFIX)).close()

