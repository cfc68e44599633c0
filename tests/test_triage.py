"""The inbox sorts itself (triage/): a voice message's transcript read for the clinic's
request type words and its urgency words; the suggestion and the flag stored by the ingest
job's `finish`, shown by the API (create/search/detail, documented) and the console (the
flagged first, the words marked in the escaped transcript, confirm or change the type in one
form, clear the flag, filter by type), audited in words; the words set through onboarding's
one validator (the file and the console's settings), the open messages read again when they
change; migration 50 on a database of the version before."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from jsonschema import Draft202012Validator

from console import audit_words
from console.rendering import Renderer
from jobs import calls as ingest
from models import AuditEvent, Call, Clinic, Patient, PatientRecord, PatientRequest, RequestType, StaffUser
from onboarding.base import OnboardingError
from plumbing.clock import as_utc
from plumbing.database import db
from tests.support import bearer, clinic, issue_token, load, organization
from tests.support.clocks import WEDNESDAY, claimed_now, job_context
from tests.support.console import PASSWORD, cs, form_to, login
from tests.support.documented import documented
from tests.support.live_service import api
from triage import clinic_words as triage
from triage.reading import Vocabulary, read
from triage.vocabulary import OUTRANKS, PRESETS, URGENCY
from voicemail.transcription import Transcript

SHIPPED = Vocabulary(
    types={k: v for k, v in PRESETS.items()}, urgency=URGENCY, outranks={k: list(v) for k, v in OUTRANKS.items()}
)
TYPES = [
    {"ecrfId": "RX", "name": "Recept", "transcriptWords": {"preset": "prescription"}},
    {"ecrfId": "APPT", "name": "Objednání", "transcriptWords": {"preset": "appointment"}},
    {"ecrfId": "CANCEL", "name": "Zrušení", "transcriptWords": {"preset": "cancellation"}},
    {"ecrfId": "LAB", "name": "Výsledky", "transcriptWords": {"preset": "results", "words": {"cs": ["sono"]}}},
    {"ecrfId": "SIGNED", "name": "Podepsaný souhlas"},  # no words: never suggested
]


def suggested(text: str, language: str = "cs") -> str | None:
    return read(text, language, SHIPPED).type_id


def urgent_words(text: str, language: str = "cs") -> list[str]:
    r = read(text, language, SHIPPED)
    return [text[a:b] for a, b in r.urgent_spans] if r.urgent else []


# --- reading a transcript ------------------------------------------------------------------------


def test_inflected_words_suggest_a_type_and_a_phrase_outweighs_its_words():
    assert suggested("Potřeboval bych předepsat recept na léky na tlak, už mi docházejí.") == "prescription"
    assert suggested("Chtěla bych se objednat na preventivní prohlídku.") == "appointment"
    assert suggested("Volám kvůli výsledkům krve z minulého týdne.") == "results"
    # "zrušit termín" is one cancellation, not also an appointment's "termín".
    assert suggested("Musím bohužel zrušit svůj termín na čtvrtek.") == "cancellation"
    assert suggested("I have to cancel my appointment on Thursday morning.", "en") == "cancellation"
    assert suggested("I need a new prescription for my asthma inhaler.", "en") == "prescription"


def test_a_cancellation_outranks_the_appointment_words_it_always_holds():
    # The cancelling verb misheard by a letter (found by its letters: half) still wins over
    # the appointment it names ("termín", "kontrolu": two whole appointment words).
    misheard = "Dobrý den, zítra v osm na kontrolu. Prosím zrušyt ten termín."
    assert read(misheard, "cs", SHIPPED).type_id == "cancellation"
    assert suggested("Prosím zrušte mi ten termín na kontrolu, jsem nemocný.") == "cancellation"
    assert suggested("I can't make it to my appointment on Friday, my check up.", "en") == "cancellation"
    # The words that named the appointment are marked as the cancellation's.
    r = read("Musím zrušit objednání na očkování.", "cs", SHIPPED)
    assert r.type_id == "cancellation" and r.scores == {"cancellation": 3.0}
    # Without a cancelling word it is an appointment, and a clinic with no cancellation type
    # reads the appointment words as they are.
    assert suggested("Chtěl bych termín na kontrolu.") == "appointment"
    plain = Vocabulary(types={k: v for k, v in PRESETS.items()}, urgency=URGENCY)
    assert read(misheard, "cs", plain).type_id is None, "1.5 against 1: no lead without the rule"


def test_the_clinics_types_outrank_by_their_presets(app, clinic_with_types):
    with db.connection_context():
        home = Clinic.by_slug("clinic-a")
        words = triage.vocabulary_of(home.id)
    assert words.outranks == {clinic_with_types["CANCEL"]: [clinic_with_types["APPT"]]}
    assert triage.read_transcript(home.id, "Prosím zrušte mi ten termín na kontrolu.", "cs").type_id == uuid.UUID(
        clinic_with_types["CANCEL"]
    )


def test_a_request_said_not_needed_or_already_settled_does_not_count():
    assert suggested("Recept už mám, ale potřebuji se objednat na kontrolu.") == "appointment"
    assert suggested("Nepotřebuji nový recept, jen se chci objednat.") == "appointment"
    assert suggested("Výsledky už jsem dostala, děkuji. Potřebuji ještě recept na léky.") == "prescription"
    assert suggested("Nepotřebuji recept.") is None, "nothing left to suggest"
    assert suggested("Dobrý den, recept jsem už dostal, děkuji.") is None
    assert suggested("I don't need a prescription any more, I'd like to book a check up.", "en") == "appointment"
    assert suggested("I already got my results, thanks. Could I get a repeat prescription?", "en") == "prescription"
    # Only in its own clause: a request after a stop still counts.
    assert suggested("Nepotřebuji nic. Potřebuji recept.") == "prescription"
    # Settled takes only the words as written or by their forms, never a misheard one.
    assert suggested("Nepotrebuju recept.") is None
    assert suggested("Nepotřebujou recept a léky.") == "prescription"


def test_letters_match_only_long_specific_words_never_a_misheard_everyday_one():
    # "prosím" misheard: one letter from "zrušit" (a cancellation) or "prášky" (a prescription)
    # but as near to "prosím", which most messages hold: no word of a list.
    assert read("prusim", "cs", SHIPPED).scores == {}
    assert suggested("Dobrý den, prusim, chtěl bych termín na kontrolu.") == "appointment"
    assert suggested("Dobrý den, prasim zavolejte mi.") is None
    # Every one-letter slip of an everyday word that is no word of the dictionary (which
    # would be read as that word) stays no list's word.
    from triage import matching
    from triage.vocabulary import EVERYDAY

    slips = {
        word[:i] + c + word[i + 1 :]
        for word in (matching.fold(w) for w in EVERYDAY["cs"] if " " not in w)
        for i in range(len(word))
        for c in "abcdeghijklmnoprstuvyz"
    }
    unknown = [w for w in sorted(slips) if not matching.tokens(w, "cs")[0].known]
    assert len(unknown) > 500
    assert [w for w in unknown if read(w, "cs", SHIPPED).scores or urgent_words(w)] == []
    # A word of five letters or fewer matches only as written or by its forms.
    assert read("spadk", "cs", SHIPPED).urgent is False, "not 'spadl' by its letters"
    # A long specific word still does, one letter off (two for long ones), counting half.
    assert read("neschopemka", "cs", SHIPPED).scores == {"sick_note": 0.5}
    assert read("zrušyt", "cs", SHIPPED).scores == {"cancellation": 0.5}


def test_an_unsure_message_is_other():
    assert suggested("Dobrý den, zavolejte mi prosím zpátky, číslo máte v kartě.") is None, "no type's words"
    assert suggested("Chci zrušit recept.") is None, "a tie: neither leads twice"
    assert suggested("Hello, please call me back when you have a moment.", "en") is None


def test_urgency_words_with_inflections_misspellings_and_calm_phrases():
    # The issue's transcript of "jsem těhotná a od rána mám silné bolesti břicha, zavolejte mi co nejdřív".
    rough = "sem těhod na … mám silné bolestí brychá. Prosím, zavoulejte … nejdřív"
    assert "bolestí" in urgent_words(rough)
    assert urgent_words("Od rána mě tlačí na hrudi a špatně se mi dýchá.") == ["na hrudi", "dýchá"]
    assert urgent_words("Moje dcera má od včerejška horečku přes třicet devět stupňů.") == ["dcera", "horečku"]
    assert urgent_words("Horečku mám já, jinak nic.") == [], "a fever alone is not a child's"
    assert urgent_words("Už mě to nebolí, jen se chci objednat.") == [], "negated: not pain"
    assert urgent_words("Nic naléhavého, jen se chci objednat.") == [], "calm phrase"
    assert urgent_words("Hi, nothing urgent, I'll book online.", "en") == []
    assert urgent_words("Please call me urgently, my baby has been coughing all night.", "en") == ["urgently"]
    assert urgent_words("My husband can't get out of bed after his fall and he is in a lot of pain.", "en") == [
        "fall",
        "pain",
    ]


def test_a_misspelt_word_counts_half_and_a_language_without_words_reads_every_list():
    # "recebt" is no Czech word: found by its letters (half), with "léky" (whole) it suggests.
    assert read("prosím recebt", "cs", SHIPPED).scores == {"prescription": 0.5}
    assert suggested("prosím recebt a léky") == "prescription"
    # A Slovak message: no Slovak words, so the Czech and English ones are read.
    assert suggested("Potrebujem predpísať recept na lieky.", "sk") == "prescription"


# --- the ingest stores it, the API shows it ----------------------------------------------------


@pytest.fixture
def clinic_with_types(app):
    load(organization(clinic("clinic-a", requestTypes=TYPES), clinic("clinic-b")))
    with db.connection_context():
        return {t.ecrf_id: str(t.id) for t in RequestType.select()}


def voice_message(text: str, *, language: str = "cs", minutes: int = 0, slug: str = "clinic-a", name: str = "") -> str:
    """A call the ingest job finishes with this transcript (its `_finish_voicemail`, as after
    whisper.cpp); returns the request's id."""
    with db.connection_context():
        home = Clinic.by_slug(slug)
        phone = f"+42060{minutes:07d}"
        if name:
            known = Patient.create(organization=home.organization_id, first_name=name, phone=phone)
            PatientRecord.create(patient=known, clinic=home)
        call = Call.create(
            clinic=home,
            call_sid=f"CA-{uuid.uuid4().hex[:10]}",
            call_from=phone,
            call_to="+420222000111",
            received_at=as_utc(WEDNESDAY + timedelta(minutes=minutes)),
            queued_at=claimed_now(),
        )
    t = Transcript(
        text=text,
        language=language,
        duration=12.0,
        speech_seconds=10.0,
        message=True,
        message_reason="speech",
        status="check",
    )
    assert ingest._finish_voicemail(job_context(), call, home, t) == "voice_message"
    with db.connection_context():
        request = PatientRequest.get(PatientRequest.call == call.id)
        PatientRequest.update(created_at=as_utc(WEDNESDAY + timedelta(minutes=minutes))).where(
            PatientRequest.id == request.id
        ).execute()
        return str(request.id)


def test_the_ingest_stores_the_reading_and_the_api_shows_it(app, clinic_with_types):
    rx = voice_message("Dobrý den, potřebuji nový recept na léky. Je to naléhavé.")
    plain = voice_message("Dobrý den, zavolejte mi prosím.", minutes=1)
    token = issue_token(["clinic-a"], ["read", "write"])
    detail = app.get(f"{api()}/patientRequests/{rx}", headers=bearer(token)).json
    data = detail["data"]
    assert data["requestTypeSuggestion"] == {
        "requestTypeId": clinic_with_types["RX"],
        "words": ["recept", "léky"],
        "confirmedAt": None,
    }
    assert data["urgent"] == {"flagged": True, "words": ["naléhavé"], "clearedAt": None}
    assert data["requestTypeId"] is None, "a suggestion, not the request's type"
    Draft202012Validator(documented(app, "get", "/patientRequests/{request_id}")).validate(detail)
    found = app.post_json(
        f"{api()}/patientRequests/search", {"filter": {"kind": "voice_message"}}, headers=bearer(token)
    ).json
    Draft202012Validator(documented(app, "post", "/patientRequests/search")).validate(found)
    by_id = {r["id"]: r for r in found["data"]}
    assert by_id[plain]["requestTypeSuggestion"] == {"requestTypeId": None, "words": [], "confirmedAt": None}
    assert by_id[plain]["urgent"] == {"flagged": False, "words": [], "clearedAt": None}
    assert by_id[rx]["urgent"]["flagged"] is True


# --- the console ---------------------------------------------------------------------------------


@pytest.fixture
def receptionist(clinic_with_types):
    from models import StaffMembership, StaffUser
    from staff.passwords import hash_password

    with db.connection_context():
        user = StaffUser.create(email="anna@example.cz", name="Anna Nováková", password_hash=hash_password(PASSWORD))
        StaffMembership.create(user=user, clinic=Clinic.by_slug("clinic-a"), role="admin")
    return clinic_with_types


def test_the_flagged_come_first_with_their_words_marked_in_the_escaped_transcript(app, receptionist):
    voice_message("Potřebuji recept na léky na tlak.", minutes=1, name="Petr")
    voice_message("<b>Haló</b> mám silné bolesti břicha a jsem těhotná, zavolejte co nejdřív!", minutes=0, name="Jana")
    voice_message("Ruším zítřejší termín v devět.", minutes=2, name="Dana")
    login(app, status=303)
    rows = app.get("/console/").html.select("li.row")
    assert [r.select_one("a.who").text for r in rows] == ["Jana", "Dana", "Petr"], "flagged first, then newest"
    flagged = rows[0]
    assert "urgent" in flagged["class"] and flagged.select_one(".urgent-flag").text == "možná naléhavé"
    quote = flagged.select_one("blockquote.transcript")
    assert [m.text for m in quote.select("mark.urgent")] == ["bolesti", "těhotná", "co nejdřív"]
    assert quote.select("b") == [] and "<b>Haló</b>" in quote.text, "the transcript's own markup is text"
    assert cs("nejde o diagnózu") in flagged.text
    assert "Typ podle přepisu: Recept" in rows[2].text and "(recept, léky)" in rows[2].text
    assert "Typ podle přepisu: Zrušení" in rows[1].text
    # Why a type was suggested: its words marked in the transcript too.
    assert [m.text for m in rows[2].select("blockquote.transcript mark.type-word")] == ["recept", "léky"]
    assert [m.text for m in rows[1].select("blockquote.transcript mark.type-word")] == ["Ruším", "termín"]
    # An unflagged Czech message is said not to be a calm one; the flagged one needs no such note.
    assert "to neznamená, že zpráva počká" in rows[2].select_one(".not-calm").text
    assert rows[0].select_one(".not-calm") is None
    with db.connection_context():
        StaffUser.update(language="en").execute()
    english = app.get("/console/").html.select("li.row")
    assert english[0].select_one(".urgent-flag").text == "may be urgent" and "not a diagnosis" in english[0].text
    assert "Type from the transcript: Recept" in english[2].text and "Confirm the type" in english[2].text


def test_confirm_change_and_clear_in_one_click_audited_and_shown_by_the_api(app, receptionist):
    rx = voice_message("Prosím o recept na Euthyrox, je to naléhavé.", name="Jitka")
    login(app, status=303)
    page = app.get("/console/")
    form = form_to(page, "/type")
    assert form["type"].value == receptionist["RX"], "the suggestion is chosen: one click confirms it"
    assert form.submit(status=303).headers["Location"].endswith("/console/?clinic=clinic-a")
    page = app.get("/console/")
    assert "Typ: Recept" in page.text and "Změnit typ" in page.text
    form = form_to(page, "/type")
    form["type"] = "other"
    form.submit(status=303)
    form_to(app.get("/console/"), "/urgent").submit(status=303)
    token = issue_token(["clinic-a"], ["read"])
    data = app.get(f"{api()}/patientRequests/{rx}", headers=bearer(token)).json["data"]
    assert data["requestTypeId"] is None and data["requestTypeSuggestion"]["confirmedAt"] is not None
    assert data["requestTypeSuggestion"]["requestTypeId"] == receptionist["RX"]
    assert data["urgent"]["flagged"] is False and data["urgent"]["words"] == ["naléhavé"]
    assert data["urgent"]["clearedAt"] is not None
    row = app.get("/console/").html.select_one("li.row")
    assert "urgent" not in row["class"] and "Označení „možná naléhavé“ zrušil uživatel." in row.text
    with db.connection_context():
        events = sorted((e for e in AuditEvent.trail() if e.action.startswith("patient_request.")), key=lambda e: e.id)
        assert [(e.action, json.loads(e.details)) for e in events] == [
            (
                "patient_request.confirm_type",
                {
                    "requestTypeId": receptionist["RX"],
                    "asSuggested": True,
                    "suggestedRequestTypeId": receptionist["RX"],
                },
            ),
            (
                "patient_request.confirm_type",
                {"requestTypeId": None, "asSuggested": False, "suggestedRequestTypeId": receptionist["RX"]},
            ),
            ("patient_request.clear_urgent", {}),
        ]
        assert all((e.actor_kind, e.actor_name) == ("staff", "anna@example.cz") for e in events)
        renderer = Renderer()
        home = Clinic.by_slug("clinic-a")
        for language, words in (
            (
                "cs",
                [
                    "Typ požadavku potvrzen",
                    "Typ požadavku zvolen místo navrženého",
                    "Označení „možná naléhavé“ zrušeno",
                ],
            ),
            (
                "en",
                [
                    "Request type confirmed",
                    "Request type chosen instead of the suggestion",
                    "“May be urgent” flag cleared",
                ],
            ),
        ):
            said = audit_words.describe(events, home, language, renderer.translations[language])
            assert [e.what for e in said] == words
            assert said[1].details == [
                (
                    "Typ požadavku" if language == "cs" else "Request type",
                    audit_words.Named("jiný" if language == "cs" else "other"),
                ),
                (
                    "Navrženo podle přepisu" if language == "cs" else "Suggested from the transcript",
                    said[1].details[1][1],
                ),
            ]
            assert said[1].details[1][1].text == "Recept"
    page = app.get(f"/console/requests/{rx}")
    assert "Typ požadavku potvrzen" in page.text
    # Another clinic's type, a word that is no id, no CSRF token: refused.
    with db.connection_context():
        other = str(RequestType.create(clinic=Clinic.by_slug("clinic-b"), ecrf_id="X", name="X").id)
    csrf = page.html.find("input", {"name": "csrf_token"})["value"]
    app.post(f"/console/requests/{rx}/type", {"type": other, "csrf_token": csrf}, status=400)
    app.post(f"/console/requests/{rx}/type", {"type": "recept", "csrf_token": csrf}, status=400)
    app.post(f"/console/requests/{rx}/urgent", {}, status=403)


def test_the_inbox_filters_by_type(app, receptionist):
    voice_message("Potřebuji recept.", name="Petr")
    voice_message("Zavolejte mi prosím.", minutes=1, name="Karel")
    voice_message("Chci se objednat na kontrolu.", minutes=2, name="Eva")
    login(app, status=303)

    def names(query: str) -> list[str]:
        return [a.text for a in app.get("/console/?" + query).html.select("li.row a.who")]

    assert names(f"type={receptionist['RX']}") == ["Petr"]
    assert names("type=other") == ["Karel"]
    assert names("type=nonsense") == ["Eva", "Karel", "Petr"], "an unknown filter shows all"
    # A confirmed type counts, not the suggestion any more.
    form = form_to(app.get(f"/console/?type={receptionist['APPT']}"), "/type")
    form["type"] = receptionist["RX"]
    form.submit(status=303)
    assert names(f"type={receptionist['RX']}") == ["Eva", "Petr"]
    options = app.get("/console/").html.select("select#type option")
    assert [o.text for o in options] == [
        "Vše",
        "Objednání",
        "Podepsaný souhlas",
        "Recept",
        "Výsledky",
        "Zrušení",
        "Bez typu",
    ]


# --- the words: onboarding's validator, the console's settings, reading again -------------------


def test_the_onboarding_file_validates_the_words_and_absent_leaves_them(app):
    def refused(**extra) -> OnboardingError:
        with pytest.raises(OnboardingError) as caught:
            load(organization(clinic("clinic-a", **extra)))
        return caught.value

    assert (
        refused(requestTypes=[{"ecrfId": "RX", "name": "Rx", "transcriptWords": {"preset": "pills"}}]).path
        == "clinics[0].requestTypes[0].transcriptWords.preset"
    )
    assert refused(urgencyWords={"xx": ["bolest"]}).path == "clinics[0].urgencyWords.xx"
    assert refused(urgencyWords={"cs": ["bolest", "  "]}).path == "clinics[0].urgencyWords.cs[1]"
    assert refused(urgencyWords={"cs": ["horečka + "]}).path == "clinics[0].urgencyWords.cs[0]"
    load(
        organization(
            clinic(
                "clinic-a",
                urgencyWords={"cs": ["  Bolest  Břicha ", "bolest břicha", "krev"]},
                requestTypes=[{"ecrfId": "RX", "name": "Rx", "transcriptWords": {"words": {"cs": ["Recept"]}}}],
            )
        )
    )
    load(organization(clinic("clinic-a", requestTypes=[{"ecrfId": "RX", "name": "Rx"}])))
    with db.connection_context():
        assert json.loads(Clinic.by_slug("clinic-a").urgency_words) == {"cs": ["bolest břicha", "krev"]}
        assert json.loads(RequestType.get().transcript_words) == {"words": {"cs": ["recept"]}}
    load(
        organization(
            clinic(
                "clinic-a", urgencyWords=None, requestTypes=[{"ecrfId": "RX", "name": "Rx", "transcriptWords": None}]
            )
        )
    )
    with db.connection_context():
        assert Clinic.by_slug("clinic-a").urgency_words is None, "null: the shipped words"
        assert RequestType.get().transcript_words is None


def test_changed_words_read_the_open_messages_again_but_not_what_staff_decided(app, receptionist):
    crev = voice_message("Mám výsledky a teče mi krev z nosu.", name="Ota")
    decided = voice_message("Teče mi krev z nosu.", minutes=1, name="Iva")
    done = voice_message("Teče mi krev z nosu.", minutes=2, name="Ema")
    with db.connection_context():
        assert not PatientRequest.get_by_id(crev).urgent, "'krev' is not a shipped urgency word"
        PatientRequest.update(type_confirmed_at=as_utc(WEDNESDAY)).where(PatientRequest.id == decided).execute()
        PatientRequest.update(done_at=as_utc(WEDNESDAY)).where(PatientRequest.id == done).execute()
    login(app, status=303)
    page = app.get("/console/settings/calls?clinic=clinic-a")
    form = next(f for f in page.forms.values() if "urgency-cs" in f.fields)
    assert "bolest" in form["urgency-cs"].value.split("\n"), "the shipped words, to edit"
    form["urgency-cs"] = form["urgency-cs"].value + "\nkrev"
    form.submit(status=303)
    form = next(
        f
        for f in app.get("/console/settings/request-types?clinic=clinic-a").forms.values()
        if f.get("ecrfId", default=None) is not None and f["ecrfId"].value == "SIGNED"
    )
    form["words-cs"] = "krev z nosu"
    form.submit(status=303)
    with db.connection_context():
        rows = {str(r.id): r for r in PatientRequest.select()}
        assert rows[crev].urgent and rows[decided].urgent and not rows[done].urgent, "the open ones read again"
        assert str(rows[crev].suggested_type_id) == receptionist["SIGNED"]
        assert rows[decided].suggested_type_id is None, "a confirmed type's suggestion is left as it was"
        assert triage.refresh(Clinic.by_slug("clinic-a").id) == 0, "idempotent"
        said = audit_words.describe(
            [e for e in AuditEvent.trail() if e.action == "settings.urgency_words.update"],
            Clinic.by_slug("clinic-a"),
            "cs",
            Renderer().translations["cs"],
        )
        assert said[0].what == "Změněna slova, která mohou znamenat naléhavost"
    # Back to the shipped words, in one click.
    page = app.get("/console/settings/calls?clinic=clinic-a")
    assert "Používají se vlastní slova kliniky." in page.text
    next(
        f
        for f in page.forms.values()
        if f.get("action", default=None) is not None and f["action"].value == "urgency-shipped"
    ).submit(status=303)
    with db.connection_context():
        assert Clinic.by_slug("clinic-a").urgency_words is None
        assert not PatientRequest.get_by_id(crev).urgent


def test_migration_50_on_a_database_of_the_version_before(wsgi_app, config):
    """A PostgreSQL database left before migration 50, with a request, gets it and ends up
    with a fresh database's columns; its request reads as never read."""
    from migrations import MIGRATIONS, migrate
    from models import SchemaMigration
    from plumbing.database import bind_database, open_database
    from tests.conftest import PG_URL
    from tests.support.databases import recreate_database
    from tests.support.databases import schema_of as _schema_of

    tables = ("patient_request", "clinic", "request_type")
    fresh = open_database(PG_URL, pooled=False)
    try:
        with fresh.connection_context():
            want = _schema_of(fresh, tables)
    finally:
        fresh.close()
    url = PG_URL + "_upgrade_v50"
    recreate_database(url)
    database = bind_database(url, pool_size=1)
    try:
        with database.connection_context():
            migrate(database)
            load(organization(clinic("clinic-a")))
            home = Clinic.by_slug("clinic-a")
            caller = Patient.create(organization=home.organization_id, phone="+420601123456")
            request = PatientRequest.create(clinic=home, patient=caller, kind="voice_message")
            for table, columns in (
                (
                    "patient_request",
                    (
                        "suggested_type_id",
                        "suggested_type_spans",
                        "type_confirmed_at",
                        "urgent",
                        "urgent_spans",
                        "urgent_cleared_at",
                    ),
                ),
                ("clinic", ("urgency_words",)),
                ("request_type", ("transcript_words",)),
            ):
                for column in columns:
                    database.execute_sql(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
            SchemaMigration.delete().where(SchemaMigration.version >= 50).execute()
            assert migrate(database) == [f"{v:04d}_{n}" for v, n, _ in MIGRATIONS if v >= 50]
            assert _schema_of(database, tables) == want
            kept = PatientRequest.get_by_id(request.id)
            assert (kept.suggested_type_spans, kept.urgent, kept.suggested_type_id) == (None, False, None)
            assert [
                fk.dest_table for fk in database.get_foreign_keys("patient_request") if fk.column == "suggested_type_id"
            ] == ["request_type"]
            assert migrate(database) == []
    finally:
        database.close_all()
        bind_database(config.database_url, pool_size=config.db_pool_size)
