"""Container images for the Kubernetes test cluster, made here from local files (no registry).

`image_tar` writes a docker-archive tarball (manifest.json, the config, one layer) that
`ctr -n k8s.io images import` loads; pods name it with `imagePullPolicy: Never`. The pause
image holds k8s/cluster/pause (built by k8s/cluster/build.sh); the tools image is Debian's
static busybox.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping
from pathlib import Path

PAUSE_IMAGE = "perdure.local/pause:1"
TOOLS_IMAGE = "perdure.local/tools:1"
BUSYBOX = Path("/bin/busybox")
TOOLS = ("sh", "sleep", "cat", "echo", "hostname", "ls", "env", "true", "kill", "ps",
         "killall")


def _layer(files: Mapping[str, Path], links: Mapping[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(Path(p).parent).lstrip("/") for p in [*files, *links]} | {"tmp"})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        for path, src in sorted(files.items()):
            data = src.read_bytes()
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(links.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def image_tar(out: Path, tag: str, files: Mapping[str, Path], entrypoint: list[str],
              links: Mapping[str, str] | None = None) -> Path:
    """A one-layer image `tag` holding `files` (path in the image -> local file), as a
    docker-archive tarball at `out`."""
    layer = _layer(files, links or {})
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin:/usr/bin:/usr/local/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag],
                            "Layers": ["layer/layer.tar"]}]).encode()
    with tarfile.open(out, mode="w") as tar:
        for name, data in ((config_name, config), ("layer/layer.tar", layer),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def pause_image(out: Path, pause_binary: Path) -> Path:
    return image_tar(out, PAUSE_IMAGE, {"/pause": pause_binary}, ["/pause"])


def tools_image(out: Path) -> Path:
    """busybox and its applets (sh, sleep, ...) under /bin."""
    return image_tar(out, TOOLS_IMAGE, {"/bin/busybox": BUSYBOX}, ["/bin/sh"],
                     links={f"/bin/{t}": "busybox" for t in TOOLS})
