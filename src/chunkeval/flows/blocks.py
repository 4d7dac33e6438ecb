"""chunkeval's Prefect notification blocks: what a Prefect automation's SendNotification action calls, on the
Prefect server, to deliver an alarm of `chunkeval serve` (`chunkeval.flows.alerts`): `chunkeval-webhook` for
webhook, Slack and Teams destinations (a JSON body POSTed), `chunkeval-smtp-email` for email over SMTP.

Prefect ships a Webhook block, but it reads a destination's whole answer, follows no bound on its time, and keeps
1,000 characters of it, unmasked, in the action's event; these deliver through `chunkeval.publish.delivery`, as
`chunkeval alerts test` does: one deadline on the whole exchange, a bound on what is read, and what a failure
says masked of every secret of the destination. This module is registered as a Prefect collection (pyproject's
`prefect.collections` entry point), so a Prefect server in the same environment as chunkeval loads it at start.
Kept light: the server imports it.
"""

from __future__ import annotations

import anyio
from prefect.blocks.abstract import NotificationBlock, NotificationError
from pydantic import Field, SecretStr

from chunkeval.publish.delivery import Exchange, Redaction, post, send_mail


def _failed(exc: BaseException, exchange: Exchange, redaction: Redaction) -> NotificationError:
    return NotificationError(log=redaction.shown(exchange.said(exc)))


class ChunkevalWebhook(NotificationBlock):
    """Sends a notification as a JSON body POSTed to a webhook URL (a webhook, Slack, or Teams destination)."""

    _block_type_name = "chunkeval webhook"
    _block_type_slug = "chunkeval-webhook"
    _description = "A JSON body POSTed to a webhook (a webhook, Slack or Teams), for chunkeval's alarms (docs/loop.md)."

    url: SecretStr = Field(description="The webhook's URL (its path or query may hold its secret).")
    token: SecretStr | None = Field(default=None, description="A bearer token sent with each message.")

    def _send(self, body: str) -> None:
        url, token = self.url.get_secret_value(), self.token.get_secret_value() if self.token else None
        redaction = Redaction(token, urls=(url,))
        headers = {"Content-Type": "application/json", "User-Agent": "chunkeval-alerts"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        with Exchange() as exchange:
            try:
                status, text = post(url, body.encode("utf-8"), headers, exchange)
            except Exception as exc:  # refused, timed out, past a bound: said, masked
                raise _failed(exc, exchange, redaction) from None
        if not 200 <= status < 300:
            raise NotificationError(log=redaction.shown(f"refused: HTTP {status} {text}"))

    async def notify(self, body: str, subject: str | None = None) -> None:
        await anyio.to_thread.run_sync(self._send, body)


class ChunkevalEmail(NotificationBlock):
    """Sends a notification as an email through an SMTP server (plain, STARTTLS, or SMTPS)."""

    _block_type_name = "chunkeval SMTP email"
    _block_type_slug = "chunkeval-smtp-email"
    _description = "An email through an SMTP server, for chunkeval's alarms (docs/loop.md)."

    host: str = Field(description="The SMTP server's host.")
    port: int = Field(default=25, description="The SMTP server's port.")
    security: str = Field(default="none", description="none, starttls or ssl (SMTPS).")
    sender: str = Field(description="The From address.")
    to: list[str] = Field(description="The recipients.")
    username: str | None = Field(default=None, description="The SMTP login, where the server asks for one.")
    password: SecretStr | None = Field(default=None, description="The SMTP password.")

    def _send(self, subject: str, body: str) -> None:
        password = self.password.get_secret_value() if self.password else None
        redaction = Redaction(self.username, password, logins=((self.username, password),))
        with Exchange() as exchange:
            try:
                refused = send_mail(
                    self.host, self.port, self.security, self.sender, self.to, subject, body,
                    self.username, password, exchange,
                )  # fmt: skip
            except Exception as exc:  # refused, timed out, past a bound: said, masked
                raise _failed(exc, exchange, redaction) from None
        if refused:
            raise NotificationError(log=redaction.shown(f"refused for {', '.join(refused)}"))

    async def notify(self, body: str, subject: str | None = None) -> None:
        await anyio.to_thread.run_sync(self._send, subject or "chunkeval", body)
