"""The import rules (docs/architecture.md, "Import rules"): the packages' layers are
import-linter's contracts in pyproject.toml (`lint-imports`, run by .ci/run); the top-level
modules, which import-linter cannot read (it reads packages only), are held here to the
same layers by reading their imports."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support import SERVICE_PACKAGES

#: The lint-imports script, run with this interpreter (whatever its first line names).
LINT_IMPORTS = [sys.executable, str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
TOP_MODULES = {"app", "wsgi", "worker", "manage", "migrations", "config"}
#: What each top-level module may import of the service (its layer and those below).
MAY_IMPORT = {
    "wsgi": {"app", "config"},
    # app: whether the schema has every migration (the web waits for a missing one).
    "app": SERVICE_PACKAGES - {"commands"} | {"config", "models", "migrations"},
    # worker: the jobs and what they build on; never the HTTP layer or the console.
    "worker": SERVICE_PACKAGES - {"commands", "resources", "console", "web"} | {"config", "migrations"},
    "manage": {"commands", "config", "plumbing", "tools"},
    "migrations": {"models", "plumbing"},
    "config": {"plumbing"},
}


def service_imports(path: Path) -> set[str]:
    """The top-level names of the service that the module imports (at any depth of its code)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & (SERVICE_PACKAGES | TOP_MODULES | {"tools"})


@pytest.mark.parametrize("module", sorted(MAY_IMPORT))
def test_a_top_level_module_imports_only_its_layer_and_below(module: str) -> None:
    imported = service_imports(ROOT / f"{module}.py") - {module}
    assert imported <= MAY_IMPORT[module], f"{module}.py imports {sorted(imported - MAY_IMPORT[module])}"


def test_the_packages_keep_their_contracts() -> None:
    """`lint-imports` with pyproject.toml's contracts: layers, what nothing below the entry
    points imports, plumbing free of the service, no cycles inside a package."""
    done = subprocess.run(LINT_IMPORTS, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_the_rules_reject_an_upward_import(tmp_path: Path) -> None:
    """The contracts are not empty words: a feature importing a job breaks them."""
    copy = tmp_path / "tree"
    for name in [*SERVICE_PACKAGES, "pyproject.toml"]:
        source = ROOT / name
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            subprocess.run(["cp", "-r", str(source), str(copy / name)], check=True)
        else:
            (copy / name).write_bytes(source.read_bytes())
    target = copy / "voicemail" / "recordings.py"
    target.write_text(target.read_text(encoding="utf-8") + "\nfrom jobs import queueing  # upward\n", encoding="utf-8")
    done = subprocess.run(
        LINT_IMPORTS,
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode != 0 and "voicemail.recordings -> jobs.queueing" in done.stdout, done.stdout[-2000:]


def test_one_docstring_style() -> None:
    """Names in docstrings and comments are marked with single backticks (`name`), never
    reStructuredText's double ones or roles (``name``, :func:`name`): one style to read."""
    roles = re.compile(r"``[^`\n]+``|:(?:func|class|meth|data|attr|mod|exc|obj):`")
    offenders = []
    for package in sorted(SERVICE_PACKAGES | {"tools"}):
        for path in (ROOT / package).rglob("*.py"):
            if roles.search(path.read_text(encoding="utf-8")):
                offenders.append(str(path.relative_to(ROOT)))
    offenders += [f"{m}.py" for m in sorted(TOP_MODULES) if roles.search((ROOT / f"{m}.py").read_text("utf-8"))]
    assert not offenders, offenders


def test_only_the_clock_reads_the_wall_clock():
    """One clock: every "now" of the service comes from `plumbing.clock` (the injected
    `Config.clock`, installed by the entry points), so a test that moves it moves the whole
    service. Reading the wall clock anywhere else is refused."""
    wall = re.compile(r"\bdatetime\.(?:now|utcnow|today)\(|\bdate\.today\(|\btime\.time\(\)|\bnow\(\)\s*$")
    offenders = []
    for package in sorted(SERVICE_PACKAGES):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "plumbing" / "clock.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if wall.search(line.split("#")[0]):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for module in sorted(TOP_MODULES):
        for number, line in enumerate((ROOT / f"{module}.py").read_text("utf-8").splitlines(), 1):
            if wall.search(line.split("#")[0]):
                offenders.append(f"{module}.py:{number}: {line.strip()}")
    assert offenders == [], offenders


#: The only places that read the process's clock without being handed it: a column's
#: default, for a row written without its time (a test's fixture, an old migration's row).
#: Every write of the service hands its own `now` (the caller's `Config.clock`).
DEFAULTS_WITHOUT_A_CALLER = {
    ("models/audit.py", "AuditEvent.at"),
    ("models/calls.py", "Call.received_at"),
    ("models/calls.py", "RefusedHandoff.at"),
    ("models/idempotency.py", "IdempotencyKey.created_at"),
    ("models/objects.py", "PendingObjectDeletion.created_at"),
    ("models/patients.py", "Patient.created_at"),
    ("models/patients.py", "PatientRecord.created_at"),
    ("models/requests.py", "PatientRequest.created_at"),
    ("models/requests.py", "Reservation.created_at"),
    ("models/requests.py", "UploadLink.created_at"),
    ("models/requests.py", "MedicalRecord.created_at"),
    ("models/schema.py", "SchemaMigration.applied_at"),
    ("models/staff.py", "StaffUser.created_at"),
    ("models/tokens.py", "ApiToken.created_at"),
}


def global_clock_reads(path: Path) -> list[tuple[int, str]]:
    """Where `path` reads the process-wide clock (`plumbing.clock.now` or `utc_now`), each
    as (line, what): a column default as "Class.field", anything else as the code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {"utc_now", "now"}  # as plumbing.clock exports them
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "plumbing.clock"
        for alias in node.names
        if alias.name in names
    }
    defaults: dict[int, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for statement in cls.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
                for keyword in statement.value.keywords:
                    value = keyword.value
                    if keyword.arg == "default" and isinstance(value, ast.Name) and value.id in imported:
                        target = statement.targets[0]
                        defaults[value.lineno] = f"{cls.name}.{getattr(target, 'id', '?')}"
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in imported and isinstance(node.ctx, ast.Load):
            reads.append((node.lineno, defaults.get(node.lineno, ast.unparse(node))))
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in names
            and isinstance(node.value, ast.Name)
            and node.value.id == "clock"
        ):
            reads.append((node.lineno, ast.unparse(node)))
    return reads


def test_every_now_is_handed_in_but_the_named_column_defaults():
    """One way to the clock: a write is handed `now` (or the clock) by its caller, from
    `Config.clock`; only the column defaults named in DEFAULTS_WITHOUT_A_CALLER read the
    process's clock themselves."""
    offenders, seen = [], set()
    files = [ROOT / f"{module}.py" for module in sorted(TOP_MODULES)]
    files += [path for package in sorted(SERVICE_PACKAGES) for path in sorted((ROOT / package).rglob("*.py"))]
    for path in files:
        if path == ROOT / "plumbing" / "clock.py":
            continue
        where = str(path.relative_to(ROOT))
        for line, what in global_clock_reads(path):
            if (where, what) in DEFAULTS_WITHOUT_A_CALLER:
                seen.add((where, what))
            else:
                offenders.append(f"{where}:{line}: {what}")
    assert offenders == [], offenders
    assert seen == DEFAULTS_WITHOUT_A_CALLER, f"named but gone: {sorted(DEFAULTS_WITHOUT_A_CALLER - seen)}"


def test_the_clock_rule_finds_a_read_it_does_not_allow(tmp_path: Path) -> None:
    """The rule is not empty words: a write that asks the global clock is found, a column
    default is told apart."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from plumbing import clock\n"
        "from plumbing.clock import utc_now\n"
        "class Row:\n"
        "    at = Field(default=utc_now)\n"
        "def write():\n"
        "    return utc_now(), clock.now()\n"
    )
    assert sorted(global_clock_reads(sample)) == [(4, "Row.at"), (6, "clock.now"), (6, "utc_now")]


def test_only_config_reads_the_environment():
    """Every setting is read by `config.py` (`Config.from_env`) and handed in: a module that
    reads `os.environ` or `os.getenv` itself is a setting the operator's table does not list
    and a test cannot set through `Config`. Refused anywhere else in the service."""
    offenders = []
    files = [ROOT / f"{module}.py" for module in sorted(TOP_MODULES - {"config"})]
    files += [path for package in sorted(SERVICE_PACKAGES) for path in sorted((ROOT / package).rglob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            reads = (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv")) or (
                isinstance(node, ast.ImportFrom)
                and any(a.name in ("environ", "environb", "getenv") for a in node.names)
            )
            if reads:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == [], offenders


_IMPORT_EVERYTHING = r'''
import atexit, importlib, json, os, pkgutil, sys, threading, traceback
root = sys.argv[1]
sys.path.insert(0, root)
seen = []

def caller():
    """Where the call was made, when the service's own code made it (not a library's)."""
    frame = traceback.extract_stack()[-3]
    if frame.filename.startswith(root) and "/.venv" not in frame.filename:
        return f"{frame.filename[len(root) + 1:]}:{frame.lineno}"
    return None

def watch(kind, original):
    def recorded(*args, **kwargs):
        where = caller()
        if where:
            seen.append(f"{kind} at {where}")
        return original(*args, **kwargs)
    return recorded

atexit.register = watch("atexit handler", atexit.register)
os.pipe = watch("pipe", os.pipe)
type(os.environ).__setitem__ = watch("environment write", type(os.environ).__setitem__)
type(os.environ).__delitem__ = watch("environment write", type(os.environ).__delitem__)
os.putenv = watch("environment write", os.putenv)
threading.Thread.start = watch("thread", threading.Thread.start)
import argon2
argon2.PasswordHasher.hash = watch("password hash", argon2.PasswordHasher.hash)  # CPU every command would pay
modules = ["app", "worker", "manage", "models", "config", "migrations"]
for package in json.loads(sys.argv[2]):
    found = importlib.import_module(package)
    modules += [info.name for info in pkgutil.walk_packages(found.__path__, package + ".")]
for name in modules:
    importlib.import_module(name)
print("SEEN " + json.dumps(seen))
# State is built by create_app and the worker's start: none lies in a module's globals.
import gc, redis, peewee
from plumbing.metrics import Recorder
from plumbing.row_cache import RowCache
built = (Recorder, RowCache, redis.Redis, redis.ConnectionPool, peewee.Database)
print("BUILT " + json.dumps(sorted({type(o).__name__ for o in gc.get_objects() if isinstance(o, built)})))
'''


def test_importing_the_service_starts_no_thread_opens_no_pipe_and_writes_no_environment():
    """Nothing happens at import: `app`, `worker`, `manage`, `models`, `jobs` and every feature package (not
    `wsgi`, which builds the app) start no thread, open no pipe, register no exit handler,
    write no environment variable and compute no password hash; and build no state: no metrics recorder, Redis
    client, row cache or database. The entry points build what a process needs and hand
    it in."""
    import json as _json

    packages = sorted(SERVICE_PACKAGES)
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERYTHING, str(ROOT), _json.dumps(packages)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    assert _json.loads(line.removeprefix("SEEN ")) == []
    [line] = [line for line in done.stdout.splitlines() if line.startswith("BUILT ")]
    assert _json.loads(line.removeprefix("BUILT ")) == []


def test_comments_name_no_issue_numbers_readme_sections_or_dated_measurements():
    """Comments stay true: they point at the documentation pages that hold a figure (the
    README is a short entry with no such sections), never at an issue's number (which says
    nothing to the next reader), and a measurement is a benchmark's output, not a dated
    note about a machine."""
    rules = (
        ("an issue number", re.compile(r"\b[Ii]ssues? #?\d+\b")),
        ("a README section", re.compile(r"README,?\s[\"“][A-Z]|\(README\b|README's \"")),
        ("a machine's measurement", re.compile(r"\bthis (?:project's )?machine\b|\bseen here\b")),
        (
            "a dated measurement",
            re.compile(
                r"\b(?:measured|fitted|fit|seen|run)\b.*\b20\d\d-\d\d-\d\d\b|"
                r"\b20\d\d-\d\d-\d\d\b.*\b(?:measured|fitted|fit)\b"
            ),
        ),
    )
    files = [
        path for package in sorted(SERVICE_PACKAGES | {"bench", "tools"}) for path in (ROOT / package).rglob("*.py")
    ]
    files += [ROOT / f"{module}.py" for module in sorted(TOP_MODULES)]
    offenders = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in rules:
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert offenders == [], offenders


def test_a_module_name_two_packages_hold_has_its_reason_in_the_contract_file() -> None:
    """One name, one thing: where two packages (or a package and the top level) hold a
    module of the same name, pyproject.toml's [tool.layout.repeated-module-names] says why;
    and every name it lists is still repeated."""
    reasons = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["layout"]["repeated-module-names"]
    where: dict[str, list[str]] = {}
    for module in TOP_MODULES:
        where.setdefault(module, []).append(f"{module}.py")
    for package in SERVICE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            where.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    repeated = {name: sorted(paths) for name, paths in where.items() if len(paths) > 1}
    assert {name: paths for name, paths in repeated.items() if name not in reasons} == {}
    assert sorted(set(reasons) - set(repeated)) == [], "listed, but no longer repeated"
