"""The ports the test servers start on (tests/services/oci.py free_port): never from the
kernel's ephemeral range, where any client's source port could take one before the server
binds it."""

from __future__ import annotations

import socket

from tests.services import oci


def test_ports_are_free_and_below_the_ephemeral_range():
    low, _ = oci.ephemeral_range()
    ports = [oci.free_port() for _ in range(200)]
    assert all(oci.PORTS_FROM <= port < low for port in ports)
    assert len(set(ports)) > 150  # drawn at random, not counted up from one place
    for port in ports[:20]:
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))


def test_a_taken_port_is_passed_over(monkeypatch):
    with socket.socket() as held, socket.socket() as probe:
        held.bind(("127.0.0.1", 0))
        held.listen()
        probe.bind(("127.0.0.1", 0))
        spare = probe.getsockname()[1]
        probe.close()
        draws = iter([held.getsockname()[1], spare])

        class Fixed:
            def randrange(self, start, stop):
                return next(draws)

        monkeypatch.setattr(oci.random, "SystemRandom", Fixed)
        assert oci.free_port() == spare


def test_a_low_ephemeral_range_falls_back_to_the_kernels_choice():
    low, high = oci.ephemeral_range()
    port = oci.free_port((oci.PORTS_FROM + 10, 60999))  # too few ports below it to draw from
    assert low <= port <= high  # bind to port 0: the kernel's ephemeral range


def test_an_unreadable_range_is_linuxs_default(tmp_path):
    assert oci.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    (tmp_path / "garbled").write_text("32768\n")
    assert oci.ephemeral_range(tmp_path / "garbled") == (32768, 60999)
    (tmp_path / "set").write_text("40000\t50000\n")
    assert oci.ephemeral_range(tmp_path / "set") == (40000, 50000)
