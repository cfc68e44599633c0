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
    body: dict[str, Any] = {"CallSid": sid, "CallFrom": CALLER, "CallTo": CLINIC_LINE, "Status": "completed",
                            **fields}
    if url is not None:
        body.update(RecordingUrl=url, HasRecording=True)
    return body
