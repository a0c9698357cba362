"""The MQTT listener's transports against a real relay: TLS with ``mosquitto_sub`` and
``mosquitto_pub`` (``--cafile``, client certificates), and MQTT over WebSockets on the relay's
port with MQTT.js (the npm package ``mqtt``, run by Node.js from ``tests/mqtt/mqttjs``; ``npm
ci`` there once if its ``node_modules`` is missing), and its browser bundle in a page in headless
Chromium. Certificates are made in the test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from tests.mqtt.test_listener import mosquitto, port_of
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from fanout.errors import ConfigError
from fanout.mqtt import packets as p
from fanout.mqtt.decoding import decode, split
from fanout.mqtt.encoding import encode
from fanout.relay.config import Listening, Mqtt
from fanout.relay.shell.server import RelayServer
from fanout.testing.certs import self_signed
from fanout.testing.needs import need
from fanout.testing.ports import LOOPBACK
from fanout.testing.publisher import ScriptedPublisher, serving
from fanout.testing.relays import running_relay
from fanout.testing.wait import eventually
from fanout.wire.messages import Catalog

MQTTJS = Path(__file__).parent / "mqttjs"


@asynccontextmanager
async def relay_with(mqtt: Mqtt, **sections: object) -> AsyncIterator[RelayServer]:
    async with (
        serving(ScriptedPublisher(Catalog([]))) as url,
        running_relay(url, mqtt=mqtt, **sections) as (server, _),
    ):
        yield server


async def failing(*args: str) -> str:
    """Run a mosquitto client that is to fail; its standard error."""
    process = await asyncio.create_subprocess_exec(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(process.communicate(), 10)
    assert process.returncode != 0
    return err.decode()


# -- TLS -----------------------------------------------------------------------------------------


async def test_mosquitto_clients_over_tls_and_a_plain_client_refused(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    async with relay_with(Mqtt(0, tls_cert=cert, tls_key=key)) as relay:
        port = port_of(relay)
        tls = ["-h", "localhost", "-p", port, "--cafile", str(cert)]
        sub = asyncio.create_task(
            mosquitto("mosquitto_sub", *tls, "-V", "mqttv5", "-t", "s/#", "-C", "1", "-v")
        )
        await asyncio.sleep(0.5)
        await failing("mosquitto_pub", "-h", "localhost", "-p", port, "-t", "s/1", "-m", "x")
        await mosquitto("mosquitto_pub", *tls, "-t", "s/1", "-m", "over tls", "-q", "1")
        assert (await sub).strip() == "s/1 over tls"


async def test_client_certificates_are_required_when_asked_for(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    client_cert, client_key = self_signed(tmp_path, "device")  # its own CA, for the test
    mqtt = Mqtt(0, tls_cert=cert, tls_key=key, tls_client_ca=client_cert)
    async with relay_with(mqtt) as relay:
        tls = ["-h", "localhost", "-p", port_of(relay), "--cafile", str(cert)]
        message = ["-t", "d/1", "-m", "x", "-q", "1"]
        await failing("mosquitto_pub", *tls, *message)  # no certificate
        other, other_key = self_signed(tmp_path / "other", "device")  # not the one trusted
        await failing(
            "mosquitto_pub", *tls, "--cert", str(other), "--key", str(other_key), *message
        )
        device = ["--cert", str(client_cert), "--key", str(client_key)]
        await mosquitto("mosquitto_pub", *tls, *device, *message)
        assert relay.mqtt is not None  # served, not kept (the broker's own $SYS topics aside)
        assert [t for t in relay.mqtt.broker.retained if not t.startswith("$SYS/")] == []


def test_tls_settings_that_cannot_work_are_refused(tmp_path: Path) -> None:
    cert, _ = self_signed(tmp_path)
    with pytest.raises(ConfigError, match="certificate and its key"):
        Mqtt(0, tls_cert=cert)
    with pytest.raises(ConfigError, match="client-ca needs"):
        Mqtt(0, tls_client_ca=cert)
    with pytest.raises(ConfigError, match="need --mqtt-port"):
        Mqtt(None, websocket=True)


# -- MQTT over WebSockets ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def mqttjs() -> Iterator[Path]:
    """The MQTT.js script, its packages installed from the lock file (once)."""
    need("node", "npm")
    if not (MQTTJS / "node_modules" / "mqtt").is_dir():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=MQTTJS, check=True, timeout=300
        )
    yield MQTTJS / "script.mjs"


async def run_mqttjs(
    script: Path, url: str, filter: str, count: int, then: Awaitable[str], *, ca: Path | None = None
) -> list[dict[str, object]]:
    """Run MQTT.js until it got ``count`` messages; ``then`` runs once it subscribed (a TCP
    client publishing). Its JSON lines."""
    process = await asyncio.create_subprocess_exec(
        "node",
        str(script),
        url,
        filter,
        str(count),
        *([str(ca)] if ca else []),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    lines = []
    try:
        async with asyncio.timeout(30):
            while line := await process.stdout.readline():
                lines.append(json.loads(line))
                if "subscribed" in lines[-1]:
                    await then
            err = await process.stderr.read() if process.stderr else b""
            assert await process.wait() == 0, err.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return lines


def tcp_publish(port: str, topic: str, payload: str) -> Awaitable[str]:
    return mosquitto("mosquitto_pub", "-p", port, "-t", topic, "-m", payload, "-q", "1")


async def test_mqttjs_over_websockets_meets_tcp_clients_in_one_broker(mqttjs: Path) -> None:
    async with relay_with(Mqtt(0, websocket=True)) as relay:
        port = port_of(relay)
        url = f"ws://127.0.0.1:{relay.port}/"  # the subprotocol mqtt routes it, not the path
        then = tcp_publish(port, "js/tcp", "from tcp")
        lines = await run_mqttjs(mqttjs, url, "js/#", 2, then)
        assert lines[0] == {"subscribed": [1]}
        got = sorted((m["topic"], m["payload"]) for m in lines[1:])
        assert got == [("js/hello", "from mqtt.js"), ("js/tcp", "from tcp")]
        out = await mosquitto("mosquitto_sub", "-p", port, "-t", "js/hello", "-C", "1", "-v")
        assert out.strip() == "js/hello from mqtt.js"  # retained by the one broker


async def test_mqttjs_over_wss_with_a_private_ca(mqttjs: Path, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    listening = Listening(host=LOOPBACK, tls_cert=cert, tls_key=key)
    async with relay_with(Mqtt(0, websocket=True), listening=listening) as relay:
        url = f"wss://localhost:{relay.port}/mqtt"
        then = tcp_publish(port_of(relay), "js/tcp", "secure")
        lines = await run_mqttjs(mqttjs, url, "js/tcp", 1, then, ca=cert)
        assert lines[1:] == [{"topic": "js/tcp", "payload": "secure", "qos": 1, "retain": False}]


async def test_websocket_bad_input_is_refused_and_others_are_served() -> None:
    async with relay_with(Mqtt(0, websocket=True)) as relay:
        base = f"ws://127.0.0.1:{relay.port}"
        with pytest.raises(InvalidStatus):  # a subprotocol other than mqtt on /mqtt: 400
            async with ws_connect(f"{base}/mqtt", subprotocols=["chat"]):  # type: ignore[list-item]
                pass
        async with ws_connect(f"{base}/mqtt") as text:  # MQTT in a text message [MQTT-6.0.0-1]
            await text.send("hello")
            await text.wait_closed()
        async with ws_connect(base, subprotocols=["mqtt"]) as good:  # type: ignore[list-item]
            assert good.subprotocol == "mqtt"
            # Packets across message boundaries [MQTT-6.0.0-2]: a CONNECT in two messages.
            connect = encode(p.Connect("split", p.V5), p.V5)
            await good.send(connect[:5])
            await good.send(connect[5:] + encode(p.PingReq(), p.V5))
            received = b""
            while len(received) < 2 or split(received, 1 << 20) is None:
                received += await good.recv()  # type: ignore[operator]
            found = split(received, 1 << 20)
            assert found is not None and isinstance(decode(found[0], found[1], p.V5), p.ConnAck)
        assert relay.mqtt is not None and relay.mqtt.websockets is not None
        assert relay.mqtt.websockets.text_refused == 1


PAGE = """<!doctype html>
<title>MQTT over WebSockets</title>
<script src="mqtt.min.js"></script>
<script>
  window.got = [];
  const client = mqtt.connect("URL", { protocolVersion: 5 });
  client.on("connect", () => client.subscribe("dev/#", () => { window.subscribed = true; }));
  client.on("message", (topic, payload) => window.got.push(`${topic} ${payload}`));
</script>
"""


async def test_a_browser_page_with_mqttjs_gets_messages_published_over_tcp(
    mqttjs: Path, tmp_path: Path
) -> None:
    from fanout.testing.browser import open_browser

    async with relay_with(Mqtt(0, websocket=True)) as relay:
        port = port_of(relay)
        await mosquitto("mosquitto_pub", "-p", port, "-t", "dev/1/state", "-m", "on", "-r")
        page_file = tmp_path / "index.html"
        page_file.write_text(PAGE.replace("URL", f"ws://127.0.0.1:{relay.port}/mqtt"))
        bundle = MQTTJS / "node_modules" / "mqtt" / "dist" / "mqtt.min.js"
        (tmp_path / "mqtt.min.js").write_bytes(bundle.read_bytes())
        async with open_browser(page_file.as_uri(), tmp_path / "browser") as page:
            await eventually(lambda: page.evaluate("window.subscribed === true"), timeout=20)
            await mosquitto("mosquitto_pub", "-p", port, "-t", "dev/2/alarm", "-m", "smoke")
            got = await eventually(
                lambda: page.evaluate("window.got"), lambda got: len(got) == 2, timeout=20
            )
            assert got == ["dev/1/state on", "dev/2/alarm smoke"]  # retained, then live
