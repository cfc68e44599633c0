"""Docs that cannot rot: the README and docs/ are checked against the code and the running
service. Every relative link and file path they name resolves; every JSON example request
of the integrator pages validates against the OpenAPI document and is sent to the service,
its answer compared with the example answer's shape; the settings table of
docs/operations.md is config.py's; the error table of docs/integrators/README.md names every
code the service can answer (derived from the source); docs/openapi.json is what the service
serves (`DOCS_UPDATE=1` rewrites it)."""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import os
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from markdown_it import MarkdownIt

import config as config_module
from config import Config
from tests.conftest import ROOT
from tests.support import SERVICE_PACKAGES, bearer, issue_token, load
from tests.support.documented import closed, inlined

DOCS = ROOT / "docs"
PAGES = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted(p for p in DOCS.rglob("*.md") if "spec" not in p.relative_to(DOCS).parts),
]
INTEGRATOR_PAGES = [DOCS / "integrators" / "switchboard.md", DOCS / "integrators" / "signed-documents.md"]
METHODS = {"get", "put", "post", "patch", "delete"}
_MD = MarkdownIt("commonmark").enable("table")


def tokens(page: Path) -> Iterator[Any]:
    for token in _MD.parse(page.read_text("utf-8")):
        yield token
        yield from token.children or ()


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --- links and paths -----------------------------------------------------------------

# A path named in backquotes that is meant as a file of the repository: one whose first
# folder is a folder of the repository (`docs/…`, `tests/…`, `bin/run`), or a bare file
# name of the kinds the repository holds (`config.py`), which must be a file somewhere in
# it. Runtime paths (var/, .venv/), URL paths ("/docs") and API paths are not.
_PATH = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$")
_FILE_KINDS = (".py", ".md", ".json", ".txt", ".in", ".patch", ".css", ".html", ".po", ".js", ".png")
_SKIP = {".venv", ".venv-clients", "node_modules", ".git", "var", "__pycache__"}


def _tracked_names() -> set[str]:
    names: set[str] = set()
    for _folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        names.update(files)
    return names


def named_paths(page: Path) -> Iterator[tuple[str, str]]:
    """("link", target) for every link and image, ("path", text) for every code span that
    names a path of the repository, ("name", text) for a bare file name."""
    for token in tokens(page):
        if token.type == "link_open":
            yield "link", str(token.attrGet("href"))
        elif token.type == "image":
            yield "link", str(token.attrGet("src"))
        elif token.type == "code_inline":
            text = token.content.strip().removeprefix("./")
            if not _PATH.match(text) or text.startswith(("var/", ".venv")):
                continue
            first = text.split("/", 1)[0]
            if "/" in text.rstrip("/") and ((ROOT / first).is_dir() or (page.parent / first).is_dir()):
                yield "path", text
            elif "/" not in text and text.endswith(_FILE_KINDS):
                yield "name", text


def test_every_link_and_path_in_the_docs_resolves():
    broken, names = [], _tracked_names()
    for page in PAGES:
        for kind, target in named_paths(page):
            if kind == "name":
                if target not in names:
                    broken.append(f"{rel(page)}: {target}")
                continue
            if kind == "link":
                parts = urlsplit(target)
                if parts.scheme or parts.netloc or target.startswith("#"):
                    continue
                where = (page.parent / parts.path).resolve()
            else:
                where = (ROOT / target).resolve()
                if not where.exists():  # a name relative to the page's own folder
                    where = (page.parent / target).resolve()
            if not where.exists():
                broken.append(f"{rel(page)}: {target}")
    assert not broken, broken
    assert sum(1 for page in PAGES for _ in named_paths(page)) > 100, "the docs were read"


def test_the_docs_name_no_issue_numbers_machine_paths_or_long_readme():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) <= 200
    for page in PAGES + [DOCS / "staff" / p.name for p in (DOCS / "staff").glob("*.md")]:
        text = page.read_text("utf-8")
        assert not re.search(r"\b[Ii]ssues? #?\d+", text), f"{rel(page)} names an issue"
        assert not re.search(r"(?<![\w.])/(work|home|root|Users)/", text), f"{rel(page)} names a machine path"


# --- JSON examples of the integrator pages ----------------------------------------------


@dataclasses.dataclass
class Example:
    page: str
    operation: str
    request: Any = None
    has_request: bool = False
    status: int | None = None
    response: Any = None


def examples() -> dict[str, Example]:
    """The fenced blocks `json request:<operationId>` and `json response:<operationId> <status>`."""
    found: dict[str, Example] = {}
    for page in INTEGRATOR_PAGES:
        for token in tokens(page):
            if token.type != "fence":
                continue
            words = token.info.split()
            if len(words) < 2 or words[0] != "json" or ":" not in words[1]:
                continue
            role, operation = words[1].split(":", 1)
            example = found.setdefault(operation, Example(rel(page), operation))
            body = json.loads(token.content)
            if role == "request":
                example.request, example.has_request = body, True
            elif role == "response":
                example.status, example.response = int(words[2]), body
            else:
                raise AssertionError(f"{rel(page)}: unknown example role {role!r}")
    return found


def operations(document: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    return {
        op["operationId"]: (method, path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def shape_errors(answer: Any, example: Any, where: str = "$") -> list[str]:
    """Where `answer` differs from `example` in shape: the same keys in every object, the same
    JSON type of every value (null in either stands for any value); each element of an
    answer's array is compared with the example's element at its index, else its first."""
    if answer is None or example is None:
        return []
    if isinstance(example, dict):
        if not isinstance(answer, dict):
            return [f"{where}: an object in the example, {type(answer).__name__} in the answer"]
        errors = []
        if set(answer) != set(example):
            errors.append(f"{where}: keys {sorted(answer)} answered, {sorted(example)} in the example")
        for key in set(answer) & set(example):
            errors += shape_errors(answer[key], example[key], f"{where}.{key}")
        return errors
    if isinstance(example, list):
        if not isinstance(answer, list):
            return [f"{where}: an array in the example"]
        if not example:
            return []
        return [
            e
            for i, item in enumerate(answer)
            for e in shape_errors(item, example[min(i, len(example) - 1)], f"{where}[{i}]")
        ]
    kinds = (bool, (int, float), str)
    for kind in kinds:
        if isinstance(example, kind) and not (isinstance(example, bool) and kind is not bool):
            if not isinstance(answer, kind) or (isinstance(answer, bool) and kind is not bool):
                return [f"{where}: {answer!r} answered, {example!r} in the example"]
            return []
    return []


def test_shape_comparison_tells_a_missing_key_and_a_wrong_type():
    assert shape_errors({"data": [{"a": 1, "b": None}]}, {"data": [{"a": 2, "b": "x"}]}) == []
    assert shape_errors({"data": [{"a": "1"}]}, {"data": [{"a": 2}]})
    assert shape_errors({"data": [{"a": 1}]}, {"data": [{"a": 1, "b": 2}]})
    assert shape_errors({"ok": 1}, {"ok": True})


def test_every_example_is_valid_against_the_openapi_document(app):
    document = app.get("/openapi.json").json
    ops = operations(document)
    found = examples()
    assert {"recordingComplete", "hasActiveRequest", "createPatientRequest", "registerAttachment"} <= set(found)
    for example in found.values():
        assert example.operation in ops, f"{example.page}: no operation {example.operation}"
        _method, _path, op = ops[example.operation]
        # Closed: every field an example names is a field of the schema (a misspelt one fails).
        if example.has_request:
            schema = inlined(document, op["requestBody"]["content"]["application/json"]["schema"])
            Draft202012Validator(closed(schema)).validate(example.request)
        assert example.status is not None, f"{example.page}: {example.operation} shows no answer"
        answer = op["responses"][str(example.status)]["content"]["application/json"]["schema"]
        Draft202012Validator(closed(inlined(document, answer))).validate(example.response)


# The order the examples are sent in: the flow of the two pages (a request is created
# before its documents). An example of an operation missing here fails the test below.
FLOW = [
    "isClinicOpened",
    "isOnVacation",
    "hasActiveRequest",
    "recordingComplete",
    "searchPatientRequestTypes",
    "searchPatients",
    "importPatient",
    "importPatientsBulk",
    "createPatientRequest",
    "createUploadLink",
    "registerAttachment",
    "getPatientRequest",
    "searchPatientRequests",
    "listTags",
    "updatePatientRequest",
]
QUERIES = {"listTags": "type=patient_request"}
PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"


def test_every_example_request_is_answered_as_its_page_shows(app, example):
    load(example)  # examples/onboarding.json: the demo clinic and its ids
    token = issue_token(["demo-clinic"], ["read", "write"])
    document = app.get("/openapi.json").json
    ops = operations(document)
    found = examples()
    assert not set(found) - set(FLOW), f"examples not sent by this test: {set(found) - set(FLOW)}"
    state: dict[str, Any] = {}
    for name in FLOW:
        shown = found.get(name)
        if shown is None:
            continue
        method, template, _ = ops[name]
        path = template.replace("{clinicSlug}", "demo-clinic").replace("{requestId}", state.get("requestId", ""))
        if name in QUERIES:
            path += "?" + QUERIES[name]
        body = shown.request
        if name == "registerAttachment":  # the file the upload link of this run received
            app.put(state["uploadPath"], PDF, headers={"Content-Type": "application/pdf"}, status=200)
            body = {**body, "fileHash": state["fileHash"]}
        if shown.has_request:
            answer = app.request(
                path,
                method=method.upper(),
                body=json.dumps(body).encode(),
                headers={**bearer(token), "Content-Type": "application/json"},
                expect_errors=True,
            )
        else:
            answer = app.request(path, method=method.upper(), headers=bearer(token), expect_errors=True)
        assert answer.status_int == shown.status, f"{shown.page}: {name} answered {answer.status_int}: {answer.text}"
        errors = shape_errors(answer.json, shown.response)
        assert not errors, f"{shown.page}: {name}: {errors}"
        if name == "createPatientRequest":
            state["requestId"] = answer.json["data"]["id"]
        if name == "createUploadLink":
            url = urlsplit(answer.json["data"]["url"])
            state["uploadPath"], state["fileHash"] = f"{url.path}?{url.query}", answer.json["data"]["fileHash"]
    assert "requestId" in state and "fileHash" in state, "the document flow ran"


# --- the settings table --------------------------------------------------------------------


def table(page: Path, first_header: str) -> list[dict[str, str]]:
    """The rows of the first table of `page` whose first header cell is `first_header`."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in page.read_text("utf-8").splitlines():
        if not line.startswith("|"):
            if rows:
                break
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells if cells[0] == first_header else None
        elif set(line) <= set("|-: "):
            continue
        else:
            rows.append(dict(zip(header, cells)))
    assert rows, f"no table headed {first_header!r} in {rel(page)}"
    return rows


def test_the_settings_table_is_config_py():
    rows = table(DOCS / "operations.md", "variable")
    documented = {row["variable"].strip("`"): row for row in rows}
    read = config_module._ENV
    assert set(documented) == set(read), (
        f"documented, not read: {set(documented) - set(read)}; read, not documented: {set(read) - set(documented)}"
    )
    defaults = Config()
    derived = {"SECRET_KEY", "STORAGE_SIGNING_KEY"}  # computed defaults, described in words
    for name, (field, parse) in read.items():
        row = documented[name]
        assert row["required"].split()[0] in ("required", "optional"), row
        assert row["example"] and row["meaning"], row
        cell = row["default"]
        if name in derived:
            continue
        if cell == "empty":
            assert getattr(defaults, field) == "", (name, cell)
            continue
        assert re.fullmatch(r"`[^`]*`", cell), f"{name}: the default is a value in backquotes, or 'empty'"
        assert parse(cell.strip("`")) == getattr(Config, field), (
            f"{name}: documented {cell}, config.py has {getattr(Config, field)!r}"
        )
    for _current, former in config_module._FORMER_NAMES.items():
        assert former in (DOCS / "operations.md").read_text("utf-8"), f"the former name {former} is documented"


# --- the error table -----------------------------------------------------------------------

# Every package an API answer can come from: the staff accounts' refusals are the console's
# alone (it says them in words; no API route reaches staff/).
_SOURCE_DIRS = sorted(SERVICE_PACKAGES - {"staff"})


def answered_codes() -> set[tuple[int, str]]:
    """(status, code) of every error the service can answer, read from its source: each
    `APIError(status, "CODE", ...)`, each domain refusal (`plumbing.errors`: `NotFound(...,
    code="...")`, or the class's default code; a subclass defined in the source counts as its
    base) with the status web/errors.py maps it to, and the serializer's default code per status."""
    from plumbing import errors as domain
    from web.errors import DOMAIN_STATUSES

    files = [ROOT / "app.py", *(p for d in _SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))]
    kinds = {cls.__name__: cls for cls in DOMAIN_STATUSES}
    trees = [ast.parse(path.read_text("utf-8")) for path in files]
    for tree in trees:  # subclasses of the domain's refusals, by name
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                base = next((kinds[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in kinds), None)
                if base is not None:
                    kinds.setdefault(node.name, base)

    def code_of(call: ast.Call, default: str) -> str:
        given = next((k.value for k in call.keywords if k.arg == "code"), None)
        return given.value if isinstance(given, ast.Constant) else default

    codes: set[tuple[int, str]] = set()
    for tree in trees:
        for node in ast.walk(tree):
            name = getattr(node.func, "id", getattr(node.func, "attr", None)) if isinstance(node, ast.Call) else None
            if name == "APIError" and len(node.args) >= 2 and all(isinstance(a, ast.Constant) for a in node.args[:2]):
                codes.add((node.args[0].value, node.args[1].value))
            if name in kinds:
                kind = kinds[name]
                codes.add(
                    (
                        DOMAIN_STATUSES[next(k for k in DOMAIN_STATUSES if issubclass(kind, k))],
                        code_of(node, kind.default_code),
                    )
                )
            if isinstance(node, ast.ClassDef) and node.name in kinds:  # super().__init__(..., code="...") inside
                for call in (
                    n for n in ast.walk(node) if isinstance(n, ast.Call) and any(k.arg == "code" for k in n.keywords)
                ):
                    kind = kinds[node.name]
                    codes.add(
                        (
                            DOMAIN_STATUSES[next(k for k in DOMAIN_STATUSES if issubclass(kind, k))],
                            code_of(call, kind.default_code),
                        )
                    )
            if (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "_DEFAULT_CODES" for t in node.targets)
                and isinstance(node.value, ast.Dict)
            ):
                codes |= {(k.value, v.value) for k, v in zip(node.value.keys, node.value.values)}
    assert domain.DomainError  # the module the refusals come from
    return codes


ERROR_TABLE = DOCS / "integrators" / "README.md"
_TABLE_HEAD = "| status | code | cause | what the caller should do |\n|---|---|---|---|\n"


def error_table() -> str:
    """The error table as web/error_codes.py has it, in Markdown."""
    from web.error_codes import ERROR_CODES, anchor

    return _TABLE_HEAD + "".join(
        f'| {row.status if row.status is not None else "other 4xx"} | <a id="{anchor(row.code)}"></a>`{row.code}` '
        f"| {row.cause} | {row.action} |\n"
        for row in ERROR_CODES
    )


def test_the_error_table_is_web_error_codes_py():
    """The table integrators read is the table the service answers from (`DOCS_UPDATE=1`
    rewrites it from web/error_codes.py)."""
    text = ERROR_TABLE.read_text("utf-8")
    start = text.index(_TABLE_HEAD)
    end = text.index("\n\n", start) + 1
    if os.environ.get("DOCS_UPDATE") == "1":
        text = text[:start] + error_table() + text[end:]
        ERROR_TABLE.write_text(text, "utf-8")
        end = start + len(error_table())
    assert text[start:end] == error_table(), (
        "docs/integrators/README.md's error table is not web/error_codes.py's: "
        "run DOCS_UPDATE=1 bin/test tests/test_docs.py"
    )


def test_every_error_code_the_service_raises_is_in_web_error_codes_py():
    from web.error_codes import BY_CODE

    answered = answered_codes()
    assert len(answered) >= 20 and (409, "CALL_SID_CONFLICT") in answered, "the source was read"
    unknown = sorted((status, code) for status, code in answered if code not in BY_CODE)
    assert not unknown, f"raised but not in web/error_codes.py: {unknown}"
    wrong = sorted((status, code) for status, code in answered if BY_CODE[code].status not in (None, status))
    assert not wrong, f"raised with another status than web/error_codes.py's: {wrong}"
    never = sorted(row.code for row in BY_CODE.values() if row.answered and row.code not in {c for _, c in answered})
    assert not never, f"in web/error_codes.py but raised nowhere: {never}"


# --- the committed OpenAPI document --------------------------------------------------------


def test_docs_openapi_json_is_what_the_service_serves(app, config):
    assert config.public_base_url == Config.public_base_url, "compared as served with the default PUBLIC_BASE_URL"
    served = app.get("/openapi.json").json
    committed = DOCS / "openapi.json"
    if os.environ.get("DOCS_UPDATE") == "1":
        committed.write_text(json.dumps(served, indent=2, ensure_ascii=False) + "\n", "utf-8")
    assert json.loads(committed.read_text("utf-8")) == served, (
        "docs/openapi.json differs from /openapi.json: after an API change run "
        "DOCS_UPDATE=1 bin/test tests/test_docs.py"
    )


# --- the code's own prose ----------------------------------------------------------------------

_NAMED_PATH = re.compile(
    r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)+[\w.-]+\.(?:py|md|json|sql|txt|html|css|js|po|in|toml|sh)"
    r"|(?:[A-Za-z_][\w-]*/)+(?=[\s`),:;.]|$))"
)
#: Paths the prose names that are not this repository's, each with why.
_NOT_OURS = {
    "models/convert-pt-to-ggml.py": "whisper.cpp's converter, in its repository",
    "locale/": "the folder beside the console and the e-mails that holds each one's catalogue",
    "locale/cs/LC_MESSAGES/messages.po": "the catalogue in that folder, beside the console and the e-mails",
    "root/": "a LocalStorage's root directory, wherever the deployment puts it",
    "requests/": "a folder under the local storage's root",
    "voicemails/": "the labelled set's folder under tests/audio/",
}


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """The docstrings and comments of a Python file, each with its first line's number."""
    text = path.read_text("utf-8")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def test_no_docstring_or_comment_names_a_file_that_is_gone():
    """A docstring or comment that names a path of the repository names one that exists
    (from the root or the file's own folder): a module moved without its mentions fails."""
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    missing = []
    for name in files.stdout.split():
        path = ROOT / name
        for line, text in _prose(path):
            for match in _NAMED_PATH.finditer(text):
                named = match.group(1)
                if named in _NOT_OURS or named.startswith(("var/", ".venv")):
                    continue
                if not ((ROOT / named).exists() or (path.parent / named).exists()):
                    missing.append(f"{name}:{line}: {named}")
    assert missing == [], missing
