"""The imperative shell around the pure core: tick loop, executor, clock."""

from perdure.controller.loop import Controller, ControllerBusy

__all__ = ["Controller", "ControllerBusy"]
