"""Airflow notifiers for the reconcile alerts: a JSON webhook and email, each configured by an Airflow connection.

* ``rmq_recon_webhook`` (HTTP connection): the URL is ``host`` (a full ``https://...`` URL, or a host name with
  ``schema`` as the scheme and ``port``) plus ``extra.endpoint``; ``extra.headers`` are added, ``login``/``password``
  become basic auth. The body is JSON with a ``text`` field, what Slack and Teams incoming webhooks and most chat
  bots take. No HTTP provider is installed: the POST is stdlib ``urllib``.
* ``rmq_recon_smtp`` (SMTP connection, the SMTP provider's :class:`SmtpNotifier`): recipients in ``extra.to``
  (comma-separated), sender in ``extra.from_email``; ``extra.disable_ssl`` / ``disable_tls`` for a plain server.

A connection that does not exist turns its channel off with one log line; it never fails the run. Logs and errors
name the connection id, never its URL (webhook URLs carry tokens).
"""
from __future__ import annotations

import base64
import json
import logging
import urllib.error
import urllib.request
from typing import Any, Callable

from airflow.providers.smtp.notifications.smtp import SmtpNotifier
from airflow.sdk import BaseNotifier

from jobs.problems import ReconError

log = logging.getLogger(__name__)

WEBHOOK_CONN_ID = "rmq_recon_webhook"
SMTP_CONN_ID = "rmq_recon_smtp"


class WebhookError(ReconError):
    """The webhook did not accept the message."""


def webhook_target(conn: Any) -> tuple[str, dict[str, str]]:
    """The URL and headers an HTTP connection names (as the HTTP provider's ``HttpHook`` builds its base URL)."""
    extra = conn.extra_dejson or {}
    host = (conn.host or "").strip()
    if "://" in host:
        base = host
    else:
        base = f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else "")
    endpoint = str(extra.get("endpoint") or "")
    url = base.rstrip("/") + ("/" + endpoint.lstrip("/") if endpoint else "")
    headers = {"Content-Type": "application/json"}
    headers.update({str(k): str(v) for k, v in (extra.get("headers") or {}).items()})
    if conn.login:
        token = base64.b64encode(f"{conn.login}:{conn.password or ''}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    return url, headers


class WebhookNotifier(BaseNotifier):
    """POST ``payload`` as JSON to the URL of an Airflow HTTP connection; any status but 2xx fails.

    Args:
        payload: the JSON body (``jobs.ops.alerts.message(...)["payload"]``).
        http_conn_id: the connection (default ``rmq_recon_webhook``).
        timeout_s: connect and read timeout.
    """

    template_fields = ()  # the payload is data (group names), never a Jinja template

    def __init__(self, *, payload: dict[str, Any], http_conn_id: str = WEBHOOK_CONN_ID, timeout_s: float = 30,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.payload = payload
        self.http_conn_id = http_conn_id
        self.timeout_s = timeout_s

    def notify(self, context: Any) -> None:
        from airflow.sdk import BaseHook

        url, headers = webhook_target(BaseHook.get_connection(self.http_conn_id))
        body = json.dumps(self.payload, sort_keys=True).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310 - operator's URL
                status = response.status
        except urllib.error.HTTPError as exc:
            raise WebhookError(f"webhook {self.http_conn_id}: HTTP {exc.code} {exc.reason}; check the connection's "
                               "URL and token") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise WebhookError(f"webhook {self.http_conn_id}: not reachable ({reason}); check the connection's host "
                               "and port") from None
        log.info("webhook %s: delivered (HTTP %s)", self.http_conn_id, status)


class EmailNotifier(SmtpNotifier):
    """The SMTP provider's notifier with nothing templated: subject and body are data, sent as they are."""

    template_fields = ()


def _connection(conn_id: str) -> Any | None:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def senders(*, webhook_conn_id: str = WEBHOOK_CONN_ID, smtp_conn_id: str = SMTP_CONN_ID,
            context: Any = None) -> dict[str, Callable[[dict[str, Any]], None]]:
    """``{channel: send(message)}`` for each channel whose connection exists (one log line per channel that is off).

    ``message`` is ``jobs.ops.alerts.message(...)``; ``context`` the Airflow task context, handed to the notifiers.
    """
    ctx = context if context is not None else {}
    out: dict[str, Callable[[dict[str, Any]], None]] = {}
    if _connection(webhook_conn_id) is None:
        log.info("alerts: webhook off (no Airflow connection %s)", webhook_conn_id)
    else:
        out["webhook"] = lambda msg: WebhookNotifier(payload=msg["payload"], http_conn_id=webhook_conn_id)(ctx)
    smtp = _connection(smtp_conn_id)
    recipients = [a.strip() for a in str((smtp.extra_dejson or {}).get("to") or "").split(",") if a.strip()] \
        if smtp is not None else []
    if smtp is None:
        log.info("alerts: email off (no Airflow connection %s)", smtp_conn_id)
    elif not recipients:
        log.info("alerts: email off (connection %s has no recipients: set extra \"to\")", smtp_conn_id)
    else:
        sender = (smtp.extra_dejson or {}).get("from_email") or "rmq-recon@localhost"

        def send_email(msg: dict[str, Any]) -> None:
            EmailNotifier(to=recipients, from_email=sender, subject=msg["subject"], html_content=email_html(msg),
                          smtp_conn_id=smtp_conn_id)(ctx)
        out["email"] = send_email
    return out


def email_html(msg: dict[str, Any]) -> str:
    """The email body: the message text, preformatted (names and counts line up as in the chat message)."""
    import html

    return f"<pre>{html.escape(msg['text'])}</pre>"
