"""Request bodies the switchboard sends."""

from __future__ import annotations

from typing import Any

#: The test caller and the clinic line it calls (the numbers of the intake tests).
CALLER = "+1 201 555 0198"
CLINIC_LINE = "+12015550100"


def call_body(sid: str, url: str | None = None, **fields: Any) -> dict[str, Any]:
    """A `recording-complete` body: call `sid`, completed, from `CALLER` to `CLINIC_LINE`,
    with `fields` (they win over these); with `url`, its recording is there
    (`RecordingUrl`, `HasRecording` true)."""
    body: dict[str, Any] = {"CallSid": sid, "CallFrom": CALLER, "CallTo": CLINIC_LINE, "Status": "completed", **fields}
    if url is not None:
        body.update(RecordingUrl=url, HasRecording=True)
    return body


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24


def request_head(
    method: str, target: str, token: str | None, *, length: int | None, content_type: str = "application/json"
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {content_type}"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
