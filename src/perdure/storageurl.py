"""Whether a storage location (a checkpoint dir, a data source) is one perdure can use: a
path, or a URL whose scheme and bucket are right and that holds no credentials.

`problem` answers in words that never quote the URL (it may hold a password): the caller
names the field. The spec checks every storage field with it at validate, and the runtime
each URL it is handed (from the environment too) before it writes a byte.

Top-level so that the core and the runtime share it. No side effects.
"""

from __future__ import annotations

import ipaddress
import re

from perdure.secrecy import has_userinfo

# What a spec may name: what the runtime serves (a path, file://, s3:// with perdure's own
# client, memory:// for one-process jobs and tests) and gs:// for an exported JobSet, whose
# image brings its own gcsfs. The runtime itself takes any fsspec URL.
SPEC_SCHEMES = ("file", "s3", "gs", "gcs", "memory")
BUCKETS = ("s3", "gs", "gcs")
CREDENTIALS = ("holds credentials (user:password@ in the URL), which would be shown and "
               "stored wherever the URL is: remove them; credentials belong in the "
               "environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an "
               "instance role)")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_ONE_SLASH = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(?!//)")
_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]\Z")
_GS_BUCKET = re.compile(r"[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9]\Z")


def problem(url: str, schemes: tuple[str, ...] | None = SPEC_SCHEMES) -> str | None:
    """Why `url` cannot be a storage location, or None if it can. `schemes`: those allowed
    (None: any, as fsspec resolves them). The answer never quotes `url`."""
    for part in url.split("::"):  # fsspec's chained URLs: simplecache::s3://bucket/x
        found = _part_problem(part, schemes)
        if found:
            return found
    return None


def _part_problem(url: str, schemes: tuple[str, ...] | None) -> str | None:
    m = _SCHEME.match(url)
    if m is None:
        return _path_problem(url)
    scheme, rest = m.group(1), url[m.end():]
    authority = rest.split("/", 1)[0]
    if has_userinfo(url) or "@" in authority:
        return CREDENTIALS
    known = schemes or SPEC_SCHEMES
    if scheme != scheme.lower() and scheme.lower() in known:
        return f"the scheme {scheme}:// is not written in lowercase: write {scheme.lower()}://"
    if schemes is not None and scheme not in schemes:
        return (f"{scheme}:// is not a storage perdure can write to; use a path, or a URL "
                f"with one of {', '.join(s + '://' for s in schemes)}")
    if scheme in BUCKETS:
        return _bucket_problem(scheme, authority)
    return None


def _path_problem(path: str) -> str | None:
    """A path that is a URL with a slash missing (`s3:/ckpt/x` would be written to
    ./s3:/ckpt/x on the local disk)."""
    m = _ONE_SLASH.match(path)
    if m and (m.group(1).lower() in SPEC_SCHEMES or path[m.end():].startswith("/")):
        return (f"{m.group(1)}: without '//' is a local path, not a URL: write "
                f"{m.group(1).lower()}://BUCKET/PREFIX for object storage, or ./{m.group(1)}:... "
                "for a local directory of that name")
    return None


def _bucket_problem(scheme: str, bucket: str) -> str | None:
    if not bucket:
        return f"names no bucket: write {scheme}://BUCKET/PREFIX"
    rule = _S3_BUCKET if scheme == "s3" else _GS_BUCKET
    ip = True
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        ip = False
    if not rule.match(bucket) or ".." in bucket or ip or bucket.startswith("xn--"):
        chars = "'.' and '-'" if scheme == "s3" else "'.', '-' and '_'"
        return (f"the bucket name is not valid: lowercase letters, digits, {chars} "
                "(3 to 63 of them), starting and ending with a letter or digit, not an IP "
                f"address ({scheme}://BUCKET/PREFIX)")
    return None


__all__ = ["BUCKETS", "CREDENTIALS", "SPEC_SCHEMES", "problem"]
