"""host:port strings, IPv6-aware."""

from __future__ import annotations


def join_host_port(host: str, port: int) -> str:
    """``("::1", 80)`` -> ``[::1]:80``; ``("a", 80)`` -> ``a:80``."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def split_host_port(address: str) -> tuple[str, int]:
    """``[::1]:80`` -> ``("::1", 80)``; raises ValueError when there is no numeric port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)
