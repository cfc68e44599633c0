"""What production installs (requirements.txt) is enough for what production runs.

requirements.txt pins what the Procfile's processes and the image's model build need;
requirements-dev.txt adds what only the tests, the benchmarks, the tools and the examples
need. The development-only packages are those pinned in requirements-dev.txt and not in
requirements.txt (read from the two files, not listed here), and no module of the service
(anything outside tests/, bench/, tools/ and examples/: the examples are the sample
voicemail server of `bin/run --try-handoff` and an API client, never run by production)
may import one, at its top or inside a function.
"""

from __future__ import annotations

import ast
import importlib.metadata
import pickle
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

#: Folders whose modules production never runs.
DEVELOPMENT_ONLY = ("tests", "bench", "tools", "examples")
#: Not the project's modules.
NOT_OURS = ("var", "node_modules")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """`name: version` of every `name==version` line of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            name, sep, version = line.partition("==")
            assert sep and version, f"{path.name}: {line!r} is not pinned with =="
            found[normalized(name)] = version
    return found


def development_only_imports() -> dict[str, str]:
    """Top-level import names that only development-only distributions provide: name -> the
    distribution."""
    runtime, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    dev_only = set(dev) - set(runtime)
    names = {}
    for module, distributions in importlib.metadata.packages_distributions().items():
        providers = {normalized(d) for d in distributions}
        if providers and providers <= dev_only:
            names[module] = sorted(providers)[0]
    return names


def _parsed(path: Path) -> ast.AST:
    """`path`'s syntax tree. CPython 3.11's AST validator can refuse a sound file with
    "AST constructor recursion depth mismatch" when something earlier in the same process left
    its depth count off (seen when other tests ran before this one in its process); a fresh
    interpreter parses it then."""
    try:
        return ast.parse(path.read_text(), str(path))
    except SystemError:
        script = "import ast, pickle, sys; sys.stdout.buffer.write(pickle.dumps(ast.parse(open(sys.argv[1]).read())))"
        done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, check=True, timeout=60)
        return pickle.loads(done.stdout)


def imported_names(path: Path) -> set[str]:
    """Top-level names of every absolute import in `path` (at its top or inside a function),
    and of the string given to `importlib.import_module` / `find_spec` / `__import__`."""
    names = set()
    for node in ast.walk(_parsed(path)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "find_spec", "__import__")
        ):
            names.add(node.args[0].value.split(".")[0])
    return names


def modules(under: Path, skip: tuple[str, ...]) -> list[Path]:
    found = []
    for path in sorted(under.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0] in skip or parts[0] in NOT_OURS or any(part.startswith(".") for part in parts):
            continue
        found.append(path)
    return found


def offenders(paths: list[Path], forbidden: dict[str, str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name} ({forbidden[name]}, requirements-dev.txt)"
        for path in paths
        for name in sorted(imported_names(path) & set(forbidden))
    ]


def test_no_service_module_imports_a_development_only_package():
    forbidden = development_only_imports()
    # The check has teeth: the development-only set holds the test runner and the browser
    # driver, and the suite's own modules (which may use them) are caught by it.
    assert {"pytest", "playwright", "webtest", "trustme"} <= set(forbidden), sorted(forbidden)
    assert offenders([ROOT / "tests" / "conftest.py"], forbidden), "the check finds an import of pytest"
    service = modules(ROOT, skip=DEVELOPMENT_ONLY)
    assert len(service) > 50 and ROOT / "wsgi.py" in service and ROOT / "manage.py" in service
    assert offenders(service, forbidden) == []


def test_the_development_pins_add_to_the_runtime_pins_and_never_repin_one():
    dev_text = (ROOT / "requirements-dev.txt").read_text()
    assert "-r requirements.txt" in dev_text.splitlines(), "installing the dev file installs the runtime one too"
    runtime, dev = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-dev.txt")
    assert set(runtime) & set(dev) == set(), "a package is pinned in one file only"
    # Each .in names only packages its .txt (or, for the dev one, either .txt) pins.
    for source, pinned in (("requirements.in", runtime), ("requirements-dev.in", {**runtime, **dev})):
        wanted = pins(ROOT / source)
        assert {name: version for name, version in wanted.items() if pinned.get(name) != version} == {}, source
