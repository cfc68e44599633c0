"""Refusals of the domain: raised by the feature packages (documents, switchboard, ...) and
mapped once at each edge: the API (`web/errors.py`: the HTTP status and `{error, code}`),
the console and the CLI (their own wording). Nothing below the web layer decides an HTTP
status.

Each refusal has a stable `code` (the API's machine-readable word) and a message for
people; `data` holds fields an answer carries besides (`mergedInto`), `retry_after` the
seconds after which trying again may work.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """The base: a refusal the caller can act on (never an internal failure)."""

    default_code = "ERROR"

    def __init__(self, message: str, *, code: str | None = None, retry_after: int | None = None, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.retry_after = retry_after
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        """`{error, code}` plus the data, as the API answers it."""
        return {"error": self.message, "code": self.code, **self.data}


class Invalid(DomainError):
    """The input cannot be accepted as it is (the message names the field; `param=`, the
    field's JSON Pointer in the request body, e.g. `/timeSlotInput/end`, goes in the data:
    the API answers it as `param`)."""

    default_code = "VALIDATION_FAILED"

    def __init__(self, message: str, *, param: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        if param:
            self.data["param"] = param


class Forbidden(DomainError):
    """The caller may not do this here (a patient without a record in the clinic, ...)."""

    default_code = "FORBIDDEN"


class NotFound(DomainError):
    """What the input names does not exist for this caller (codes name what: PATIENT_NOT_FOUND, ...)."""

    default_code = "NOT_FOUND"


class Conflict(DomainError):
    """The input conflicts with what is stored (CALL_SID_CONFLICT, ...)."""

    default_code = "CONFLICT"


class Gone(DomainError):
    """What the input names is gone for good (PATIENT_MERGED: `mergedInto` names the survivor)."""

    default_code = "GONE"


class TooMany(DomainError):
    """A limit is reached for now (`retry_after` seconds)."""

    default_code = "TOO_MANY_REQUESTS"
