"""A loopback server speaking the Google REST shapes the gmail and calendar pollers use.

- ``POST /token``: the OAuth 2.0 refresh-token grant (form body). Answers a new
  ``access_token`` with ``expires_in``; ``token_mode`` scripts failures
  (``invalid_grant``, ``revoked``, ``invalid_client`` (401), ``503``, ``429``).
- Gmail v1: ``GET /gmail/v1/users/me/messages`` (``q``: only ``is:unread`` is
  interpreted; ``maxResults``, ``pageToken``; newest first), ``GET
  .../messages/<id>?format=full``, ``POST .../messages/<id>/modify``
  (``addLabelIds`` / ``removeLabelIds``).
- Calendar v3: ``GET /calendar/v3/calendars/<id>/events`` with ``pageToken``,
  ``maxResults``, ``syncToken`` (``s<N>``: changes after change number N),
  ``nextPageToken`` / ``nextSyncToken``; after ``expire_sync_tokens()`` every
  token issued before answers 410.

Messages are stored as Gmail serves them: :func:`gmail_from_raw` turns a raw
RFC 5322 mail into the ``format=full`` shape (parts' data already decoded from
their transfer encoding, headers as sent).

Every API call needs ``Authorization: Bearer <a token this server issued>``, else
401. ``fail(kind, *replies)`` queues scripted answers for the next calls of one
kind (``token``, ``list``, ``get``, ``modify``, ``events``); a reply is a status
or ``(status, json_doc)``. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import base64
import email
import email.policy
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

GMAIL = "/gmail/v1/users/me/messages"
CAL = "/calendar/v3/calendars/"


def b64url(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def text_part(text: str | bytes, mime: str = "text/plain", **headers: str) -> dict[str, Any]:
    """A leaf part as Gmail returns it: ``text`` is the content *after* its transfer
    encoding is undone (a ``Content-Transfer-Encoding`` header is only listed)."""
    hdrs = [{"name": k.replace("_", "-"), "value": v} for k, v in headers.items()]
    return {"mimeType": mime, "headers": hdrs, "body": {"data": b64url(text)}}


def gmail_from_raw(
    ident: str, raw: bytes, *, internal_date: int = 0, unread: bool = True
) -> dict[str, Any]:
    """The ``format=full`` resource Gmail makes of the RFC 5322 message ``raw``.

    As Gmail does: every header is listed as sent (encoded words kept, folding
    undone); a leaf part's ``body.data`` is base64url of its content with the
    transfer encoding already undone; a part with a filename is an attachment
    (``attachmentId``, no data); a ``message/rfc822`` part holds the attached
    message as its one sub-part, whose headers are that message's own.
    """
    msg = email.message_from_bytes(raw, policy=email.policy.compat32)
    counter = itertools.count(1)
    payload = _gmail_part(msg, "", counter)
    return {
        "id": ident,
        "threadId": "t" + ident,
        "labelIds": ["INBOX", *(["UNREAD"] if unread else [])],
        "snippet": "",
        "internalDate": str(internal_date),
        "payload": payload,
    }


def _header_text(value: Any) -> str:
    """A header value as Gmail lists it: unfolded, raw UTF-8 (RFC 6532) as text."""
    text = re.sub(r"\r?\n(?=[ \t])", "", str(value))
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _gmail_part(part: Any, part_id: str, counter: Any) -> dict[str, Any]:
    headers = [{"name": k, "value": _header_text(v)} for k, v in part.raw_items()]
    doc: dict[str, Any] = {
        "partId": part_id,
        "mimeType": part.get_content_type(),
        "filename": part.get_filename() or "",
        "headers": headers,
        "body": {"size": 0},
    }
    if part.is_multipart():
        prefix = f"{part_id}." if part_id else ""
        doc["parts"] = [
            _gmail_part(sub, f"{prefix}{i}", counter) for i, sub in enumerate(part.get_payload())
        ]
        return doc
    data = part.get_payload(decode=True) or b""
    if doc["filename"]:
        doc["body"] = {"attachmentId": f"att-{next(counter)}", "size": len(data)}
    else:
        doc["body"] = {"size": len(data), "data": base64.urlsafe_b64encode(data).decode()}
    return doc


def gmail_message(
    ident: str,
    *,
    sender: str = "Ana <ana@mycompany.com>",
    subject: str = "hello",
    body: str | bytes | dict[str, Any] = "body",
    snippet: str = "",
    internal_date: int = 0,
    unread: bool = True,
) -> dict[str, Any]:
    """A ``format=full`` resource; ``body`` may be text or a ready payload part."""
    payload = body if isinstance(body, dict) else text_part(body)
    headers = [{"name": "From", "value": sender}, {"name": "Subject", "value": subject}]
    payload = {**payload, "headers": headers + list(payload.get("headers", []))}
    return {
        "id": ident,
        "threadId": "t" + ident,
        "labelIds": ["INBOX", *(["UNREAD"] if unread else [])],
        "snippet": snippet or (body if isinstance(body, str) else "")[:100],
        "internalDate": str(internal_date),
        "payload": payload,
    }


class FakeGoogle:
    __test__ = False

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.refresh_token = "rt-good"
        self.client_id, self.client_secret = "cid.apps", "csecret"
        self.token_mode = "ok"
        self.expires_in = 3600
        self.issued: set[str] = set()
        self._n = itertools.count(1)
        self.failures: dict[str, list[Any]] = {}
        self.messages: dict[str, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.seq = 0
        self.generation = 0  # expire_sync_tokens() moves it on; older tokens answer 410
        self.on_get = None  # test hook: called (in the server thread) before a message get
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # --- lifecycle and helpers -------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def token_uri(self) -> str:
        return self.url + "/token"

    def __enter__(self) -> FakeGoogle:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def issue(self) -> str:
        token = f"at-{next(self._n)}"
        self.issued.add(token)
        return token

    def fail(self, kind: str, *replies: Any) -> None:
        with self.lock:
            self.failures.setdefault(kind, []).extend(replies)

    def calls(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["kind"] == kind]

    def add_message(self, msg: dict[str, Any]) -> None:
        with self.lock:
            self.messages[msg["id"]] = msg

    def unread(self, ident: str) -> bool:
        with self.lock:
            return "UNREAD" in self.messages[ident]["labelIds"]

    def put_event(self, ident: str, **fields: Any) -> None:
        with self.lock:
            self.seq += 1
            old = self.events.get(ident)
            stamp = f"2026-11-25T12:{self.seq // 60:02d}:{self.seq % 60:02d}.000Z"
            event = {
                "id": ident,
                "status": "confirmed",
                "summary": ident,
                "htmlLink": f"https://calendar.example/{ident}",
                "start": {"dateTime": "2026-12-01T10:00:00Z"},
                "end": {"dateTime": "2026-12-01T11:00:00Z"},
                "created": old["created"] if old else stamp,
                **fields,
                "updated": stamp,
            }
            event["_seq"] = self.seq
            self.events[ident] = event

    def cancel_event(self, ident: str) -> None:
        self.put_event(ident, status="cancelled")

    def expire_sync_tokens(self) -> None:
        with self.lock:
            self.generation += 1

    def _sync_token(self) -> str:
        return f"s{self.seq}" + (f"-{self.generation}" if self.generation else "")

    # --- request handling -------------------------------------------------------------
    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple:
        parts = urlsplit(target)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        kind = self._kind(method, path)
        with self.lock:
            self.requests.append(
                {
                    "kind": kind,
                    "method": method,
                    "path": path,
                    "query": query,
                    "headers": headers,
                    "body": body,
                }
            )
            scripted = self.failures.get(kind)
            reply = scripted.pop(0) if scripted else None
        if reply is not None:
            status, doc = reply if isinstance(reply, tuple) else (reply, {"error": "scripted"})
            return status, doc
        if kind == "token":
            return self._token(body)
        token = headers.get("authorization", "").removeprefix("Bearer ")
        if token not in self.issued:
            return 401, {"error": {"code": 401, "message": "Invalid Credentials"}}
        if kind == "get" and self.on_get is not None:
            self.on_get(path)
        with self.lock:
            return getattr(self, "_" + kind)(path, query, body)

    @staticmethod
    def _kind(method: str, path: str) -> str:
        if path == "/token":
            return "token"
        if path == GMAIL:
            return "list"
        if path.startswith(GMAIL + "/"):
            return "modify" if path.endswith("/modify") and method == "POST" else "get"
        if path.startswith(CAL) and path.endswith("/events"):
            return "events"
        return "unknown"

    def _token(self, body: bytes) -> tuple:
        form = {k: v[-1] for k, v in parse_qs(body.decode()).items()}
        mode = self.token_mode
        if mode in ("503", "429"):
            return int(mode), {"error": "temporarily_unavailable"}
        if mode == "invalid_client" or form.get("client_secret") != self.client_secret:
            return 401, {"error": "invalid_client", "error_description": "Unauthorized"}
        if mode == "revoked":
            return 400, {
                "error": "invalid_grant",
                "error_description": "Token has been expired or revoked.",
            }
        if mode == "invalid_grant" or form.get("refresh_token") != self.refresh_token:
            return 400, {"error": "invalid_grant", "error_description": "Bad Request"}
        return 200, {
            "access_token": self.issue(),
            "expires_in": self.expires_in,
            "token_type": "Bearer",
        }

    def _list(self, path: str, query: dict[str, str], body: bytes) -> tuple:
        msgs = sorted(self.messages.values(), key=lambda m: -int(m["internalDate"]))
        if "is:unread" in query.get("q", ""):
            msgs = [m for m in msgs if "UNREAD" in m["labelIds"]]
        size = min(int(query.get("maxResults", 100)), 500)
        start = int(query.get("pageToken") or 0)
        page = msgs[start : start + size]
        doc: dict[str, Any] = {"resultSizeEstimate": len(msgs)}
        if page:
            doc["messages"] = [{"id": m["id"], "threadId": m["threadId"]} for m in page]
        if start + size < len(msgs):
            doc["nextPageToken"] = str(start + size)
        return 200, doc

    def _get(self, path: str, query: dict[str, str], body: bytes) -> tuple:
        msg = self.messages.get(path.rsplit("/", 1)[1])
        if msg is None:
            return 404, {"error": {"code": 404, "message": "Requested entity was not found."}}
        return 200, json.loads(json.dumps(msg))

    def _modify(self, path: str, query: dict[str, str], body: bytes) -> tuple:
        msg = self.messages.get(path.rsplit("/", 2)[1])
        if msg is None:
            return 404, {"error": {"code": 404, "message": "Requested entity was not found."}}
        req = json.loads(body or b"{}")
        labels = [x for x in msg["labelIds"] if x not in req.get("removeLabelIds", [])]
        msg["labelIds"] = labels + [x for x in req.get("addLabelIds", []) if x not in labels]
        return 200, {"id": msg["id"], "labelIds": msg["labelIds"]}

    def _events(self, path: str, query: dict[str, str], body: bytes) -> tuple:
        sync = query.get("syncToken")
        if sync is not None:
            seq, _, gen = sync.removeprefix("s").partition("-")
            if not sync.startswith("s") or int(gen or 0) != self.generation:
                return 410, {"error": {"code": 410, "message": "Sync token is no longer valid."}}
        after = int(seq) if sync else -1
        items = sorted(self.events.values(), key=lambda e: e["_seq"])
        if sync is None:
            items = [e for e in items if e["status"] != "cancelled"]
        else:
            items = [e for e in items if e["_seq"] > after]
        size = min(int(query.get("maxResults", 250)), 2500)
        start = int(query.get("pageToken") or 0)
        page = items[start : start + size]
        doc: dict[str, Any] = {
            "kind": "calendar#events",
            "items": [{k: v for k, v in e.items() if k != "_seq"} for e in page],
        }
        if start + size < len(items):
            doc["nextPageToken"] = str(start + size)
        else:
            doc["nextSyncToken"] = self._sync_token()
        return 200, doc


def _handler(fake: FakeGoogle) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, doc = fake.handle(self.command, self.path, headers, body)
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def write_credentials(
    directory,
    fake: FakeGoogle,
    *,
    token: str | None = None,
    expiry: str | None = None,
    name: str = "token.json",
) -> dict[str, str]:
    """Write a client file and an authorized-user token file; return the ``google`` binding."""
    client = directory / "client.json"
    client.write_text(
        json.dumps(
            {
                "installed": {
                    "client_id": fake.client_id,
                    "client_secret": fake.client_secret,
                    "token_uri": "https://oauth2.googleapis.com/token",
                }
            }
        )
    )
    doc: dict[str, Any] = {"refresh_token": fake.refresh_token, "token_uri": fake.token_uri}
    if token:
        doc["token"] = token
    if expiry:
        doc["expiry"] = expiry
    path = directory / name
    path.write_text(json.dumps(doc))
    return {"client_id_path": str(client), "token_path": str(path)}
