"""The snapshot holder never listens on every interface, however the wildcard is spelled."""

from __future__ import annotations

import socket

import pytest

from perdure.runtime.elastic.holder import Holder
from perdure.runtime.elastic.wire import check_bind

# What the socket takes for 0.0.0.0 or :: (inet_aton's short and hex forms included).
WILDCARDS = ["0", "0x0", "0.0", "00", "0.00", "0.0.0.0", "::", "0::0", "::ffff:0.0.0.0", ""]


@pytest.mark.parametrize("host", ["0", "0x0", "0.0"])
def test_the_socket_reads_these_as_every_interface(host: str) -> None:
    # why the check must resolve as bind does (bind resolves through getaddrinfo)
    found = socket.getaddrinfo(host, 0, socket.AF_INET, socket.SOCK_STREAM)
    assert found[0][4][0] == "0.0.0.0"


@pytest.mark.parametrize("host", WILDCARDS)
def test_a_wildcard_in_any_spelling_is_refused(host: str) -> None:
    with pytest.raises(ValueError, match="every interface"):
        Holder(host=host, secret="s" * 32, allowed=lambda name: True)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "localhost"])
def test_one_interface_is_taken(host: str) -> None:
    check_bind(host, "host")
    holder = Holder(host=host, secret="s" * 32, allowed=lambda name: True)
    try:
        assert holder.port > 0
    finally:
        holder.close()
