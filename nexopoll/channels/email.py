"""The ``email`` channel: Django's mail framework to the delivery's ``to`` address.

The SMTP server comes from the environment (``EMAIL_HOST``, ``EMAIL_PORT``,
``EMAIL_HOST_USER``, ``EMAIL_HOST_PASSWORD``, ``EMAIL_USE_TLS``, ``EMAIL_USE_SSL``,
``EMAIL_TIMEOUT``; ``DEFAULT_FROM_EMAIL`` when a binding gives no sender). The
binding gives the sender (``sender``) and optionally a ``subject`` template over the
payload's fields (``"[{job_id}] new item"``); without one the subject is the first
line of the text (at most 150 characters). The body is the payload's ``text``.

Every mail carries ``Message-ID: <delivery id@nexopoll>`` and
``X-Nexopoll-Delivery-Id``: a mail sent twice (an answer lost after the server took
it) has the same Message-ID, which mail clients and servers use to drop copies.

The attempt's deadline bounds the whole SMTP conversation (connect, EHLO, STARTTLS,
login, MAIL, RCPT, DATA), not each step (:mod:`.smtpdeadline`): a send ends before
its delivery claim does.

Outcomes: the server takes it — sent; a refused recipient or a 5xx reply —
permanent; a 4xx reply, a timeout or a connection error — transient; a failed
login — ConfigError (the row is held until the credentials are fixed).
"""

from __future__ import annotations

import smtplib
from typing import Any

from nexopoll.core.bindings import EMAIL_RE, EmailBinding
from nexopoll.core.errors import ConfigError, PermanentError, TransientError
from nexopoll.core.templates import render

from ._api import message_text
from .message import OutboundMessage

MAX_SUBJECT = 150
MAX_BODY = 1_000_000


def subject_for(message: OutboundMessage, binding: EmailBinding, text: str) -> str:
    if binding.subject:
        subject = render(binding.subject, {**message.payload, "job_id": message.job_id})
    else:
        subject = text.strip().splitlines()[0] if text.strip() else f"nexopoll {message.job_id}"
    subject = " ".join(subject.split())  # no line breaks in a header
    return subject if len(subject) <= MAX_SUBJECT else subject[: MAX_SUBJECT - 1] + "…"


class EmailChannel:
    name = "email"
    binding_schema = EmailBinding

    def send(
        self, message: OutboundMessage, binding: dict[str, Any], *, deadline_secs: float
    ) -> None:
        from django.core.mail import EmailMessage

        from .smtpdeadline import connection

        b = EmailBinding.model_validate(binding)
        to = message.recipient.strip()
        if not EMAIL_RE.fullmatch(to):
            raise PermanentError("email recipient is not an e-mail address")
        text = message_text(message, MAX_BODY)
        mail = EmailMessage(
            subject=subject_for(message, b, text),
            body=text,
            from_email=b.sender,
            to=[to],
            headers={
                "Message-ID": f"<{message.delivery_id}@nexopoll>",
                "X-Nexopoll-Delivery-Id": message.delivery_id,
            },
            connection=connection(deadline_secs),
        )
        try:
            mail.send(fail_silently=False)
        except smtplib.SMTPAuthenticationError as exc:
            raise ConfigError(f"smtp login refused ({exc.smtp_code}): check EMAIL_HOST_*") from exc
        except smtplib.SMTPRecipientsRefused as exc:
            codes = sorted({code for code, _ in exc.recipients.values()})
            error = PermanentError if all(c >= 500 for c in codes) else TransientError
            raise error(f"smtp refused the recipient ({codes})") from exc
        except smtplib.SMTPResponseException as exc:
            error = PermanentError if exc.smtp_code >= 500 else TransientError
            raise error(f"smtp answered {exc.smtp_code}: {_reply(exc.smtp_error)}") from exc
        except (TimeoutError, smtplib.SMTPException, OSError) as exc:
            raise TransientError(f"smtp: {type(exc).__name__}: {exc}"[:500]) from exc


def _reply(raw: Any) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return " ".join(text.split())[:300]
