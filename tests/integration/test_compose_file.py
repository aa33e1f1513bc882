"""docker-compose.yml, without Docker: its shape (a healthcheck per node that Compose can wait on, ports
published on 127.0.0.1 only, no metrics port while metrics are off, a stop grace above the controlled
shutdown), and its nodes started on this host exactly as Compose would start them: each service's
`command` run by `sh -c` with the service's `environment` (the image's /etc/odradek/server.properties is
configs/server.properties), then each service's healthcheck run until healthy, then an acks=all write.

What Docker would provide is translated, and nothing else: each container has its own address, so the
nodes' names (odradek1..3), their bind address 0.0.0.0 and the host's `localhost` become 127.0.0.1 with a
free port per (node, port); the volume becomes a temporary directory.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest

from odradek.broker.cluster_tool import STOP_GRACE_PERIOD_S

yaml = pytest.importorskip("yaml")

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGE_CONFIG = "/etc/odradek/server.properties"
VOLUME = "/var/lib/odradek"
# host:port as the compose file writes it: a node's name, the bind-all address, or the node itself.
_ADDRESS = re.compile(r"\b(odradek(\d+)|0\.0\.0\.0|127\.0\.0\.1|localhost):(\d+)\b")


def compose_file() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    total = 0.0
    for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration):
        total += float(amount) * units[unit]
    return total


def test_compose_file_shape():
    services = compose_file()["services"]
    assert sorted(services) == ["odradek1", "odradek2", "odradek3"]
    for name, service in services.items():
        node_id = int(name.removeprefix("odradek"))
        env = service["environment"]
        assert env["ODRADEK_NODE_ID"] == str(node_id)
        # Readiness to wait on: a command Docker runs in the container (no shell), against the node itself.
        check = service["healthcheck"]
        assert check["test"][0] == "CMD" and check["test"][1] == "python"
        assert f"healthcheck('127.0.0.1:9092', {node_id})" in check["test"][-1]
        assert _seconds(check["start_period"]) >= 60 and check["retries"] >= 3
        # Published on the host's loopback only; 9404 only with metrics on.
        assert service["ports"], name
        for port in service["ports"]:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond 127.0.0.1"
        if "ODRADEK_METRICS_PORT" not in env:
            assert not any(str(port).endswith(":9404") for port in service["ports"])
        assert "9404" not in str(service.get("expose", ""))
        # Docker's SIGKILL comes after stop_grace_period: above the controlled shutdown (10 s) + drain (5 s).
        assert _seconds(service["stop_grace_period"]) >= 15
        assert _seconds(service["stop_grace_period"]) == STOP_GRACE_PERIOD_S
        assert service["restart"] == "unless-stopped"
        assert f"{name}-data:{VOLUME}" in service["volumes"]


class ComposeNode:
    """One service run on the host as Compose runs it in its container."""

    def __init__(self, name: str, service: dict, ports: dict[int, dict[int, int]], base: pathlib.Path):
        self.name = name
        self.node_id = int(name.removeprefix("odradek"))
        self.ports = ports
        self.data = base / name
        self.output: list[str] = []
        env = {k: v for k, v in os.environ.items() if not k.startswith("ODRADEK_")}
        env.update({k: self.translate(str(v)) for k, v in service["environment"].items()})
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # `odradek`
        env["PYTHONUNBUFFERED"] = "1"
        self.env = env
        command = service["command"]
        assert command[:2] == ["sh", "-c"]
        self.command = ["sh", "-c", self.translate(command[2].replace("$$", "$"))]
        check = service["healthcheck"]["test"]
        assert check[:2] == ["CMD", "python"]
        self.healthcheck = [sys.executable, *[self.translate(arg) for arg in check[2:]]]
        self.proc: subprocess.Popen | None = None

    def translate(self, text: str) -> str:
        def address(match: re.Match) -> str:
            node = int(match.group(2)) if match.group(2) else self.node_id
            return f"127.0.0.1:{self.ports[node][int(match.group(3))]}"

        text = _ADDRESS.sub(address, text)
        return text.replace(IMAGE_CONFIG, str(ROOT / "configs" / "server.properties")).replace(VOLUME, str(self.data))

    def start(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.data, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=lambda: self.output.extend(self.proc.stdout), daemon=True).start()

    def healthy(self) -> bool:
        done = subprocess.run(self.healthcheck, env=self.env, capture_output=True, text=True, timeout=30)
        return done.returncode == 0

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()  # `exec` made the broker the shell's process: this is Docker's SIGTERM
        try:
            self.proc.wait(STOP_GRACE_PERIOD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not stop within stop_grace_period") from None


def _free_ports(count: int) -> list[int]:
    import socket

    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_each_services_settings_start_a_node_that_turns_healthy_and_takes_writes(tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    services = compose_file()["services"]
    # Every port a service's settings name (listeners, voters, healthcheck), per node.
    ports: dict[int, dict[int, int]] = {}
    for name, service in services.items():
        node_id = int(name.removeprefix("odradek"))
        text = " ".join(str(v) for v in service["environment"].values()) + " " + " ".join(service["healthcheck"]["test"])
        ports.setdefault(node_id, {})
        for match in _ADDRESS.finditer(text):
            node = int(match.group(2)) if match.group(2) else node_id
            ports.setdefault(node, {}).setdefault(int(match.group(3)), 0)
    free = iter(_free_ports(sum(len(p) for p in ports.values())))
    ports = {node: {port: next(free) for port in node_ports} for node, node_ports in ports.items()}

    nodes = [ComposeNode(name, service, ports, tmp_path) for name, service in sorted(services.items())]
    try:
        nodes[0].start()
        # One voter of three has no quorum: its listeners are bound but it has not caught up with the
        # metadata log, so it must not say it is healthy.
        deadline = time.monotonic() + 60
        while not any("listening on PLAINTEXT" in line for line in list(nodes[0].output)):
            assert nodes[0].proc.poll() is None and time.monotonic() < deadline, "".join(nodes[0].output[-40:])
            time.sleep(0.1)
        assert not nodes[0].healthy()
        for node in nodes[1:]:
            node.start()
        deadline = time.monotonic() + 120
        pending = list(nodes)
        while pending:
            for node in list(pending):
                assert node.proc.poll() is None, f"{node.name} exited:\n" + "".join(node.output[-40:])
                if node.healthy():
                    pending.remove(node)
            assert time.monotonic() < deadline, "not healthy: " + ", ".join(
                f"{n.name}:\n" + "".join(n.output[-20:]) for n in pending)
            time.sleep(0.5)
        # Healthy means takes writes: acks=all, through the EXTERNAL listener as a client on the host does.
        external = services["odradek1"]["environment"]["ODRADEK_ADVERTISED_LISTENERS"]
        bootstrap = nodes[0].translate(re.search(r"EXTERNAL://([^,]+)", external).group(1))
        errors: list = []
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                             "message.timeout.ms": 30000})
        producer.produce("compose-check", b"v", on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(40)
        assert errors == [None]
    finally:
        for node in reversed(nodes):
            node.stop()
    for node in nodes:
        assert node.proc.returncode == 0, f"{node.name} exited {node.proc.returncode}:\n" + "".join(node.output[-20:])
