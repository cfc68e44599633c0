"""Every answer the service gave, read by the Python client openapi-python-client generated
(tests/test_generated_clients.py writes them to a JSON file: operation, its module's
package, status, headers, body): each goes through the operation's own response parsing
with `raise_on_unexpected_status`, as a live call would, and the model it makes is
written back (`to_dict`) and compared with the body: the same fields and values (times
compared as times), nothing kept aside as an unknown field. Prints one line per answer
read; exits non-zero at the first that the client refuses or changes.

    read_answers.py ANSWERS.json
"""

from __future__ import annotations

import importlib
import json
import sys
from datetime import datetime
from typing import Any

import httpx
from clinic_client import Client
from clinic_client.types import Unset


def normal(value: Any) -> Any:
    """`value` with every date-time string as a datetime (the client writes them its own way)."""
    if isinstance(value, dict):
        return {key: normal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normal(item) for item in value]
    if isinstance(value, str) and len(value) >= 20 and value[4:5] == "-" and value[10:11] == "T":
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    return value


def unknown_fields(model: Any, where: str = "$") -> list[str]:
    """Fields the client kept aside as not in its model (`additional_properties`)."""
    found = []
    extra = getattr(model, "additional_properties", None)
    if extra:
        found.append(f"{where}: {sorted(extra)}")
    for field in getattr(model, "__attrs_attrs__", ()):
        name, value = field.name, getattr(model, field.name)
        if name == "additional_properties" or isinstance(value, Unset):
            continue
        for index, item in enumerate(value if isinstance(value, list) else [value]):
            if hasattr(item, "__attrs_attrs__"):
                found += unknown_fields(item, f"{where}.{name}[{index}]")
    return found


def main(path: str) -> None:
    client = Client(base_url="http://service.invalid", raise_on_unexpected_status=True)
    with open(path, encoding="utf-8") as f:
        answers = json.load(f)
    for number, answer in enumerate(answers):
        module = importlib.import_module(f"clinic_client.api.{answer['package']}.{answer['module']}")
        response = httpx.Response(answer["status"], headers=answer["headers"], content=answer["body"].encode())
        where = f"{number}: {answer['operation']} {answer['status']}"
        try:
            parsed = module._build_response(client=client, response=response).parsed
        except Exception as exc:  # the client refused the answer: that is the finding
            sys.exit(f"{where}: the client refused it: {type(exc).__name__}: {exc}")
        body = json.loads(answer["body"]) if answer["body"] and answer["json"] else None
        if body is not None:
            if parsed is None:
                sys.exit(f"{where}: the client made nothing of {answer['body'][:200]}")
            again = parsed.to_dict() if hasattr(parsed, "to_dict") else parsed
            if normal(again) != normal(body):
                sys.exit(f"{where}: read as {again!r}, answered {body!r}")
            extra = unknown_fields(parsed)
            if extra:
                sys.exit(f"{where}: fields the client does not know: {extra}")
        print(f"{where}: {type(parsed).__name__}")


if __name__ == "__main__":
    main(*sys.argv[1:])
