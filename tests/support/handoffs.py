"""pytest plugin: call hand-offs as a switchboard sends them: the test recordings, the
app configured to fetch them from the loopback HTTPS server, a hand-off's body."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import webtest

from app import create_app
from config import Config
from tests.conftest import PG_URL, REDIS_URL, ROOT
from tests.support import SECRET_KEY, bodies

AUDIO = ROOT / "tests" / "audio"


def audio(name: str) -> bytes:
    return (AUDIO / name).read_bytes()


@pytest.fixture(scope="session")
def handoff_config(config, ca_bundle) -> Config:
    return Config(
        database_url=PG_URL,
        redis_url=REDIS_URL,
        secret_key=SECRET_KEY,
        clock=config.clock,
        unsafe_allow_loopback_fetch=True,
        fetch_ca_bundle=ca_bundle,
        recording_retry_delays="1,1",
    )


@pytest.fixture
def handoff(app, handoff_config) -> webtest.TestApp:
    """The app with the test-only loopback setting, over the clean database of `app`."""
    return webtest.TestApp(create_app(handoff_config))


def call_body(sid: str, url: str | None = None, **extra: Any) -> dict[str, Any]:
    """The shared body as the test PBX sends it: its recording's id, its flow in Extra,
    HasRecording false when there is no recording."""
    # The platform's recording id is the recording's file name (intake holds them to it).
    recording_sid = PurePosixPath(urlsplit(url).path).name if url else f"{sid}.mp3"
    return bodies.call_body(
        sid,
        url,
        HasRecording=url is not None,
        RecordingSid=recording_sid,
        Source="test-pbx",
        Extra=json.dumps({"flow": "voicemail", "ivr": [1, 2]}),
        **extra,
    )
