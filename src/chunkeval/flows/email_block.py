"""Email over SMTP as a Prefect notification block (`chunkeval-smtp-email`): what a Prefect automation's
SendNotification action calls, on the Prefect server, for an email destination of `chunkeval serve`
(`chunkeval.flows.alerts`). Prefect ships webhook blocks but no plain SMTP one; this module is registered as a
Prefect collection (pyproject's `prefect.collections` entry point), so a Prefect server in the same environment
as chunkeval loads it at start, and so can send what the automation renders. Kept light: the server imports it.
"""

from __future__ import annotations

import smtplib
import ssl
from email.message import EmailMessage

import anyio
from prefect.blocks.abstract import NotificationBlock, NotificationError
from pydantic import Field, SecretStr

TIMEOUT = 10.0


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
        message = EmailMessage()
        message["Subject"], message["From"], message["To"] = subject, self.sender, ", ".join(self.to)
        message.set_content(body)
        context = ssl.create_default_context()
        if self.security == "ssl":
            server = smtplib.SMTP_SSL(self.host, self.port, timeout=TIMEOUT, context=context)
        else:
            server = smtplib.SMTP(self.host, self.port, timeout=TIMEOUT)
        with server:
            if self.security == "starttls":
                server.starttls(context=context)
            if self.username:
                server.login(self.username, self.password.get_secret_value() if self.password else "")
            refused = server.send_message(message)
        if refused:
            raise NotificationError(log=f"refused for {', '.join(refused)}")

    async def notify(self, body: str, subject: str | None = None) -> None:
        try:
            await anyio.to_thread.run_sync(self._send, subject or "chunkeval", body)
        except (OSError, smtplib.SMTPException) as exc:
            raise NotificationError(log=f"{type(exc).__name__}: {exc}") from None
