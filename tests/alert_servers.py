"""Real notification and metrics servers on 127.0.0.1 for the alert, metrics and DAG tests.

* :class:`Webhook`: an ``http.server`` in a thread that records every POST and answers ``status``;
* :class:`Mailbox`: the handler of an ``aiosmtpd`` SMTP server that records every message;
* ``servers``: both, with the Airflow connections ``rmq_recon_webhook`` and ``rmq_recon_smtp`` naming them
  (``AIRFLOW_CONN_*`` variables, read by Airflow's environment secrets backend);
* ``pushgateway``: Debian's ``prometheus-pushgateway`` on a free port (``infra/install-debian-deps.sh``).
Test modules import the fixtures they use by name.
"""
from __future__ import annotations

import email
import json
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

__all__ = ["Mailbox", "Webhook", "pushgateway", "servers"]


class Webhook:
    """An HTTP server on 127.0.0.1 that records every POST and answers ``status``."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.posts.append({"path": self.path, "content_type": self.headers["Content-Type"],
                                    "body": json.loads(body)})
                self.send_response(outer.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Mailbox:
    """What the aiosmtpd server received (``handle_DATA`` is its handler hook)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                              "message": email.message_from_bytes(envelope.content)})
        return "250 OK"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def servers(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Webhook, Mailbox]]:
    """A webhook server and an SMTP server on 127.0.0.1, and the two Airflow connections naming them."""
    from aiosmtpd.controller import Controller

    hook, box = Webhook(), Mailbox()
    smtp = Controller(box, hostname="127.0.0.1", port=free_port())
    smtp.start()
    monkeypatch.setenv("AIRFLOW_CONN_RMQ_RECON_WEBHOOK", json.dumps(
        {"conn_type": "http", "host": "127.0.0.1", "port": hook.port, "extra": {"endpoint": "/hooks/T0/secret"}}))
    monkeypatch.setenv("AIRFLOW_CONN_RMQ_RECON_SMTP", json.dumps(
        {"conn_type": "smtp", "host": "127.0.0.1", "port": smtp.port,
         "extra": {"disable_ssl": True, "disable_tls": True, "retry_limit": 0, "timeout": 10,
                   "from_email": "rmq-recon@example.com", "to": "oncall@example.com, ops@example.com"}}))
    try:
        yield hook, box
    finally:
        smtp.stop()
        hook.close()


@pytest.fixture(scope="module")
def pushgateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's prometheus-pushgateway on 127.0.0.1 (a free port), in memory only."""
    port = free_port()
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(["prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"prometheus-pushgateway did not start: {log.read_text()}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


