"""Network probes as the kubelet runs them, from outside the pod: read a JSON list of
``{pod, container, probe, kind, ip, spec, timeout_s}`` on stdin, run them all at once,
print one JSON result per line. ``kind``: ``grpc`` (grpc.health.v1 Check of
``spec.service``, default "": success is SERVING), ``httpGet`` (a status of 200-399),
``tcpSocket`` (a connection). Run by ``cluster.Release.probes`` in the client namespace."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def probe(ask: dict[str, Any]) -> dict[str, Any]:
    spec, ip, timeout = ask["spec"], ask["ip"], ask["timeout_s"]
    ok, detail = False, ""
    try:
        if ask["kind"] == "grpc":
            with grpc.insecure_channel(f"{ip}:{spec['port']}") as channel:
                status = (
                    health_pb2_grpc.HealthStub(channel)
                    .Check(health_pb2.HealthCheckRequest(service=spec.get("service", "")), timeout=timeout)
                    .status
                )
            ok, detail = (
                status == health_pb2.HealthCheckResponse.SERVING,
                health_pb2.HealthCheckResponse.ServingStatus.Name(status),
            )
        elif ask["kind"] == "httpGet":
            url = f"http://{ip}:{spec['port']}{spec.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as answer:
                    code = answer.status
            except urllib.error.HTTPError as exc:
                code = exc.code
            ok, detail = 200 <= code < 400, f"HTTP {code}"
        elif ask["kind"] == "tcpSocket":
            with socket.create_connection((ip, spec["port"]), timeout=timeout):
                ok, detail = True, "connected"
        else:
            detail = f"unknown probe kind {ask['kind']}"
    except grpc.RpcError as exc:
        detail = f"{exc.code().name}: {exc.details()}"
    except OSError as exc:
        detail = f"{type(exc).__name__}: {exc}"
    out = {k: ask[k] for k in ("pod", "container", "probe", "kind")}
    return {**out, "ok": ok, "detail": detail}


def main() -> None:
    asks = json.load(sys.stdin)
    with ThreadPoolExecutor(max_workers=16) as pool:
        for result in pool.map(probe, asks):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
