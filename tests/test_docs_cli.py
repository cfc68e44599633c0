"""The operator's documents are checked against the code they describe.

The operator CLI: `docs/operations.md`'s section and `manage.py --help` (its docstring)
each name every command of `manage.py`'s own parsers (`model` is tools/whisper_convert.py's)
on one line, with every option the command takes and none it does not.

The onboarding file: `examples/onboarding.json` is valid against the onboarding schema and
uses every field the schema has (so "a complete example" is true), and the field list of
"Onboarding a clinic" names every field of the schema and none that is not one.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from typing import Any

import manage
from onboarding.document_schema import SCHEMA
from plumbing.json_schema import first_error
from tests.conftest import ROOT
from tools import whisper_convert

OPERATIONS = (ROOT / "docs" / "operations.md").read_text("utf-8")
EXAMPLE = json.loads((ROOT / "examples" / "onboarding.json").read_text("utf-8"))


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, set[str]]]:
    """Every command (`token rotate`) with the long options it takes (hidden ones aside)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if subs:
        for name, child in subs[0].choices.items():
            yield from leaves(child, (*path, name))
        return
    options = {
        option
        for action in parser._actions
        if action.help is not argparse.SUPPRESS
        for option in action.option_strings
        if option.startswith("--") and option != "--help"
    }
    yield " ".join(path), options


def commands() -> dict[str, set[str]]:
    found = {name: options for name, options in leaves(manage.parser()) if name != "model"}
    found.update({f"model {name}": options for name, options in leaves(whisper_convert.parser())})
    return found


def documented(text: str) -> dict[str, list[str]]:
    """Each `python manage.py ...` line of `text` by the command it names (comments aside)."""
    known = commands()
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith("python manage.py "):
            continue
        words = line.split("#")[0].split()[2:]
        named = max((c for c in known if words[: len(c.split())] == c.split()), key=len, default=None)
        assert named is not None, f"no such command: {line}"
        out.setdefault(named, []).append(line.split("#")[0])
    return out


def cli_section() -> str:
    section = OPERATIONS.split("\n## The operator CLI\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def assert_names_every_command(text: str, where: str) -> None:
    lines = documented(text)
    known = commands()
    assert sorted(set(known) - set(lines)) == [], f"{where} leaves out commands"
    for command, options in known.items():
        assert len(lines[command]) == 1, f"{where}: {command} on {len(lines[command])} lines"
        named = set(re.findall(r"--[a-z0-9][a-z0-9-]*", lines[command][0]))
        assert named == options, f"{where}: {command}: missing {options - named}, unknown {named - options}"


def test_the_operations_guide_names_every_command_and_option_of_the_cli():
    assert_names_every_command(cli_section(), "docs/operations.md")


def test_manage_py_help_names_every_command_and_option():
    assert_names_every_command(manage.__doc__ or "", "manage.py's --help")


def test_a_command_the_parsers_do_not_have_is_refused_by_the_check():
    """The check itself: a made-up command or option in the section fails it."""
    for wrong in ("python manage.py token list --all\n", "python manage.py patient forget X\n"):
        try:
            assert_names_every_command(cli_section() + wrong, "a page")
        except AssertionError:
            continue
        raise AssertionError(f"not caught: {wrong}")


# --- the onboarding file -------------------------------------------------------------------


def schema_fields(schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Every field the schema defines, as `clinics[].retention.auditDetailsDays`."""
    if schema.get("type") == "array" or "items" in schema:
        yield from schema_fields(schema.get("items", {}), path + "[]")
    for name, child in (schema.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        yield here
        yield from schema_fields(child, here)


def used_fields(value: Any, path: str = "", free: frozenset[str] = frozenset()) -> Iterator[str]:
    """Every field `value` uses; the keys of a free-form map (words per language) are no fields."""
    if isinstance(value, list):
        for item in value:
            yield from used_fields(item, path + "[]", free)
    elif isinstance(value, dict) and path not in free:
        for name, child in value.items():
            here = f"{path}.{name}" if path else name
            yield here
            yield from used_fields(child, here, free)


#: Maps of words per language: their keys are language codes, not fields.
FREE_FORM = frozenset({"clinics[].urgencyWords", "clinics[].requestTypes[].transcriptWords.words"})


def test_the_example_onboarding_file_is_valid_and_uses_every_field():
    assert first_error(EXAMPLE, SCHEMA) is None
    defined = set(schema_fields(SCHEMA))
    used = set(used_fields(EXAMPLE, free=FREE_FORM))
    assert sorted(defined - used) == [], "examples/onboarding.json is not complete"
    assert sorted(used - defined) == []


def field_list() -> str:
    section = OPERATIONS.split("\n## Onboarding a clinic\n", 1)[1]
    return section.split("```jsonc\n", 1)[1].split("```", 1)[0]


def without_comments(jsonc: str) -> str:
    """JSON with comments as JSON: `//` to the end of the line, outside strings."""
    out, in_string, i = [], False, 0
    while i < len(jsonc):
        c = jsonc[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(jsonc[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif jsonc.startswith("//", i):
            while i < len(jsonc) and jsonc[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def test_the_documented_field_list_names_every_field_of_the_schema_and_no_other():
    listed = json.loads(without_comments(field_list()))
    defined = set(schema_fields(SCHEMA))
    named = set(used_fields(listed, free=FREE_FORM))
    assert sorted(defined - named) == [], "the field list leaves out fields"
    assert sorted(named - defined) == [], "the field list names fields the schema does not have"
