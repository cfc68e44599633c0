"""pytest plugin: the whole suite logs at DEBUG, and no secret and no personal data may
reach a log.

Loaded from conftest.py (`pytest_plugins`). For the whole session it sets the root
logger to DEBUG, applies the service's own logging safety rules (`logs.install_safety`,
what every entry point does) and keeps every record of the test process in memory,
formatted (arguments and exception text included), with its level. Subprocesses the suite
starts log to files: `watch(path)` adds one; the output file of any gunicorn or
`manage.py` subprocess is added by itself (the session worker's log among them; it runs at
LOG_LEVEL=DEBUG), and so is the captured stderr of `subprocess.run` of such a command.

At the end of the session every line, at any level, is checked for
- API tokens: the pattern `csk_<32 hex>_<secret>`, and every token issued in this process
  (its secret part alone too);
- every plaintext the suite encrypted with `crypto.encrypt` (provider passwords, platform
  tokens) and secrets registered with `remember()`;
- presigned URL credentials: `X-Amz-Signature` / `X-Amz-Credential` / `X-Amz-Security-Token`,
  SigV4 `Signature=<64 hex>`, the local backend's `signature=` / `expires=` parameters;
- any URL with a query string (recording URLs, presigned URLs): the service logs URLs only
  through `safe_fetch.redact_url`, which keeps scheme, host and a hash of the path;
- `Bearer <credential>` (platform tokens in headers);

and every line at INFO or above (a subprocess's line's level is read from it: JSON lines'
"level", `LOG_FORMAT=text` lines, gunicorn's own; a line whose level cannot be read, such
as a command's stderr, counts as INFO; a traceback's lines take their record's level) for
personal data:
- phone numbers: E.164 (`+420601123456`, `+420 601 123 456`) and Czech national
  (`601123456`, `601 123 456`);
- e-mail addresses;
- values registered with `remember_personal()`: the names, e-mail addresses, phone
  numbers and notes of every organization `tests.support.load` onboards
  (`remember_people`), the sentences of every transcript `processed_call` waits for
  (`remember_transcript`), and whatever a test seeds itself.

Any finding fails the run (exit status 1) and is listed, masked, in the terminal summary.
Run in parallel (pytest-xdist), each process audits its own logs and sends its counts and
findings to the controlling process, which fails the run and lists them.
"""

from __future__ import annotations

import bisect
import logging
import re
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import ahocorasick
import pytest

#: Shortest exact secret or personal value checked (shorter strings would match ordinary words).
MIN_SECRET = 8

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("API token", re.compile(r"csk_[0-9a-f]{32}_[A-Za-z0-9_-]{16,}")),
    ("presigned S3 credential", re.compile(r"X-Amz-(?:Signature|Credential|Security-Token)=", re.I)),
    ("SigV4 signature", re.compile(r"Signature=[0-9a-f]{64}")),
    ("signed query parameter", re.compile(r"[?&](?:signature|sig|expires|token|access_token|X-Amz-[A-Za-z-]+)=", re.I)),
    ("URL with a query string", re.compile(r"[a-z][a-z0-9+.-]*://[^\s\"'<>?#]+\?[^\s\"'<>#]*[=&]", re.I)),
    ("bearer credential", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/-]{16,}")),
)


#: Personal data, looked for in lines at INFO and above. The boundaries keep the service's
#: own numbers out: ids (hex and UUIDs), durations and sizes with a decimal point, ports and
#: times after a colon, epoch seconds (ten digits), counts below nine digits.
PERSONAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # E.164 (spaces, dots or dashes between the digits), else a Czech national number.
    (
        "phone number",
        re.compile(
            r"(?<![\w+])\+[1-9](?:[ .-]?\d){7,14}(?!\d)"
            r"|(?<![\w.,:/+#-])[2-9]\d{2} ?\d{3} ?\d{3}(?![\w.,:/-])"
        ),
    ),
    ("e-mail address", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")),
)

# The level of a line of a subprocess's log: a JSON line's "level" (plumbing/logs.py puts it
# second), a LOG_FORMAT=text line's (after asctime), gunicorn's own "[ts] [pid] [LEVEL]".
# A record of the last two may go on over more lines (a traceback); a JSON record never does.
_JSON_LEVEL = re.compile(r'\{"ts": "[^"]*", "level": "([A-Z]+)"')
_TEXT_LEVEL = (
    re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ([A-Z]+) "),
    re.compile(r"\[[^\]]*\] \[\d+\] \[([A-Z]+)\] "),
)
# The lines of a traceback after its record's first line.
_CONTINUATION = re.compile(
    r"\s|Traceback \(|During handling of|The above exception|[\w.]+(?:Error|Exception|Warning)\b"
)


def _level_name(name: str) -> int | None:
    level = logging.getLevelName(name)
    return level if isinstance(level, int) else None


def level_of(line: str) -> int | None:
    """The level a log line says it has, None when it says none."""
    return _header(line)[0]


def _header(line: str) -> tuple[int | None, bool]:
    """(the level a line says it has or None, whether its record may go on over the next lines)."""
    match = _JSON_LEVEL.match(line)
    if match:
        return _level_name(match.group(1)), False
    for pattern in _TEXT_LEVEL:
        match = pattern.match(line)
        if match:
            return _level_name(match.group(1)), True
    return None, False


def _levels(lines: Iterable[str]) -> Iterable[tuple[str, int | None]]:
    """Each line with its level: its own, or for a traceback's line after a record that may
    go on, that record's; None for any other line (counted as INFO)."""
    going_on: int | None = None
    for line in lines:
        level, may_go_on = _header(line)
        if level is not None:
            going_on = level if may_go_on else None
            yield line, level
        elif going_on is not None and _CONTINUATION.match(line):
            yield line, going_on
        else:
            going_on = None
            yield line, None


@dataclass(frozen=True)
class Finding:
    kind: str
    source: str
    excerpt: str  # masked


class Audit:
    """The session's captured log lines and known secrets; `findings()` checks them."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, int | None]] = []  # (source, text, level or None: read from the text)
        self.secrets: dict[str, str] = {}  # secret -> what it is
        self.personal: dict[str, str] = {}  # personal value -> what it is
        self.files: list[Path] = []
        self.line_count = 0  # lines `findings()` looked at
        self._lock = threading.Lock()

    def remember(self, secret: str | None, what: str) -> None:
        if secret and len(secret) >= MIN_SECRET:
            with self._lock:
                self.secrets.setdefault(secret, what)

    def remember_personal(self, value: str | None, what: str) -> None:
        value = (value or "").strip()
        if len(value) >= MIN_SECRET:
            with self._lock:
                self.personal.setdefault(value, what)

    def add(self, source: str, text: str, level: int | None = None) -> None:
        with self._lock:
            self.lines.append((source, text, level))

    def watch(self, path: Path | str) -> None:
        if Path(path) not in self.files:
            self.files.append(Path(path))

    def _all_lines(self) -> Iterable[tuple[str, str, int | None]]:
        """(source, line, level) of every line (`_levels`: a traceback's lines take their
        record's level)."""
        unread: dict[str, list[str]] = {}  # lines that came without a level, by source, in order
        for source, text, level in list(self.lines):
            if level is None:
                unread.setdefault(source, []).append(text)
            else:
                yield source, text, level
        for source, texts in unread.items():
            for text, level in _levels(texts):
                yield source, text, level
        for path in self.files:
            if path.is_file():
                for line, level in _levels(path.read_text(encoding="utf-8", errors="replace").splitlines()):
                    yield str(path.name), line, level

    def findings(self) -> list[Finding]:
        """Every pattern and every known secret, looked for in each source's lines joined
        into one text (personal data: its lines at INFO and above, or of no known level):
        each pattern once over megabytes, not once per line, and every known value in one
        pass (a process of the suite logs 400,000 lines and knows thousands of values: one
        `find` per value took tens of seconds at the session's end). Sets `line_count`."""
        by_source: dict[str, tuple[list[str], list[str]]] = {}
        count = 0
        for source, text, level in self._all_lines():
            count += 1
            every, shown = by_source.setdefault(source, ([], []))
            every.append(text)
            if level is None or level >= logging.INFO:
                shown.append(text)
        self.line_count = count
        secrets, personal = _Values(self.secrets), _Values(self.personal)
        found: list[Finding] = []
        for source, (every, shown) in by_source.items():
            found += _findings_in(source, every, PATTERNS, secrets)
            found += _findings_in(source, shown, PERSONAL_PATTERNS, personal)
        return found


class _Values:
    """Known values (secrets or personal data), each with what it is, found in a text in one
    pass (an Aho-Corasick automaton): every occurrence of every value, overlapping too."""

    def __init__(self, values: dict[str, str]) -> None:
        self._automaton: ahocorasick.Automaton | None = None
        if values:
            self._automaton = ahocorasick.Automaton()
            for value, what in values.items():
                self._automaton.add_word(value, (value, what))
            self._automaton.make_automaton()

    def find(self, text: str) -> Iterable[tuple[str, str, int]]:
        """(value, what it is, start) of each occurrence in `text`."""
        if self._automaton is None:
            return
        for end, (value, what) in self._automaton.iter(text):
            yield value, what, end - len(value) + 1


# Between two lines of a source, joined: no pattern crosses it (each stops at whitespace
# or NUL) and no secret holds it.
_SEPARATOR = "\n\x00\n"


def _findings_in(
    source: str, texts: list[str], patterns: tuple[tuple[str, re.Pattern[str]], ...], values: _Values
) -> list[Finding]:
    starts, at = [], 0
    for text in texts:
        starts.append(at)
        at += len(text) + len(_SEPARATOR)
    joined = _SEPARATOR.join(texts)
    first: dict[tuple[int, str, str], tuple[int, int]] = {}  # (line, kind, what) -> its first span there

    def hit(kind: str, what: str, start: int, end: int) -> None:
        line = bisect.bisect_right(starts, start) - 1
        first.setdefault((line, kind, what), (start - starts[line], end - starts[line]))

    for kind, pattern in patterns:
        for match in pattern.finditer(joined):
            hit(kind, kind, match.start(), match.end())
    for value, what, start in values.find(joined):
        hit(what, value, start, start + len(value))
    return [
        Finding(kind, source, _mask(texts[line], start, end)) for (line, kind, _), (start, end) in sorted(first.items())
    ]


_VALUE_TAIL = re.compile(r"[^\s'\",)}\]]*")


def _mask(text: str, start: int, end: int) -> str:
    """The line around the finding, the secret and the rest of its word replaced (CI
    logs are logs too)."""
    end = _VALUE_TAIL.match(text, end).end()
    head = text[max(0, start - 80) : start]
    tail = text[end : end + 40]
    return f"…{head}***{tail}…".replace("\n", "\\n")


class _ServiceFormatter(logging.Formatter):
    """A record as the service's formatters write it: without the lines a database error
    quotes values in (`logs.without_quoted_values`), in its message or its exception."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        try:
            from plumbing import logs
        except ImportError:  # used outside this repository (the plugin's own test)
            return text
        return logs.without_quoted_values(text)


class CaptureHandler(logging.Handler):
    """Every record of the test process, formatted like a log line would be."""

    def __init__(self, audit: Audit) -> None:
        super().__init__(logging.DEBUG)
        self.audit = audit
        self.setFormatter(_ServiceFormatter("%(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.audit.add("test process", self.format(record), record.levelno)
        except Exception:  # a record that cannot format is kept raw, never lost
            self.audit.add("test process", f"{record.name} {record.msg!r} {record.args!r}", record.levelno)


AUDIT = Audit()
_KEY = pytest.StashKey[list]()


def watch(path: Path | str) -> None:
    """Check this file (a subprocess's log) at the end of the session too."""
    AUDIT.watch(path)


def remember(secret: str | None, what: str) -> None:
    """Fail the session if this exact string appears in any log."""
    AUDIT.remember(secret, what)


def remember_personal(value: str | None, what: str) -> None:
    """Fail the session if this exact string (8 characters or more) appears in a log line
    at INFO or above."""
    AUDIT.remember_personal(value, what)


def remember_people(document: dict) -> None:
    """The personal data of an onboarding document: its patients' full names, phone
    numbers, e-mail addresses and notes, its staff users' names and e-mail addresses."""
    for patient in document.get("patients") or []:
        name = " ".join(part for part in (patient.get("firstName"), patient.get("lastName")) if part)
        remember_personal(name, "a patient's name")
        remember_personal(patient.get("phone"), "a patient's phone number")
        remember_personal(patient.get("email"), "a patient's e-mail address")
        for record in patient.get("records") or []:
            remember_personal(record.get("note"), "a patient's note")
    for user in document.get("users") or []:
        remember_personal(user.get("name"), "a staff user's name")
        remember_personal(user.get("email"), "a staff user's e-mail address")


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def remember_transcript(transcript: str | None) -> None:
    """Each sentence of a transcript (what a caller said)."""
    for sentence in _SENTENCE_END.split(transcript or ""):
        remember_personal(sentence, "a transcript's sentence")


def _record_issued_tokens() -> None:
    try:
        from models import ApiToken
    except ImportError:  # used outside this repository (the plugin's own test)
        return
    issue = ApiToken.issue.__func__  # type: ignore[attr-defined]

    def recording_issue(cls, *args, **kwargs):  # type: ignore[no-untyped-def]
        token, text = issue(cls, *args, **kwargs)
        remember(text, "issued API token")
        remember(text.split("_", 2)[-1], "issued API token's secret")
        return token, text

    ApiToken.issue = classmethod(recording_issue)  # type: ignore[method-assign]


def _record_encrypted_plaintexts() -> None:
    try:
        from plumbing import crypto
    except ImportError:
        return
    encrypt = crypto.encrypt

    def recording_encrypt(plaintext: str, *args, **kwargs):  # type: ignore[no-untyped-def]
        remember(plaintext, "encrypted secret (provider password or platform token)")
        return encrypt(plaintext, *args, **kwargs)

    crypto.encrypt = recording_encrypt


def _record_config_secrets() -> None:
    try:
        from config import Config
    except ImportError:
        return
    post_init = Config.__post_init__

    def recording_post_init(self) -> None:  # type: ignore[no-untyped-def]
        post_init(self)
        for name in ("secret_key", "storage_signing_key", "s3_secret_access_key", "metrics_token"):
            remember(getattr(self, name, ""), f"Config.{name}")

    Config.__post_init__ = recording_post_init  # type: ignore[method-assign]


_SERVICE_COMMANDS = ("gunicorn", "manage.py", "wsgi:app")


def _watch_service_subprocesses() -> None:
    """Any gunicorn or `manage.py` the suite starts with its output in a file (the session
    worker, the fault and fuzz suites' services): that file is audited too."""

    class WatchingPopen(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
            words = [str(a) for a in ([args] if isinstance(args, (str, bytes, Path)) else args)]
            if any(cmd in word for word in words for cmd in _SERVICE_COMMANDS):
                for stream in (kwargs.get("stdout"), kwargs.get("stderr")):
                    name = getattr(stream, "name", None)
                    if isinstance(name, str) and Path(name).is_file():
                        watch(name)
            super().__init__(args, *rest, **kwargs)

    subprocess.Popen = WatchingPopen  # type: ignore[misc]
    run = subprocess.run

    def auditing_run(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        """A service command's captured stderr (its log) is audited too; stdout is its
        output by design (`token create` prints the new token there)."""
        done = run(args, *rest, **kwargs)
        words = [str(a) for a in ([args] if isinstance(args, (str, bytes, Path)) else args)]
        if any(cmd in word for word in words for cmd in _SERVICE_COMMANDS) and done.stderr:
            text = done.stderr if isinstance(done.stderr, str) else done.stderr.decode("utf-8", "replace")
            for line in text.splitlines():
                AUDIT.add("stderr of " + " ".join(words[1:3]), line)  # its level read from the line
        return done

    subprocess.run = auditing_run


def pytest_configure(config: pytest.Config) -> None:
    root = logging.getLogger()
    handler = CaptureHandler(AUDIT)
    root.addHandler(handler)
    config.stash[_KEY] = [handler, root.level]
    root.setLevel(logging.DEBUG)
    try:  # the service's own rules, as every entry point applies them
        from plumbing import logs

        logs.install_safety()
    except ImportError:
        pass
    _record_issued_tokens()
    _record_encrypted_plaintexts()
    _record_config_secrets()
    _watch_service_subprocesses()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    findings = AUDIT.findings() + session.config.stash.get(_FROM_WORKERS, [])
    session.config.stash[_FINDINGS] = findings
    lines, files = _counts(session.config)
    if hasattr(session.config, "workeroutput"):  # an xdist process: the controller reports
        session.config.workeroutput["log_audit"] = {  # type: ignore[attr-defined]
            "lines": lines,
            "files": files,
            "findings": [vars(f) for f in findings],
        }
    if findings and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_FINDINGS = pytest.StashKey[list]()
_FROM_WORKERS = pytest.StashKey[list]()
_WORKER_COUNTS = pytest.StashKey[list]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # type: ignore[no-untyped-def]
    """An xdist process ended: its audit joins this one's (a process that crashed sent none,
    and xdist reports the crash)."""
    report = getattr(node, "workeroutput", {}).get("log_audit")
    if report:
        node.config.stash.setdefault(_FROM_WORKERS, []).extend(Finding(**f) for f in report["findings"])
        node.config.stash.setdefault(_WORKER_COUNTS, []).append((report["lines"], report["files"]))


def _counts(config: pytest.Config) -> tuple[int, int]:
    """Log lines and subprocess log files audited (once `findings()` ran), by this process
    and the xdist ones."""
    lines = AUDIT.line_count
    files = sum(1 for path in AUDIT.files if path.is_file())
    for more_lines, more_files in config.stash.get(_WORKER_COUNTS, []):
        lines, files = lines + more_lines, files + more_files
    return lines, files


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    findings: list[Finding] = config.stash.get(_FINDINGS, [])
    lines, files = _counts(config)
    if not findings:
        terminalreporter.write_line(
            f"log audit: {lines} log lines (this process at DEBUG and {files} subprocess "
            "log file(s)), no secrets and no personal data"
        )
        return
    terminalreporter.section("log audit: secrets or personal data in logs", sep="=", red=True, bold=True)
    for finding in findings[:50]:
        terminalreporter.write_line(f"{finding.kind} in {finding.source}: {finding.excerpt}")
    if len(findings) > 50:
        terminalreporter.write_line(f"... and {len(findings) - 50} more")
    terminalreporter.write_line(f"log audit FAILED: {len(findings)} finding(s) in {lines} log lines", red=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    handler, level = config.stash.get(_KEY, [None, None])
    if handler is not None:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(level)
