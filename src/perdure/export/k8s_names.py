"""The names a JobSet export takes from its flags and the spec, checked before anything is built.

No side effects. Each check raises ExportError naming the flag or field and what is allowed.
A user's env name must be one Kubernetes takes (`[-._a-zA-Z][-._a-zA-Z0-9]*`, the rule every
supported release enforces), and none perdure sets: it would shadow perdure's value in
`$(NAME)` references (a `PERDURE_POD_INDEX: "7"` gave every pod `RANK=7`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from perdure.core.spec import JobSpec
from perdure.export.gaps import ExportError

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"{_LABEL}\Z")
DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")
MAX_LABEL = 63  # a DNS label, and a label value (queue and priority names are label values)

# A container image reference: [REGISTRY[:PORT]/]PATH[:TAG][@DIGEST], as registries parse it.
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_PART = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_REGISTRY = rf"{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE = re.compile(
    rf"^(?P<name>(?:{_REGISTRY}/)?{_PATH_PART}(?:/{_PATH_PART})*)(?::{_TAG})?(?:@{_DIGEST})?\Z"
)
MAX_IMAGE_NAME = 255
INT32 = (-(2**31), 2**31 - 1)
_POD_SUFFIX = 5  # the Job controller appends -<5 random characters> to each pod's name
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")  # .match: no trailing newline
# Defaults perdure gives that a user may override (the contract's own names always win).
OVERRIDABLE = frozenset({"OMP_NUM_THREADS"})


def check_image(image: str) -> None:
    m = IMAGE.match(image)
    if m is None or len(m.group("name")) > MAX_IMAGE_NAME:
        raise ExportError(
            f"--image {image!r}: not a container image reference; write "
            "[REGISTRY/]NAME[:TAG][@DIGEST] with a lowercase name, e.g. ghcr.io/acme/train:1.0"
        )


def _check_name(value: str, what: str, pattern: re.Pattern[str], allowed: str) -> None:
    if not pattern.match(value) or len(value) > MAX_LABEL:
        raise ExportError(f"{what} {value!r}: use {allowed}, at most {MAX_LABEL} characters")


def check_pod_names(spec: JobSpec) -> None:
    """JobSet admits a set whose names are DNS-1035 labels: the JobSet's starts with a letter,
    and its longest pod name, <job>-<pool>-0-<index>-<5 random>, has at most 63 characters."""
    if not spec.name[0].isalpha():
        raise ExportError(f"name {spec.name!r}: a JobSet's name must start with a letter")
    for i, pool in enumerate(spec.pools):
        pod = f"{spec.name}-{pool.name}-0-{pool.replicas - 1}-{'x' * _POD_SUFFIX}"
        if len(pod) > MAX_LABEL:
            raise ExportError(
                f"name, pools.{i}.name: the pod name {pod!r} would have {len(pod)} characters; "
                f"Kubernetes allows {MAX_LABEL}: shorten the job's or the pool's name"
            )


def check_options(
    spec: JobSpec, image: str, queue: str | None, priority_class: str | None,
    namespace: str | None,
) -> None:
    """Every flag and the spec fields the export names things with; raise on the first bad."""
    check_image(image)
    subdomain = "lowercase letters, digits, '-' and '.'"
    if queue is not None:
        _check_name(queue, "--queue", DNS_SUBDOMAIN, subdomain)
    elif not DNS_SUBDOMAIN.match(spec.queue) or len(spec.queue) > MAX_LABEL:
        raise ExportError(f"queue {spec.queue!r} is not a Kueue LocalQueue name; pass --queue")
    if priority_class is not None:
        _check_name(priority_class, "--priority-class", DNS_SUBDOMAIN, subdomain)
    if namespace is not None:
        _check_name(namespace, "--namespace", DNS_LABEL, "lowercase letters, digits and '-'")
    if not INT32[0] <= spec.priority <= INT32[1]:
        raise ExportError(f"priority: {spec.priority} does not fit a WorkloadPriorityClass "
                          f"(a 32-bit value, {INT32[0]}..{INT32[1]})")
    check_pod_names(spec)


def priority_class_name(priority: int) -> str:
    """The WorkloadPriorityClass made for a spec priority: perdure-priority-100, ...-minus-5."""
    sign = "minus-" if priority < 0 else ""
    return f"perdure-priority-{sign}{abs(priority)}"


def _shown(name: str) -> str:
    return name if ENV_NAME.match(name) else repr(name)[:80]


def check_env(spec: JobSpec, reserved: Iterable[str]) -> None:
    """Refuse an env name Kubernetes rejects, or one of the names perdure sets (`reserved`)."""
    taken = set(reserved) - OVERRIDABLE
    where = [("env", spec.env)] + [(f"pools.{i}.env", p.env) for i, p in enumerate(spec.pools)]
    for field, env in where:
        for name in env:
            if not ENV_NAME.match(name):
                raise ExportError(
                    f"{field}.{_shown(name)}: Kubernetes refuses this environment variable "
                    "name; use letters, digits, '_', '-' and '.', not starting with a digit "
                    "(no spaces, tabs, newlines or non-ASCII characters)")
            if name in taken:
                raise ExportError(
                    f"{field}.{name}: perdure sets {name} in every pod (torchrun's and "
                    "perdure's environment); a value here would shadow it. Remove it, or "
                    "rename it")
