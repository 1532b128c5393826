"""`integrations: [transformers]` / `[lightning]` in a pool: perdure's integration in every
Trainer an unmodified script makes.

A replica's interpreter calls `install()` as it starts (a cold one through `boot/`'s
sitecustomize, a warm standby before it runs the script); it adds an import hook that wraps the
framework's `Trainer` when its module is imported. In a pool that lists the framework, the
Trainer gets perdure's callback (and, for Lightning, `PerdureCheckpointIO`, whose newest
committed checkpoint `fit` resumes from) unless the script gave its own; in a pool that does
not, the job's first Trainer sends one event naming the spec line that would add it.

Nothing here imports a framework: this module is imported at every replica's start.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

ENV = "PERDURE_INTEGRATIONS"  # the pool's `integrations:`, comma-separated (core.launchenv)
# The directory whose sitecustomize.py calls `install` in a cold interpreter
BOOT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot")
# The module that defines each framework's Trainer -> the framework's name in the spec
WATCHED = {"transformers.trainer": "transformers", "lightning.pytorch.trainer.trainer": "lightning"}
CALLBACK = "PerdureCallback"  # the class name of both integrations' callbacks

_installed = False


def with_boot(pythonpath: str) -> str:
    """PYTHONPATH with BOOT_DIR first: what a replica's supervisor gives it."""
    parts = pythonpath.split(os.pathsep) if pythonpath else []
    return os.pathsep.join([BOOT_DIR, *(p for p in parts if p != BOOT_DIR)])


def without_boot(pythonpath: str) -> str:
    """PYTHONPATH as it was before `with_boot`."""
    return os.pathsep.join(p for p in pythonpath.split(os.pathsep) if p != BOOT_DIR)


def wanted() -> set[str]:
    """The frameworks this replica's pool lists."""
    return {x for x in os.environ.get(ENV, "").split(",") if x}


def install() -> None:
    """Wrap each watched Trainer now if its module is imported, else when it is (once)."""
    global _installed
    if _installed or not os.environ.get("PERDURE_JOB_ID"):
        return
    _installed = True
    for name, framework in WATCHED.items():
        module = sys.modules.get(name)
        if module is not None:
            _wrap(framework, module)
    sys.meta_path.insert(0, _Finder())


class _Finder:
    """Finds nothing itself: it has the next finder find a watched module, and wraps that
    module's Trainer once its code has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        framework = WATCHED.get(fullname)
        if framework is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None and spec.loader is not None:
                _after_exec(spec.loader, lambda module: _wrap(framework, module))
                return spec
        return None


def _after_exec(loader: Any, then: Callable[[ModuleType], None]) -> None:
    run = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        run(module)
        then(module)

    loader.exec_module = exec_module  # this loader loads this one file only


def _wrap(framework: str, module: ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    if cls is None or getattr(cls, "_perdure_wrapped", False):
        return
    cls._perdure_wrapped = True
    if framework not in wanted():
        _detect(framework, cls)
    elif framework == "transformers":
        _install_hf(cls)
    else:
        _install_lightning(cls)


# ---- the integrations --------------------------------------------------------------------


def _bind(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments by name (None: they do not fit; the call then raises its own)."""
    import inspect

    try:
        return inspect.signature(function).bind(*args, **kwargs)
    except TypeError:
        return None


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _has_callback(callbacks: list[Any], cls: type) -> bool:
    return any(c is cls or isinstance(c, cls) for c in callbacks)


def _add_callback(bound: Any, cls: type) -> None:
    """A `cls()` appended to the call's callbacks, unless the script gave one."""
    callbacks = _as_list(bound.arguments.get("callbacks"))
    if not _has_callback(callbacks, cls):
        bound.arguments["callbacks"] = [*callbacks, cls()]


def _install_hf(cls: Any) -> None:
    original_init, original_add = cls.__init__, cls.add_callback

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from perdure.integrations.hf_callback import PerdureCallback

        bound = _bind(original_init, (self, *args), kwargs)
        if bound is None:
            original_init(self, *args, **kwargs)
            return
        _add_callback(bound, PerdureCallback)
        original_init(*bound.args, **bound.kwargs)

    def add_callback(self: Any, callback: Any) -> None:
        from perdure.integrations.hf_callback import PerdureCallback

        if _has_callback([callback], PerdureCallback) and (
                _has_callback(self.callback_handler.callbacks, PerdureCallback)):
            return  # perdure's is there already (the spec's integrations: put it in)
        original_add(self, callback)

    __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
    cls.__init__, cls.add_callback = __init__, add_callback


def _install_lightning(cls: Any) -> None:
    original_init, original_fit = cls.__init__, cls.fit

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO

        from perdure.integrations.lightning import PerdureCallback, PerdureCheckpointIO

        bound = _bind(original_init, (self, *args), kwargs)
        if bound is None:
            original_init(self, *args, **kwargs)
            return
        _add_callback(bound, PerdureCallback)
        plugins = _as_list(bound.arguments.get("plugins"))
        io = next((p for p in plugins if isinstance(p, PerdureCheckpointIO)), None)
        if io is None and not any(isinstance(p, CheckpointIO) for p in plugins):
            io = PerdureCheckpointIO()
            bound.arguments["plugins"] = [*plugins, io]
        original_init(*bound.args, **bound.kwargs)
        self._perdure_io = io

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        io = getattr(self, "_perdure_io", None)
        bound = _bind(original_fit, (self, *args), kwargs)
        if io is not None and bound is not None and bound.arguments.get("ckpt_path") is None:
            bound.arguments["ckpt_path"] = io.latest()  # None on the first run
            return original_fit(*bound.args, **bound.kwargs)
        return original_fit(self, *args, **kwargs)

    __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
    fit.__wrapped__ = original_fit  # type: ignore[attr-defined]
    cls.__init__, cls.fit = __init__, fit


# ---- a Trainer without the integration -----------------------------------------------------


def _detect(framework: str, cls: Any) -> None:
    original = cls.__init__
    told = False

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal told
        original(self, *args, **kwargs)
        if told:
            return
        told = True
        handler = getattr(self, "callback_handler", None)
        callbacks = handler.callbacks if handler is not None else getattr(self, "callbacks", [])
        if not any(type(c).__name__ == CALLBACK for c in callbacks) and _first_launch():
            _tell(missing(framework, f"{cls.__module__.split('.')[0]}.Trainer"))

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    cls.__init__ = __init__


def missing(framework: str, trainer: str) -> str:
    """The event of a replica whose script makes a Trainer without perdure's integration."""
    replica = os.environ.get("PERDURE_REPLICA", "a replica")
    pool = os.environ.get("ROLE_NAME", "the pool")
    return (f"{replica} made a {trainer} without perdure's integration: a restart resumes "
            f"only as the script itself does; add `integrations: [{framework}]` to pool "
            f"{pool} in the spec for resume, preemption saves and progress with no code change")


def _first_launch() -> bool:
    """Rank 0 of the job's first launch: one event per job, not one per rank and restart."""
    env = os.environ
    return (env.get("RANK", "0") == "0" and env.get("LOCAL_RANK", "0") == "0"
            and env.get("PERDURE_RESTART_COUNT", "0") == "0"
            and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
            and env.get("PERDURE_ATTEMPT", "1") == "1")


def _tell(message: str) -> None:
    try:
        from perdure.runtime import goodput

        goodput.note(message)
        goodput.flush()
    except Exception as exc:  # never the script's failure
        print(f"perdure: {message} (could not tell the controller: {exc})", file=sys.stderr)
