"""The per-replica supervisor: `python -m perdure.backends.node.supervisor <launch dir>`.

One supervisor runs each replica in a session of its own, so the stop escalation, the memory
limit and the exit record (`exit.json`) survive a controller crash. The first local rank to
fail fails the replica and the others are stopped, as torchrun's agent does; at the end it
kills whatever the replica left (it is a subreaper). A launch naming an `owner` process (a Ray
launch actor) takes the supervisor and replica down with it.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from typing import Any

from perdure import statedir
from perdure.backends.node import localranks, memory, procs
from perdure.backends.node.localranks import RANK_STOP_GRACE_SECONDS, child_env
from perdure.backends.node.replicalogs import Logs
from perdure.backends.node.standby import Standby, launch_fits
from perdure.runtime.abort import parse_abort
from perdure.runtime.errorfile import (
    last_lines,
    parse_traceback,
    read_error_file,
    read_stderr_tail,
)
from perdure.runtime.ranks import procs_of, rank_file

IDLE_WAKE_SECONDS = 1.0  # also the period of peak-RSS sampling when nothing else wakes us
SELF_STOP_GRACE_SECONDS = 10.0
STDERR_TAIL_BYTES = 64 * 1024


class Supervisor:
    """Runs one replica to its end and records how it ended (see the module docstring)."""

    def __init__(self, directory: str, standby: Standby | None = None) -> None:
        self.dir = directory
        self.standby = standby
        self.warm = False
        spec = statedir.read_json(self._file(statedir.LAUNCH))
        if spec is None:
            raise SystemExit(f"supervisor: {self._file(statedir.LAUNCH)} is missing or unreadable")
        self.spec: dict[str, Any] = spec
        self.limit: memory.NoLimit = memory.NoLimit()
        self.pid = 0  # local rank 0's process
        self.pids: list[int] = []  # every local rank's process, by local rank
        self.procs = procs_of(self.spec["env"])
        self.failed: tuple[int, int] | None = None  # (local rank, its wait status) first failed
        self.failed_at: float | None = None  # when: the others' stop must not count
        self.kill_at: float | None = None
        self.signal_at: tuple[int, float] | None = None  # a stop's signal, sent later
        self.applied_stop: tuple[int, float] | None = None
        self.peak_rss = 0
        self.next_sample = 0.0
        self.started_at = 0.0
        self.own_pid = os.getpid()
        own = procs.stat(self.own_pid)
        self.me = {"supervisor_pid": self.own_pid,  # in claim.json and status.json
                   "supervisor_start_ticks": own.start_ticks if own else 0}
        self.logs = Logs(self.spec)

    def _file(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def run(self) -> int:
        """Start the replica, supervise it, write exit.json; the supervisor's exit status."""
        if statedir.claim(self.dir, self.me) != self.me:
            print("supervisor: a restarted controller gave this launch up; not starting it")
            self._dismiss_standby()
            return 0
        procs.load_libc()
        procs.set_child_subreaper()
        self._watch_owner()
        try:
            self.limit = memory.limit_for(
                self.spec["launch_id"],
                self.spec.get("memory_mb"),
                self.spec.get("memory_mechanism", "auto"),
                memory.group_name(os.path.dirname(self.dir)),
            )
            self._spawn()
        except (OSError, ValueError, memory.MemoryLimitError) as err:
            self._dismiss_standby()
            self.limit.close()
            self.logs.close_relay()
            message, user_error = _spawn_failure(self.spec, err)
            statedir.write_json(self._file(statedir.EXIT), {
                "spawn_error": message, "user_error": user_error, "time": time.time()})
            print(f"supervisor: {message}", file=sys.stderr)
            return 1
        self._write_status()
        self._check_stop()  # a stop written before status.json was never signalled to us
        self._wait()
        return self._finish()

    def _spawn(self) -> None:
        """Start every local rank (rank 0 warm when it can), its output to the logs."""
        null_fd = os.open(os.devnull, os.O_RDONLY)
        try:
            self.logs.open()
            self.started_at = time.time()
            env = child_env(self.spec, self.dir)
            streams = self.logs.relay_streams(self.dir)
            self.pid = self._start_warm(env, streams) if self.procs == 1 else 0
            self.pids = [self.pid] if self.pid else []
            self._dismiss_standby()  # a multi-process replica starts cold
            for rank in range(len(self.pids), self.procs):
                self.pids.append(procs.spawn(
                    list(self.spec["command"]),
                    child_env(self.spec, self.dir, rank),
                    self.spec["cwd"],
                    (null_fd, self.logs.out_fd, self.logs.err_fd),
                    self._in_child,
                ))
            self.pid = self.pids[0]
        except OSError:
            for pid in self.pids:  # a rank that could not start: the others go too
                procs.kill_group(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            raise
        finally:
            self.logs.close_fds()
            os.close(null_fd)
        self.logs.start_relay()

    def _start_warm(self, env: dict[str, str], streams: dict[str, str] | None) -> int:
        """Run the replica in the standby's warm interpreter; its pid, 0 to start cold."""
        standby, self.standby = self.standby, None
        if standby is None:
            return 0
        command, cwd = list(self.spec["command"]), self.spec["cwd"]
        if not launch_fits(command, cwd, env, standby.env):
            standby.dismiss()
            return 0
        try:
            self.limit.join(standby.pid)  # before the script runs, as a cold child joins
            files = {"stdout": streams["out"], "stderr": streams["err"]} if streams else {}
            standby.start_replica(command, env, {**self.spec, **files})
        except OSError as err:
            print(f"supervisor: the warm start failed ({err}); starting cold", file=sys.stderr)
            standby.dismiss()
            return 0
        self.warm = True
        return standby.pid

    def _watch_owner(self) -> None:
        """Die with the launch's `owner` process as PDEATHSIG would have us."""
        owner = self.spec.get("owner")
        if not owner:
            return
        import threading  # only here: the local backend's supervisors never need it

        def watch() -> None:
            procs.wait_gone(int(owner["pid"]), int(owner["start_ticks"]))
            self._kill_groups(signal.SIGKILL)
            self.limit.kill_all()
            os.kill(self.own_pid, signal.SIGKILL)

        # Started with the handled signals blocked (`serve`): they still reach the main loop.
        threading.Thread(target=watch, name="owner", daemon=True).start()

    def _dismiss_standby(self) -> None:
        if self.standby is not None:
            self.standby.dismiss()
            self.standby = None

    def _in_child(self) -> None:
        # Between fork and exec, in the replica: undo the supervisor's signal mask, die with
        # the supervisor (checking it did not die before prctl), and join the memory limit.
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        procs.set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != self.own_pid:
            os._exit(1)
        self.limit.join()

    def _write_status(self) -> None:
        child = procs.stat(self.pid)
        ticks = child.start_ticks if child else 0
        statedir.write_json(
            self._file(statedir.STATUS),
            {
                **self.me,
                "pid": self.pid,
                "pgid": self.pid,
                "start_ticks": ticks,
                "create_time": procs.create_time(ticks) if child else self.started_at,
                "started_at": self.started_at,
                "memory_mechanism": self.limit.mechanism,
                "memory_mb": self.spec.get("memory_mb"),
                "cgroup": self.limit.path,
                # how the replica's whole process tree is found and killed at the end
                "tree": self.limit.mechanism if self.limit.path else "subreaper",
                "warm": self.warm,
                # every local rank's process (one entry for a one-process replica)
                "ranks": localranks.records(self.pids),
            },
        )

    def _wait(self) -> None:
        """Return when the replica has exited (it stays a zombie, holding its pid and group)."""
        while not self._child_exited():
            now = time.time()
            if self.kill_at is not None and now >= self.kill_at:
                self._kill_groups(signal.SIGKILL)
                self.kill_at = None
            if self.signal_at is not None and now >= self.signal_at[1]:
                self._kill_groups(self.signal_at[0])
                self.signal_at = None
            if now >= self.next_sample:
                self._sample_memory(now)
            later = (self.kill_at, self.signal_at[1] if self.signal_at else None)
            wake = min([self.next_sample, *(t for t in later if t is not None)])
            info = signal.sigtimedwait(procs.SUPERVISOR_SIGNALS, max(0.001, wake - time.time()))
            if info is None:
                continue
            if info.si_signo == signal.SIGUSR1:
                self._check_stop()
            elif info.si_signo != signal.SIGCHLD:
                # a Slurm preemption signals us and the replica at once: its save gets the
                # job's grace period
                grace = float(self.spec.get("self_stop_grace", SELF_STOP_GRACE_SECONDS))
                self._stop(signal.SIGTERM, time.time() + grace)

    def _child_exited(self) -> bool:
        """Whether every rank exited (the first to fail has the others stopped)."""
        localranks.reap_orphans(self.pids)
        running, failures = localranks.poll(self.pids)
        if self.failed is None and failures:
            self.failed, self.failed_at = failures[0], time.time()
            if self.procs > 1:
                self._stop_other_ranks(self.failed[0])
        return running == 0

    def _sample_memory(self, now: float) -> None:
        rss = procs.rss_bytes([p for pid in self.pids for p in procs.tree(pid)])
        self.peak_rss = max(self.peak_rss, rss)
        if self.limit.over_limit(rss):
            self._kill_groups(signal.SIGKILL)
        self.next_sample = now + (self.limit.poll_interval or IDLE_WAKE_SECONDS)
        if os.path.exists(self._file(statedir.STOP)):  # in case a SIGUSR1 was lost
            self._check_stop()

    def _check_stop(self) -> None:
        request = statedir.read_json(self._file(statedir.STOP))
        if request is None:
            return
        sig, deadline = int(request["signal"]), float(request["deadline"])
        if (sig, deadline) != self.applied_stop:
            self.applied_stop = (sig, deadline)
            self._stop(sig, deadline, float(request.get("signal_at") or 0.0))

    def _stop_other_ranks(self, failed: int) -> None:
        """Stop the other ranks, with a stop record (a bare SIGTERM reads as a preemption
        notice); at once after a rank a signal killed: they wait on it in a collective, where
        a SIGTERM handler never runs."""
        grace = 0.0 if localranks.killed(self.pids, failed) else RANK_STOP_GRACE_SECONDS
        deadline = time.time() + grace
        if not os.path.exists(self._file(statedir.STOP)):
            statedir.write_json(self._file(statedir.STOP), {
                "signal": int(signal.SIGTERM), "deadline": deadline,
                "reason": f"local rank {failed} of the replica failed", "notice": None})
            self.applied_stop = (int(signal.SIGTERM), deadline)  # ours: not applied twice
        self._stop(signal.SIGTERM, deadline)

    def _kill_groups(self, sig: int) -> None:
        for pid in self.pids:
            procs.kill_group(pid, sig)

    def _stop(self, sig: int, deadline: float, signal_at: float = 0.0) -> None:
        """`sig` now (or at `signal_at`), SIGKILL at `deadline`."""
        if signal_at > time.time():
            self.signal_at = (sig, signal_at)
        else:  # also in place of a later one still pending (a cancel during the grace)
            self.signal_at = None
            self._kill_groups(sig)
        if sig != signal.SIGKILL:
            self.kill_at = deadline if self.kill_at is None else min(self.kill_at, deadline)

    def _finish(self) -> int:
        exit_time = self.failed_at or time.time()
        # The replica is a zombie (its group id cannot be reused yet): kill what it left in
        # its group, its cgroup, and anywhere below us (a subreaper), such as a `setsid` daemon.
        self._kill_groups(signal.SIGKILL)
        self.limit.kill_all()
        procs.kill_descendants(self.own_pid)
        statuses, maxrss = localranks.reap(self.pids)
        localranks.reap_orphans(self.pids)
        self.logs.close_relay()  # before the traceback is read from stderr
        rank = self.failed[0] if self.failed else 0
        code = os.waitstatus_to_exitcode(statuses[rank])
        sig = -code if code < 0 else None
        exit_code = 128 + sig if sig is not None else code
        peak = max(self.peak_rss, maxrss * 1024)  # ru_maxrss is in KiB (Linux)
        cgroup_peak = self.limit.peak_bytes()
        oom = self.limit.oom_killed()
        self.limit.close()  # before exit.json: once the exit is seen, nothing is left behind
        tail = read_stderr_tail(self.spec["stderr"], self.logs.err_offset,
                                STDERR_TAIL_BYTES) if exit_code != 0 else ""
        statedir.write_json(
            self._file(statedir.EXIT),
            {
                "exit_code": exit_code,
                "signal": sig,
                "oom": oom,
                "time": exit_time,
                "peak_rss_mb": round(peak / 2**20, 1),
                "cgroup_peak_mb": round(cgroup_peak / 2**20, 1) if cgroup_peak else None,
                "memory_mechanism": self.limit.mechanism,
                "stop_signal": self.applied_stop[0] if self.applied_stop else None,
                "error": self._error(rank, tail) if exit_code != 0 else None,
                # the reason of a failure with no exception, quoted in its message
                "stderr_tail": last_lines(tail),
                "local_rank": rank if self.procs > 1 and exit_code != 0 else None,
            },
        )
        return 0

    def _error(self, rank: int, tail: str) -> dict[str, str] | None:
        error = read_error_file(self._file(rank_file(statedir.ERROR, rank)))
        return error or parse_traceback(tail) or parse_abort(tail)


def _spawn_failure(spec: dict[str, Any], err: Exception) -> tuple[str, bool]:
    """exit.json's message for a replica that could not start, and whether its command is to
    blame (no retry can help)."""
    exe = str(spec["command"][0])
    path = _where(exe, spec)
    code = err.errno if isinstance(err, procs.ExecError) else None
    if code == errno.ENOEXEC:  # an executable file the kernel cannot run: no #! line
        return (f"cannot start {exe!r}: {path} is not a program this system can run (exec: "
                "Exec format error); a script needs a first line naming its interpreter, "
                "such as #!/bin/sh or #!/usr/bin/env python3", True)
    message = f"cannot start {exe!r}: {err}"
    if code == errno.ENOENT and os.path.isfile(path):
        message += " (the file exists: is the interpreter on its #! line missing?)"
    return message, code in (errno.ENOENT, errno.EACCES)


def _where(exe: str, spec: dict[str, Any]) -> str:
    """The file `exe` names, as exec looks it up (relative to the replica's cwd, or on PATH)."""
    if os.sep in exe:
        return os.path.normpath(os.path.join(str(spec["cwd"]), exe))
    env = spec["env"]
    for folder in os.get_exec_path(env if "PATH" in env else None):
        candidate = os.path.join(folder, exe)
        if os.path.isfile(candidate):
            return candidate
    return exe


def main(argv: list[str] | None = None) -> int:
    """Entry point: `python -m perdure.backends.node.supervisor <launch dir>`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m perdure.backends.node.supervisor <launch dir>", file=sys.stderr)
        return 2
    return serve(args[0])


def serve(directory: str, standby: Standby | None = None) -> int:
    """Supervise the launch in `directory`, in the warm `standby` if it fits; the exit status."""
    # Block the signals we handle before anything else, so none can kill us before the loop.
    signal.pthread_sigmask(signal.SIG_BLOCK, procs.SUPERVISOR_SIGNALS)
    directory = os.path.abspath(directory)
    # What it prints goes to its own log from here on (until now: the spawner's shared one).
    log = os.open(
        os.path.join(directory, statedir.SUPERVISOR_LOG),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o600,
    )
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    return Supervisor(directory, standby).run()


if __name__ == "__main__":
    sys.exit(main())
