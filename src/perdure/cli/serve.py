"""The `perdure serve` command (its arguments; serve.server runs it).

Imports no web library at module level: `perdure` works without the serve extra.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated

import typer

from perdure.cli.common import Ctx, die, load_cluster
from perdure.cli.jobs import ClusterOpt, make_controller
from perdure.controller.loop import ControllerBusy


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def serve(
    c: typer.Context,
    host: Annotated[str, typer.Option(
        help="Address to listen on; anything but loopback needs --allow-remote.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port (0: a free one, printed).")] = 8470,
    cluster: ClusterOpt = None,
    no_controller: Annotated[bool, typer.Option(
        "--no-controller", help="Serve the API alone (a controller runs elsewhere).")] = False,
    allow_remote: Annotated[bool, typer.Option(
        "--allow-remote", help="Allow a non-loopback --host (put TLS in front of it).")] = False,
) -> None:
    """Run the controller with the HTTP API, the web dashboard and Prometheus metrics."""
    if not is_loopback(host) and not allow_remote:
        die(f"--host {host}: not a loopback address, so other machines could reach the API; "
            "pass --allow-remote to mean it (and serve it behind TLS)")
    ctx: Ctx = c.obj
    try:
        from perdure.serve.auth import Auth, TokenError, load_or_create_token, token_path
        from perdure.serve.context import ServeContext
        from perdure.serve.server import Service, bind
    except ImportError as exc:
        die(f"`perdure serve` needs the serve extra ({exc.name} is missing): "
            "pip install 'perdure[serve]'")
    try:
        token = load_or_create_token(ctx.state_dir)
    except TokenError as exc:
        die(str(exc))
    try:
        sock = bind(host, port)
    except OSError as exc:
        die(f"cannot listen on {host}:{port}: {exc.strerror}; pick another --port")
    controller = None if no_controller else make_controller(
        ctx, ctx.store(), load_cluster(ctx, cluster), cluster)
    if controller is not None:
        try:
            controller.start()
        except ControllerBusy as exc:
            controller.close()  # the backend it made (spawner, warm pool) goes with it
            die(f"{exc}; `perdure serve --no-controller` serves its state dir beside it")
    spec = controller.cluster if controller is not None else load_cluster(ctx, cluster)
    auth = Auth(token, token_path(ctx.state_dir))  # follows the file: a new token ends sessions
    service = Service(ServeContext(ctx.state_dir, spec, auth, Path.cwd()), sock, controller)
    typer.echo(f"perdure serve: {service.url} (state dir {ctx.state_dir}, token in "
               f"{ctx.state_dir / 'api-token'}, controller "
               f"{'elsewhere' if controller is None else 'in this process'})")
    raise typer.Exit(service.run())
