"""The studio's documented remote mode (issue #25): `python -m mens.studio studio.host=0.0.0.0
studio.token_env=…` answers a browser that opened it by one of the machine's interface
addresses — the Host header such a browser sends — with the token 200, without it 401; a
foreign Host (with the token) 403; `studio.allowed_hosts` adds a name. The real studio in a
child process bound to the wildcard address; the test's traffic goes to 127.0.0.1 only, with
the Host header set as that browser would set it."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from mens.studio.guard import allowed_hosts, interface_addresses

TOKEN = "remote-test-token-1234567890"


def lan_address() -> str | None:
    """An interface address other than loopback (the one a browser elsewhere would use)."""
    return next((a for a in sorted(interface_addresses())
                 if not a.startswith(("127.", "[::1]", "[fe80")) and ":" not in a), None)


@pytest.fixture(scope="module")
def studio(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("remote")
    env = {**os.environ, "MENS_TEST_STUDIO_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mens.studio", "studio.host=0.0.0.0", "studio.port=0",
         "studio.token_env=MENS_TEST_STUDIO_TOKEN", f"studio.runs={tmp / 'runs'}",
         "studio.allowed_hosts=[studio.example.test]", "+hw=cpu"],
        cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port, seen, t0 = None, [], time.time()
    while time.time() - t0 < 120 and port is None:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"studio on http://\S+:(\d+)/", line)
        port = int(m.group(1)) if m else None
    if port is None:
        proc.kill()
        pytest.fail("the studio did not start:\n" + "".join(seen))
    yield port
    proc.send_signal(2)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def ask(port: int, host: str, token: str | None):
    headers = {"host": host, **({"authorization": f"Bearer {token}"} if token else {})}
    return httpx.get(f"http://127.0.0.1:{port}/api/jobs", headers=headers, timeout=60)


def test_wildcard_bind_answers_its_interface_addresses(studio):
    addr = lan_address()
    if addr is None:
        pytest.skip("this machine has no interface address beyond loopback to open it by")
    host = f"{addr}:{studio}"
    assert ask(studio, host, TOKEN).status_code == 200
    assert ask(studio, host, None).status_code == 401
    assert ask(studio, host, "wrong").status_code == 401
    assert ask(studio, f"evil.example:{studio}", TOKEN).status_code == 403
    # a browser's same-origin post carries Origin = the address it opened
    r = httpx.post(f"http://127.0.0.1:{studio}/api/plan", timeout=120,
                   json={"overrides": ["+hw=cpu", "train.seq_len=128"]},
                   headers={"host": host, "origin": f"http://{host}",
                            "authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200, r.text


def test_the_token_is_checked_before_the_host(studio):
    """Without the token a caller learns nothing: a foreign Host gets 401, not 403."""
    assert ask(studio, f"evil.example:{studio}", None).status_code == 401


def test_allowed_hosts_adds_a_name(studio):
    assert ask(studio, f"studio.example.test:{studio}", TOKEN).status_code == 200


def test_allowed_hosts_of_each_bind():
    local = allowed_hosts("127.0.0.1", 8090)
    assert local == {"127.0.0.1:8090", "localhost:8090", "[::1]:8090"}
    wild = allowed_hosts("0.0.0.0", 8090, ["proxy.example:443", "name.example"])
    assert {f"{a}:8090" for a in interface_addresses()} <= wild
    assert {"proxy.example:443", "name.example:8090", socket.gethostname().lower() + ":8090"} \
        <= wild
    assert "0.0.0.0:8090" not in wild
    one = allowed_hosts("10.1.2.3", 8090)           # one address: that one, not the others
    others = {f"{a}:8090" for a in interface_addresses()} - {"127.0.0.1:8090", "[::1]:8090"}
    assert "10.1.2.3:8090" in one and not (others - {"10.1.2.3:8090"}) & one
