"""Generate the labelled voicemail set in ``tests/audio/voicemails/`` (committed output).

Czech and English voicemails as a Czech clinic's switchboard delivers them: 0.3-0.8 s of
line, the voicemail beep (1000 or 1400 Hz, 0.3-0.5 s), the caller starting 0.05-0.4 s after
it (the first words, the caller's name, are the ones at risk of clipping), 1.5-6 s of line
before the hang-up, sometimes with its click. Callers are quiet (about -33 dBFS RMS) to
loud (about -15 dBFS, softly limited) and speak slowly to fast.

Channels (every message is rendered on two of them, from the same recording, so the
channel's effect can be measured on its own):

* ``ulaw8k``: G.711 mu-law 8 kHz mono WAV;
* ``mp3_8k``: 8 kHz mono MP3, 16 (CBR without a gapless header, so decoders see the
  encoder's delay; the labels are measured on the decoded file), 24 or 32 kbit/s or ABR 16;
* ``noisy_mp3_8k``: the same with background noise at the caller's end (street, babble,
  office or pink noise) at 10-20 dB SNR.

Everything is band-limited to 300-3400 Hz like a phone line. Plus recordings that carry no
message: empty ones (digital silence, line hiss, beep then silence, beep then busy or dial
tone, mains hum, a click and breathing, street noise) and unintelligible ones (reversed
speech, babble of 4-8 voices, a bare "Haló?"/"Hello?", a cough, a sigh, chords, DTMF).

Messages: 39 Czech and 33 English (144 clips), 55 of them saying a callback number (mobile or
Prague/Brno landline; digit by digit, grouped, in tens and hundreds, with "oh", "double",
"plus four two zero", some said twice), the others none; some say other numbers (a date, a
time, a room, a blood pressure), never a phone-number-long run. The first 29 Czech and 13
English messages (``CZECH``, ``ENGLISH``) and the 20 + 10 added later (``CZECH_MORE``,
``ENGLISH_MORE``) have their own voice lists, so adding messages leaves the earlier clips as
they were; the background babble and waiting-room noise are made from the first ones only.

Voices: Festival's four Czech voices (``dita``, ``krb``, ``machac``, ``ph``), espeak-ng
``cs`` and its ``+f2``, ``+m3``, ``+f4``, ``+m1``, ``+f3``, ``+m5``, ``+f1`` variants;
Festival's ``kal_diphone``, ``ked_diphone`` and ``cmu_us_slt_arctic_hts``, espeak-ng
``en-us``, ``en-gb+f3``, ``en-gb-x-rp+m3``, ``en-us+m3``, ``en-gb-scotland+f2``,
``en-029+m2``, ``en-us+f4``, ``en-gb+m4``.
The Czech Festival voices read ISO-8859-2 (``czech.scm`` proclaims ``coding ISO-8859-2``):
the text is written to a file in that encoding for ``text2wave``; UTF-8 input makes them
say "neznámý" for every byte they do not know. Speaking rate: Festival's
``Duration_Stretch`` for the diphone voices, sox ``tempo`` for the HTS voice, espeak-ng ``-s``.

Needs Debian's ``festival festvox-czech-dita festvox-czech-krb festvox-czech-machac
festvox-czech-ph festvox-kallpc8k festvox-kdlpc8k festvox-us-slt-hts espeak-ng sox lame`` (ffmpeg
is not used), and numpy + soundfile (libsndfile >= 1.1 for MP3) + phonenumbers from the project's
venv; run from the repository root: ``.venv/bin/python tests/audio/make_voicemails.py``
(about a minute). ``VOICEMAILS_OUT=folder`` writes the set there instead (to compare a new run
with the committed clips before copying, e.g. with ``cmp``). Deterministic on the same tool
versions: one fixed-seed random stream per clip (changing one clip leaves the others
byte-identical), sox in repeatable mode (``-R``: its dither is otherwise random), and the
synthesizers and lame are deterministic.

Intents (``intents.json``, one object per message, by ``language`` and ``text``; ``--intents``
writes it alone): ``intent`` (a shipped request type or ``other``), ``also`` (types a
receptionist could fairly file it under too) and ``urgent``, from ``INTENTS``.

Labels (``labels.json``, one object per clip): ``file``, ``kind`` (speech / empty /
unintelligible), ``message`` (kind == speech), ``language``, ``text`` (exactly the words
spoken, numbers as the words said; null unless speech), ``callback`` (E.164 of the number
said, or null), ``voice`` (``festival:NAME``, ``espeak:NAME``; ``babble``; null for
synthetic sounds), ``channel``, ``onset`` (seconds from the start of the decoded
file to the first word; for unintelligible clips to the start of the sound; null for
empty ones), ``duration`` (of the decoded file). Extra facts for analysis:
``speech_end`` (end of the last word or sound), ``level_dbfs`` (the caller's speech RMS),
``rate`` (speaking rate factor, >1 faster), ``noise`` and ``snr_db`` (noisy channel only),
``bitrate`` (MP3 only). Reversed speech and the bare "Haló?"/"Hello?" keep the
``language`` and ``voice`` they were made from.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import phonenumbers
import soundfile as sf

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ.get("VOICEMAILS_OUT") or HERE / "voicemails")  # another folder: to compare a new run
RATE = 8000
SEED = 20261123

CZECH_VOICES = [
    "festival:czech_dita",
    "espeak:cs",
    "festival:czech_machac",
    "espeak:cs+f2",
    "festival:czech_krb",
    "espeak:cs+m3",
    "festival:czech_ph",
    "espeak:cs+f4",
]
ENGLISH_VOICES = [
    "festival:kal_diphone",
    "festival:cmu_us_slt_arctic_hts",
    "espeak:en-us",
    "espeak:en-gb+f3",
    "espeak:en-gb-x-rp+m3",
]
# Voices of the messages added later (CZECH_MORE, ENGLISH_MORE): their own lists, so the first
# messages keep their voices and channels (and their clips stay byte-identical).
CZECH_MORE_VOICES = [
    "festival:czech_dita",
    "espeak:cs+m1",
    "festival:czech_machac",
    "espeak:cs+f3",
    "festival:czech_krb",
    "espeak:cs+m5",
    "festival:czech_ph",
    "espeak:cs+f1",
]
ENGLISH_MORE_VOICES = [
    "festival:kal_diphone",
    "espeak:en-us+m3",
    "festival:cmu_us_slt_arctic_hts",
    "espeak:en-gb-scotland+f2",
    "festival:ked_diphone",
    "espeak:en-029+m2",
    "espeak:en-us+f4",
    "espeak:en-gb+m4",
]
# Each message on two channels; the pair rotates.
CHANNEL_PAIRS = [("ulaw8k", "mp3_8k"), ("mp3_8k", "noisy_mp3_8k"), ("ulaw8k", "noisy_mp3_8k")]
MP3_MODES = [("cbr", 24), ("cbr", 16), ("cbr", 32), ("abr", 16)]

# (key, text, callback in E.164 or None)
CZECH: list[tuple[str, str, str | None]] = [
    (
        "objednani",
        "Dobrý den, tady Jana Nováková. Chtěla bych se objednat k panu doktorovi na preventivní "
        "prohlídku, nejlépe příští týden dopoledne. Zavolejte mi prosím zpět na číslo sedm sedm sedm, jedna dva "
        "tři, čtyři pět šest. Děkuji.",
        "+420777123456",
    ),
    (
        "recept",
        "Haló, u telefonu Petr Dvořák. Potřeboval bych předepsat recept na léky na tlak, už mi "
        "docházejí a v pátek odjíždím. Moje číslo je šest nula dva, tři tři čtyři, pět pět osm.",
        "+420602334558",
    ),
    (
        "vysledky",
        "Dobrý den, tady Marie Svobodová. Volám kvůli výsledkům krve z minulého týdne, paní doktorka "
        "říkala, že mi zavoláte. Můžete mi prosím zavolat na sedm set dvacet čtyři, sto dvacet tři, čtyři sta "
        "padesát šest?",
        "+420724123456",
    ),
    (
        "neschopenka",
        "Dobrý den, jmenuji se Tomáš Černý. Potřebuji prodloužit neschopenku, pořád mám teploty "
        "a kašel. Zavolejte mi prosím na šest set tři, dvacet jedna, třicet čtyři, padesát šest.",
        "+420603213456",
    ),
    (
        "horecka",
        "Dobrý den, tady Lucie Procházková. Moje dcera má od včerejška horečku přes třicet devět "
        "stupňů a nechce pít. Můžeme dnes přijít? Volejte prosím na sedm tři jedna, nula nula dva, devět devět "
        "osm.",
        "+420731002998",
    ),
    (
        "bolest",
        "Haló, tady Jiří Kučera. Mám hrozné bolesti zad, nemůžu se ani pohnout. Prosím, zavolejte mi co "
        "nejdříve zpátky na číslo plus čtyři sta dvacet, šest nula čtyři, pět pět pět, jedna dva jedna.",
        "+420604555121",
    ),
    (
        "ockovani",
        "Dobrý den, tady Eva Veselá. Chtěla bych se zeptat, jestli už máte vakcínu proti chřipce "
        "a kdy se můžu přijít nechat očkovat. Zkusím zavolat zítra ráno. Děkuji a na shledanou.",
        None,
    ),
    (
        "zruseni",
        "Dobrý den, tady Karel Horák. Musím bohužel zrušit svůj termín na čtvrtek v deset hodin, "
        "jsem pracovně mimo Prahu. Ozvěte se mi prosím na sedm sedm šest, osm osm osm, nula nula jedna.",
        "+420776888001",
    ),
    (
        "prelozeni",
        "Dobrý den, tady Hana Marková. Potřebovala bych přeložit kontrolu z pondělí na jiný den, "
        "nejlépe odpoledne. Moje číslo je sedm dvacet, pět šest sedm, osm devět nula.",
        "+420720567890",
    ),
    (
        "zpet",
        "Dobrý den, tady Pavel Pokorný, volal jsem už ráno. Zavolejte mi prosím zpět, je to naléhavé. "
        "Číslo je šest nula osm, jedna jedna jedna, dva dva dva.",
        "+420608111222",
    ),
    (
        "alergie",
        "Dobrý den, tady Alena Benešová. Mám silnou alergickou reakci, otekly mi oči a svědí mě celé "
        "tělo. Co mám dělat? Zavolejte mi na sedm set sedmdesát sedm, čtyři sta dvacet, tři sta třicet tři.",
        "+420777420333",
    ),
    (
        "tlak",
        "Haló, dobrý den, u telefonu Josef Fiala. Naměřil jsem si doma vysoký tlak, sto osmdesát na sto "
        "deset. Mám přijít? Moje číslo je šest set šest, sto jedenáct, dvě stě dvacet dva.",
        "+420606111222",
    ),
    (
        "kontrola",
        "Dobrý den, tady Zuzana Jelínková. Chtěla bych se objednat na kontrolu po operaci kolena, "
        "pan doktor říkal za šest týdnů. Děkuji, zavolám ještě odpoledne.",
        None,
    ),
    (
        "vyrazka",
        "Dobrý den, tady Martin Růžička. Syn má vyrážku po celém těle a bolí ho v krku. Zavolejte mi "
        "prosím na sedm devět nula, šest šest šest, čtyři čtyři čtyři.",
        "+420790666444",
    ),
    (
        "lekarna",
        "Dobrý den, tady Věra Králová. V lékárně mi řekli, že recept není v systému. Můžete to "
        "prosím zkontrolovat? Moje číslo je sedm tři devět, dva nula jedna, tři nula dva.",
        "+420739201302",
    ),
    (
        "odber",
        "Dobrý den, tady Ondřej Beneš. Chtěl bych se objednat na odběr krve, mám přijít nalačno? "
        "Volejte mi na šest nula pět, devět osm sedm, šest pět čtyři. Opakuji, šest nula pět, devět osm sedm, "
        "šest pět čtyři.",
        "+420605987654",
    ),
    (
        "potvrzeni",
        "Dobrý den, tady Ivana Dušková. Potřebuji potvrzení pro zaměstnavatele o tom, že jsem byla "
        "v úterý u lékaře. Děkuji, ozvu se znovu zítra.",
        None,
    ),
    (
        "zavrat",
        "Dobrý den, jmenuji se Miroslav Kolář. Od rána se mi točí hlava a je mi špatně. Zavolejte mi "
        "prosím zpět na číslo sedm sedm nula, nula nula nula, jedna dva tři.",
        "+420770000123",
    ),
    (
        "praha",
        "Dobrý den, tady Kateřina Urbanová. Prosím o zavolání na pevnou linku do práce, dva dva jedna, "
        "čtyři pět šest, sedm osm devět. Jde o výsledky z ultrazvuku.",
        "+420221456789",
    ),
    (
        "brno",
        "Dobrý den, tady Stanislav Novotný. Volám ohledně objednání na sono břicha. Zavolejte mi na "
        "pět čtyři dva, jedna dva tři, čtyři pět šest, je to brněnské číslo.",
        "+420542123456",
    ),
    (
        "kasel",
        "Dobrý den, tady Renata Šimková. Už týden mám kašel a rýmu. Potřebovala bych neschopenku a "
        "nějaké léky. Zavolejte mi prosím na sedm dvacet pět, třicet šest, čtyřicet sedm, padesát osm.",
        "+420725364758",
    ),
    (
        "navsteva",
        "Dobrý den, volá Lenka Krejčí kvůli mamince, paní Krejčí. Potřebovala by návštěvu doma, "
        "nemůže chodit. Číslo je šest set osm, nula devadesát, sto dvacet.",
        "+420608090120",
    ),
    (
        "kratka",
        "Dobrý den, tady Roman Štěpánek. Zavolejte mi prosím zpátky, číslo máte v kartě. Děkuji, na shledanou.",
        None,
    ),
    (
        "cukrovka",
        "Dobrý den, tady Jaroslava Pospíšilová. Došly mi proužky na měření cukru, potřebuji nový "
        "recept. Moje číslo je sedm sedm sedm, devět devět devět, nula jedna dva.",
        "+420777999012",
    ),
    (
        "tehotenstvi",
        "Dobrý den, tady Barbora Hájková. Jsem těhotná a potřebuji se objednat na první "
        "vyšetření. Zavolejte mi na plus čtyři dva nula, sedm tři čtyři, tři dva jedna, nula nula devět.",
        "+420734321009",
    ),
    (
        "sestra",
        "Dobrý den, tady Daniel Vávra. Chtěl bych mluvit se sestrou ohledně převazu rány po operaci. "
        "Zkuste mě prosím zastihnout odpoledne. Na shledanou.",
        None,
    ),
    (
        "zvraceni",
        "Haló, dobrý den, tady Petra Kolářová. Malý od noci zvrací a má průjem, je mu teprve dva roky. "
        "Co mám dělat? Zavolejte mi na sedm set devadesát tři, nula sedm, šedesát pět, nula nula.",
        "+420793076500",
    ),
    (
        "cesta",
        "Dobrý den, tady Filip Moravec. Za měsíc jedu do Asie a potřeboval bych očkování proti "
        "žloutence a tyfu. Moje číslo je sedm set třicet dva, jedenáct, dvacet dva, třicet tři.",
        "+420732112233",
    ),
    (
        "hrudnik",
        "Dobrý den, tady Zdeněk Marek. Od rána mě tlačí na hrudi a špatně se mi dýchá. Zavolejte mi "
        "prosím hned, šest nula sedm, dva dva tři, tři čtyři čtyři.",
        "+420607223344",
    ),
]

ENGLISH: list[tuple[str, str, str | None]] = [
    (
        "appointment",
        "Hello, this is Sarah Thompson. I would like to book an appointment with the doctor next "
        "week, ideally in the morning. Please call me back on six zero two, one two three, four five six.",
        "+420602123456",
    ),
    (
        "prescription",
        "Hi, this is Michael Green. I need a new prescription for my asthma inhaler, I am "
        "almost out. My number is seven seven seven, two three four, five six seven.",
        "+420777234567",
    ),
    (
        "results",
        "Good morning, my name is Emily Clark. I'm calling about my blood test results from last "
        "week. You can reach me on seven two oh, one one one, two two two.",
        "+420720111222",
    ),
    (
        "sicknote",
        "Hello, this is James Wilson. I need a sick note for my employer, I've had the flu since "
        "Monday. Please call me on six zero four, nine eight seven, six five four.",
        "+420604987654",
    ),
    (
        "fever",
        "Hi, this is Laura Bennett. My son has a high fever and a rash. Can we come in today? Call me "
        "back on plus four two zero, seven three one, five five five, zero one two.",
        "+420731555012",
    ),
    (
        "cancel",
        "Hello, this is David Harris. I have to cancel my appointment on Thursday morning, something "
        "came up at work. Thank you, goodbye.",
        None,
    ),
    (
        "toothache",
        "Hi, this is Olivia Turner. I have a terrible toothache and my face is swollen. Please call "
        "me as soon as possible on seven double seven, nine zero nine, eight one five.",
        "+420777909815",
    ),
    (
        "vaccine",
        "Good afternoon, this is Peter Walsh. I would like to ask whether the flu vaccine is "
        "available yet for my wife and me. I'll call again tomorrow.",
        None,
    ),
    (
        "reschedule",
        "Hello, this is Anna Roberts. Could I move my check up to a later date? My number is "
        "seven seven zero, one two three, nine nine nine.",
        "+420770123999",
    ),
    (
        "callback",
        "Hi, it's Mark Evans. Please call me back, it's urgent, it's about my father. Seven two four, "
        "six six six, eight eight eight.",
        "+420724666888",
    ),
    (
        "insurance",
        "Hello, this is Grace Miller. I need a confirmation of my visit for the insurance company. "
        "I can pick it up on Friday. Thank you very much.",
        None,
    ),
    (
        "dizzy",
        "Hello, this is Thomas Baker. I've been feeling dizzy since this morning and I fainted once. "
        "Please call me on six zero three, two four six, eight zero two.",
        "+420603246802",
    ),
    (
        "hotel",
        "Good evening, this is Robert Hughes. I'm staying at a hotel in Prague and I have a bad ear "
        "infection. The hotel number is two two four, one four two, eight eight eight, room twelve.",
        "+420224142888",
    ),
]

# Messages added later, rendered after the ones above with their own voice lists.
CZECH_MORE: list[tuple[str, str, str | None]] = [
    (
        "euthyrox",
        "Dobrý den, tady Jitka Pokorná. Prosím o recept na Euthyrox, dávka sto mikrogramů, jako "
        "minule. Kdyby něco, volejte na šest set dva, nula dvanáct, tři sta čtyřicet pět.",
        "+420602012345",
    ),
    (
        "ockovani_syn",
        "Dobrý den, tady Tereza Malá. Chtěla bych objednat syna na očkování, je mu patnáct "
        "měsíců. Hodí se nám úterý nebo čtvrtek ráno. Číslo je sedm set třicet osm, šedesát pět, čtyřicet, "
        "dvacet jedna.",
        "+420738654021",
    ),
    (
        "ortopedie",
        "Dobrý den, u telefonu Vladimír Havel. Potřeboval bych žádanku na ortopedii, bolí mě "
        "rameno. Zavolejte mi prosím na sedm sedm čtyři, nula osm osm, dva jedna šest. Opakuji, sedm sedm "
        "čtyři, nula osm osm, dva jedna šest.",
        "+420774088216",
    ),
    (
        "prevazy",
        "Dobrý den, tady Marta Vlčková. Tatínek je po mrtvici, leží a potřeboval by návštěvu doma "
        "kvůli převazům. Ozvu se znovu zítra dopoledne, děkuji.",
        None,
    ),
    (
        "vzorek",
        "Dobrý den, tady Radek Kopecký. Byl jsem v pondělí v osm ráno na odběrech a laboratoř prý "
        "ztratila vzorek. Mám přijít znovu? Moje číslo je šest nula čtyři, sedmdesát, osmdesát osm, "
        "devadesát.",
        "+420604708890",
    ),
    (
        "pojistovna",
        "Dobrý den, jmenuji se Ivana Sedláčková a volám z pojišťovny. Potřebujeme doplnit výpis ze "
        "zdravotní dokumentace jednoho pacienta. Zavolejte prosím na pevnou linku pět čtyři tři, dvě stě "
        "jedenáct, čtyři sta.",
        "+420543211400",
    ),
    (
        "tlak_odber",
        "Dobrý den, tady Božena Šťastná. Naměřila jsem si tlak sto šedesát na devadesát pět a "
        "trochu mě bolí hlava. Přijdu zítra v sedm třicet na odběr, tak se na to prosím podívejte. "
        "Na shledanou.",
        None,
    ),
    (
        "tabor",
        "Dobrý den, tady Lukáš Zeman. Dcera potřebuje potvrzení o zdravotní způsobilosti na letní "
        "tábor. Zavolejte mi na plus čtyři sta dvacet, sedm dva dva, nula nula pět, jedna osm sedm.",
        "+420722005187",
    ),
    (
        "zruseni_devet",
        "Dobrý den, tady Dana Holubová. Ruším zítřejší termín v devět, už je mi lépe. Děkuji a omlouvám se.",
        None,
    ),
    (
        "kolonoskopie",
        "Dobrý den, tady Michal Kovář. Volám kvůli výsledkům z kolonoskopie. Jsem k zastižení v "
        "práci na čísle dvě stě devadesát šest, sto osmdesát, nula nula sedm.",
        "+420296180007",
    ),
]

ENGLISH_MORE: list[tuple[str, str, str | None]] = [
    (
        "thyroid",
        "Hello, this is Hannah Fletcher. I'd like to order a repeat prescription for my thyroid "
        "tablets, the same dose as before. Could you call me on seven three two, four four one, nine zero six? "
        "I repeat, seven three two, four four one, nine zero six.",
        "+420732441906",
    ),
    (
        "nursery",
        "Hi, this is Daniel Price, calling for my daughter Ella. She is four and needs her check up "
        "and a form signed for the nursery. Please ring me back on six zero eight, double two five, three one "
        "seven.",
        "+420608225317",
    ),
    (
        "pressure",
        "Good morning, this is Richard Coleman. My blood pressure this morning was one forty over "
        "ninety, and I have a headache. Should I come in today? My number is seven seven five, three zero "
        "eight, one two four.",
        "+420775308124",
    ),
    (
        "fall",
        "Hello, this is Margaret Hill. My husband can't get out of bed after his fall on Sunday and he "
        "is in a lot of pain. Could the doctor come to the house? You have our address. Thank you.",
        None,
    ),
    (
        "fasting",
        "Hi, this is Kevin Ward. I have a blood test booked for Tuesday at seven thirty, and I wanted "
        "to check if I should come fasting. Call me on two two two, nine one four, five three eight, that's "
        "my office.",
        "+420222914538",
    ),
    (
        "mole",
        "Good afternoon, my name is Sophie Allen. I need a referral to a dermatologist for a mole on my "
        "back that has changed. You can reach me on plus four two zero, six zero five, eight eight three, two "
        "one nine.",
        "+420605883219",
    ),
    (
        "booster",
        "Hello, this is Chris Morgan. Both our kids need their booster vaccinations before school "
        "starts in September. What days do you vaccinate children? I'll try again tomorrow morning.",
        None,
    ),
    (
        "travelclaim",
        "Hi, this is Natalie Brooks. I need the doctor to fill in a form for my travel insurance "
        "claim, I was treated in hospital in Spain. Please call me at seven two one, zero six zero, four four "
        "seven.",
        "+420721060447",
    ),
    (
        "ecode",
        "Hello, this is George Palmer. The pharmacy says my electronic prescription code doesn't work. "
        "Could you send it again by text message to seven seven oh, five five two, eight one three? Thanks.",
        "+420770552813",
    ),
    (
        "better",
        "Hi, it's Jessica Reed. I need to cancel my son's appointment tomorrow at nine, he's feeling "
        "better now. Sorry for the short notice. Bye.",
        None,
    ),
    (
        "employer",
        "Hello, my name is Andrew Fox. I'm calling from work about a sick note, my employer needs it "
        "by Friday. The number here is five four one, two one two, three four five, extension twenty.",
        "+420541212345",
    ),
    (
        "cholesterol",
        "Good morning, Rachel Young here. Just calling for my cholesterol results. My number is "
        "seven three seven, twenty one, forty three, fifty.",
        "+420737214350",
    ),
    (
        "onfile",
        "Hi, Paul Simmons here, a patient of Doctor Novak. Please call me back when you have a moment, "
        "you have my number on file. Thanks.",
        None,
    ),
    (
        "monday",
        "Hello, this is Victoria Shaw. Is there any chance of an early appointment on Monday? I start "
        "work at nine. Call me on six oh three, double four seven, double oh nine.",
        "+420603447009",
    ),
    (
        "ecg",
        "Hi, this is Ben Carter. I was told to come to room eleven for my heart test but nobody was there. "
        "Can I book again? Call me on seven nine three, one two eight, six four zero.",
        "+420793128640",
    ),
    (
        "letter",
        "Hello, this is Amy Collins. My appointment letter says the twelfth of March at ten fifteen, "
        "but I'm away that week. Could we move it? My mobile is seven two eight, three zero zero, one five "
        "six.",
        "+420728300156",
    ),
    (
        "kenya",
        "Good morning, my name is Lucy Barnes. I'm travelling to Kenya in six weeks and I need advice "
        "about vaccinations and malaria tablets. I'll call back this afternoon, thank you.",
        None,
    ),
    (
        "hearing",
        "Hello, this is Edward Lane, I'm eighty two. My hearing aid form needs renewing. My home "
        "number is plus four two zero, two five seven, three one zero, four eight eight.",
        "+420257310488",
    ),
    (
        "sleep",
        "Hi, this is Megan Ross. I haven't been sleeping well for a few weeks and I'd like to talk to "
        "the doctor about it. Nothing urgent, I'll book online if I can.",
        None,
    ),
    (
        "baby",
        "Hello, this is Oliver Grant. My baby is three months old and has been coughing all night. Please "
        "call me urgently, six zero seven, five one nine, two eight three. Again, six zero seven, five one "
        "nine, two eight three.",
        "+420607519283",
    ),
]

# What each message asks for and whether it may not wait, as its script means it (the
# inbox's reading is measured against these: bench/triage_bench.py). Intent: one of the shipped
# request types (prescription, appointment, cancellation, results, sick_note, advice) or
# "other"; `also`: another type a receptionist could fairly file it under; urgent: the
# caller says something that calls for a person to read the message first (a red-flag
# symptom, a child that is ill now, "urgent"/"as soon as possible"), not merely a symptom.
# key: (intent, also, urgent)
INTENTS: dict[str, dict[str, tuple[str, tuple[str, ...], bool]]] = {
    "cs": {
        "objednani": ("appointment", (), False),
        "recept": ("prescription", (), False),
        "vysledky": ("results", (), False),
        "neschopenka": ("sick_note", (), False),
        "horecka": ("appointment", ("advice",), True),
        "bolest": ("advice", ("other",), True),
        "ockovani": ("appointment", ("advice",), False),
        "zruseni": ("cancellation", (), False),
        "prelozeni": ("appointment", (), False),
        "zpet": ("other", (), True),
        "alergie": ("advice", ("other",), True),
        "tlak": ("advice", ("appointment",), True),
        "kontrola": ("appointment", (), False),
        "vyrazka": ("advice", ("other",), False),
        "lekarna": ("prescription", (), False),
        "odber": ("appointment", ("advice",), False),
        "potvrzeni": ("sick_note", ("other",), False),
        "zavrat": ("advice", ("other",), False),
        "praha": ("results", (), False),
        "brno": ("appointment", (), False),
        "kasel": ("sick_note", ("prescription",), False),
        "navsteva": ("appointment", (), False),
        "kratka": ("other", (), False),
        "cukrovka": ("prescription", (), False),
        "tehotenstvi": ("appointment", (), False),
        "sestra": ("advice", ("appointment",), False),
        "zvraceni": ("advice", ("other",), True),
        "cesta": ("appointment", ("advice",), False),
        "hrudnik": ("advice", ("other",), True),
        "euthyrox": ("prescription", (), False),
        "ockovani_syn": ("appointment", (), False),
        "ortopedie": ("other", ("appointment",), False),
        "prevazy": ("appointment", (), False),
        "vzorek": ("results", ("appointment", "advice"), False),
        "pojistovna": ("other", (), False),
        "tlak_odber": ("advice", ("other",), False),
        "tabor": ("other", (), False),
        "zruseni_devet": ("cancellation", (), False),
        "kolonoskopie": ("results", (), False),
    },
    "en": {
        "appointment": ("appointment", (), False),
        "prescription": ("prescription", (), False),
        "results": ("results", (), False),
        "sicknote": ("sick_note", (), False),
        "fever": ("appointment", ("advice",), True),
        "cancel": ("cancellation", (), False),
        "toothache": ("advice", ("other",), True),
        "vaccine": ("advice", ("appointment",), False),
        "reschedule": ("appointment", (), False),
        "callback": ("other", (), True),
        "insurance": ("other", ("sick_note",), False),
        "dizzy": ("advice", ("other",), True),
        "hotel": ("advice", ("appointment", "other"), False),
        "thyroid": ("prescription", (), False),
        "nursery": ("appointment", (), False),
        "pressure": ("advice", ("appointment",), False),
        "fall": ("appointment", ("advice",), True),
        "fasting": ("advice", ("appointment",), False),
        "mole": ("other", ("appointment",), False),
        "booster": ("appointment", ("advice",), False),
        "travelclaim": ("other", (), False),
        "ecode": ("prescription", (), False),
        "better": ("cancellation", (), False),
        "employer": ("sick_note", (), False),
        "cholesterol": ("results", (), False),
        "onfile": ("other", (), False),
        "monday": ("appointment", (), False),
        "ecg": ("appointment", (), False),
        "letter": ("appointment", (), False),
        "kenya": ("advice", ("appointment",), False),
        "hearing": ("other", (), False),
        "sleep": ("appointment", ("advice",), False),
        "baby": ("advice", ("other",), True),
    },
}


def intent_labels() -> list[dict[str, Any]]:
    """``intents.json``: each message's intent and urgency, by its language and text (the
    clips of a message share them); written without synthesizing anything."""
    out = []
    for language, messages in (("cs", CZECH + CZECH_MORE), ("en", ENGLISH + ENGLISH_MORE)):
        assert set(INTENTS[language]) == {key for key, _, _ in messages}, f"every {language} message has its intent"
        for key, text, _ in messages:
            intent, also, urgent = INTENTS[language][key]
            out.append(
                {"language": language, "key": key, "text": text, "intent": intent, "also": list(also), "urgent": urgent}
            )
    return out


# --- the spoken numbers, read back to check that text and callback label agree --------------------
_UNITS = {
    "nula": 0,
    "jedna": 1,
    "jeden": 1,
    "dva": 2,
    "dvě": 2,
    "tři": 3,
    "čtyři": 4,
    "pět": 5,
    "šest": 6,
    "sedm": 7,
    "osm": 8,
    "devět": 9,
    "zero": 0,
    "oh": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
}
_TEENS = {
    "deset": 10,
    "jedenáct": 11,
    "dvanáct": 12,
    "třináct": 13,
    "čtrnáct": 14,
    "patnáct": 15,
    "šestnáct": 16,
    "sedmnáct": 17,
    "osmnáct": 18,
    "devatenáct": 19,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_TENS = {
    "dvacet": 20,
    "třicet": 30,
    "čtyřicet": 40,
    "padesát": 50,
    "šedesát": 60,
    "sedmdesát": 70,
    "osmdesát": 80,
    "devadesát": 90,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_HUNDRED = {"sto", "stě", "sta", "set"}
_NUMBER_WORDS = set(_UNITS) | set(_TEENS) | set(_TENS) | _HUNDRED | {"plus", "double", ","}


def spoken_digit_runs(text: str) -> list[str]:
    """Every run of number words in ``text`` as the digit string it says ("sedm set dvacet,
    nula devadesát" -> "720090"; a leading "plus" stays as "+")."""
    runs: list[str] = []
    out: list[str] = []
    cur: int | None = None
    room = 0  # what may still be added to cur: 99 after hundreds, 9 after tens, 0 when complete
    double = False

    def flush() -> None:
        nonlocal cur
        if cur is not None:
            out.append(str(cur))
        cur = None

    tokens = [*re.findall(r"[\wěščřžýáíéúůťďňó]+|[,.?!]", text.lower()), "."]
    for i, tok in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok not in _NUMBER_WORDS:
            flush()
            if out:
                runs.append("".join(out))
            out = []
            continue
        if tok == ",":
            flush()
        elif tok == "plus":
            flush()
            out.append("+")
        elif tok == "double":
            flush()
            double = True
        elif tok == "sto":
            flush()
            cur, room = 100, 99
        elif tok in _HUNDRED:
            pass  # "stě", "sta", "set": taken with the unit before them
        elif tok in _UNITS and nxt in _HUNDRED:
            flush()
            cur, room = _UNITS[tok] * 100, 99
        elif (tok in _UNITS and _UNITS[tok] == 0) or double:
            flush()
            out.append(str(_UNITS[tok]) * (2 if double else 1))
            double = False
        else:
            value = _UNITS.get(tok) or _TEENS.get(tok) or _TENS[tok]
            need = 9 if tok in _UNITS else 99
            if cur is not None and room >= need and (value < 10 or room == 99):
                cur += value
                room = 9 if tok in _TENS and room == 99 else 0
            else:
                flush()
                cur = value
                room = 9 if tok in _TENS else 0
    return runs


def check_callback(text: str, callback: str | None) -> None:
    """The text says the labelled number (and no other phone-number-long one)."""
    phones = [r for r in spoken_digit_runs(text) if len(r.lstrip("+")) >= 9]
    if callback is None:
        assert not phones, (text, phones)
        return
    parsed = phonenumbers.parse(callback)
    assert phonenumbers.is_valid_number(parsed) and phonenumbers.region_code_for_number(parsed) == "CZ", callback
    national = str(parsed.national_number)
    assert phones and all(p in (national, "+420" + national) for p in phones), (text, phones, callback)


# --- synthesis ---------------------------------------------------------------------------------
def voice_tag(voice: str) -> str:
    """ "espeak:cs+f2" -> "cs_f2", for file names."""
    return voice.split(":", 1)[1].replace("+", "_").replace("-", "_")


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def synthesize(text: str, voice: str, tmp: Path, rate: float = 1.0) -> np.ndarray:
    """Speech at 8 kHz, float32, peak 1, the synthesizer's leading/trailing silence cut
    (the onset is ours to place). ``rate`` > 1 speaks faster."""
    engine, name = voice.split(":", 1)
    raw, out = tmp / "raw.wav", tmp / "tel.wav"
    tempo: list[str] = []
    if engine == "festival":
        src = tmp / "text.txt"
        src.write_bytes(text.encode("iso-8859-2" if name.startswith("czech") else "latin-1"))
        evals = ["-eval", f"(voice_{name})"]
        if name.endswith("_hts"):  # the HTS engine ignores Duration_Stretch
            tempo = ["tempo", "-s", f"{rate:.3f}"]
        else:
            evals += ["-eval", f"(Parameter.set 'Duration_Stretch {1 / rate:.3f})"]
        run("text2wave", *evals, str(src), "-o", str(raw))
    else:
        src = tmp / "text.txt"
        src.write_text(text, encoding="utf-8")
        run("espeak-ng", "-v", name, "-s", str(round(160 * rate)), "-f", str(src), "-w", str(raw))
    run("sox", "-R", str(raw), "-c", "1", "-b", "16", str(out), *tempo, "rate", "-v", str(RATE))
    audio, got = sf.read(out, dtype="float32")
    assert got == RATE and audio.size > 0.5 * RATE, (voice, text[:40])
    audio = phone_band(audio)  # first: a voiced stop's low murmur is not heard on a phone line
    loud = np.flatnonzero(np.abs(audio) > 0.003 * np.abs(audio).max())
    audio = audio[max(0, loud[0] - 16) : loud[-1] + 1]
    return audio / np.abs(audio).max()


# --- signals ----------------------------------------------------------------------------------
def phone_band(x: np.ndarray, low: float = 300.0, high: float = 3400.0) -> np.ndarray:
    """Band-limit like a phone line: 300-3400 Hz with raised-cosine edges."""
    spectrum = np.fft.rfft(x)
    f = np.fft.rfftfreq(x.size, 1 / RATE)
    gain = np.clip((f - (low - 60)) / 120, 0, 1) * np.clip(((high + 80) - f) / 160, 0, 1)
    gain = 0.5 - 0.5 * np.cos(np.pi * gain)
    return np.fft.irfft(spectrum * gain, x.size).astype(np.float32)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def active_rms(x: np.ndarray) -> float:
    """RMS over the 20 ms frames within 35 dB of the loudest: the level while speaking."""
    frames = x[: x.size // 160 * 160].reshape(-1, 160)
    levels = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1))
    return float(np.sqrt(np.mean(levels[levels > levels.max() * 10 ** (-35 / 20)] ** 2)))


def at_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    """Scale to ``dbfs`` RMS while speaking; peaks above -1 dBFS are softly limited (loud callers)."""
    y = x * (10 ** (dbfs / 20) / active_rms(x))
    knee = 0.7
    over = np.abs(y) > knee
    y[over] = np.sign(y[over]) * (knee + (0.98 - knee) * np.tanh((np.abs(y[over]) - knee) / (0.98 - knee)))
    return y.astype(np.float32)


def colored_noise(n: int, rng: np.random.Generator, exponent: float) -> np.ndarray:
    """Noise with power ~ 1/f**exponent (0 white, 1 pink, 2 brown), unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / RATE)
    spectrum *= 1 / np.maximum(f, 20.0) ** (exponent / 2)
    y = np.fft.irfft(spectrum, n)
    return (y / rms(y)).astype(np.float32)


def line_noise(n: int, rng: np.random.Generator, dbfs: float) -> np.ndarray:
    return colored_noise(n, rng, 0.3) * 10 ** (dbfs / 20)


def tone(seconds: float, *freqs: float, level: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    out = sum(np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs)
    ramp = np.minimum(1, np.minimum(t, t[::-1]) / 0.008)  # no clicks
    return (level * out * ramp).astype(np.float32)


def cadence(seconds: float, pattern: list[tuple[float, float]], level: float = 0.2) -> np.ndarray:
    """The Czech 425 Hz call-progress tone with on/off ``pattern`` (busy: 0.33/0.33)."""
    cycle = np.concatenate(
        [np.concatenate([tone(on, 425.0, level=level), np.zeros(int(off * RATE), np.float32)]) for on, off in pattern]
    )
    return np.tile(cycle, int(seconds * RATE) // cycle.size + 1)[: int(seconds * RATE)]


def click(rng: np.random.Generator) -> np.ndarray:
    n = int(0.012 * RATE)
    return (rng.uniform(0.25, 0.6) * rng.standard_normal(n) * np.exp(-np.arange(n) / 12)).astype(np.float32)


def bursts(
    rng: np.random.Generator, starts_ends: list[tuple[float, float]], seconds: float, exponent: float, attack: float
) -> np.ndarray:
    """Shaped noise bursts (coughs, breaths, key clicks) at the given times, unit peak."""
    out = np.zeros(int(seconds * RATE), np.float32)
    for start, length in starts_ends:
        n = int(length * RATE)
        t = np.arange(n) / RATE
        env = (1 - np.exp(-t / attack)) * np.exp(-t / (length / 3))
        a = int(start * RATE)
        out[a : a + n] += (colored_noise(n, rng, exponent) * env)[: out.size - a]
    return out / np.abs(out).max()


def mix_equal(sources: list[np.ndarray], rng: np.random.Generator, seconds: float) -> np.ndarray:
    """Sources at equal RMS (+-2 dB), each from a random point, looped: no one to follow."""
    n = int(seconds * RATE)
    mix = np.zeros(n, np.float32)
    for src in sources:
        src = np.tile(src, n // src.size + 2)
        start = int(rng.integers(0, src.size - n))
        mix += src[start : start + n] / active_rms(src) * 10 ** (rng.uniform(-2, 2) / 20)
    return mix / np.abs(mix).max()


def noise_beds(rng: np.random.Generator, voices: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Background noise at the caller's end, 40 s each, unit RMS."""
    n = 40 * RATE
    t = np.arange(n) / RATE
    traffic = sum(np.exp(-(((t - c) / rng.uniform(1.5, 3.0)) ** 2)) for c in rng.uniform(0, 40, 12))
    street = colored_noise(n, rng, 2.0) * (0.4 + traffic) + 0.3 * colored_noise(n, rng, 1.0)
    keys = [(float(s), float(rng.uniform(0.02, 0.05))) for s in np.sort(rng.uniform(0, 39.5, 90))]
    office = (
        colored_noise(n, rng, 1.6)
        + 0.5 * bursts(rng, keys, 40.0, 0.0, 0.001)
        + 0.4 * mix_equal(voices, rng, 40.0) / 0.3
    )
    beds = {
        "street": street,
        "babble": mix_equal(voices, rng, 40.0),
        "office": office,
        "pink": colored_noise(n, rng, 1.0),
    }
    return {k: (v / rms(phone_band(v))).astype(np.float32) for k, v in beds.items()}


# --- the recording -----------------------------------------------------------------------------
def voicemail(
    sound: np.ndarray | None,
    rng: np.random.Generator,
    *,
    beep: bool = True,
    tail: float | None = None,
    hang_up: bool | None = None,
) -> dict[str, Any]:
    """Line, beep, the caller's sound, line until the hang-up (sometimes a click, then a
    quieter line). Returns the parts needed to render it on a channel."""
    line_db = float(rng.uniform(-66, -54))
    lead = float(rng.uniform(0.3, 0.8))
    head = [np.zeros(int(lead * RATE), np.float32)]
    if beep:
        head.append(
            tone(
                float(rng.uniform(0.3, 0.5)), float(rng.choice([1000.0, 1400.0])), level=float(rng.uniform(0.15, 0.35))
            )
        )
    head.append(np.zeros(int(rng.uniform(0.05, 0.4) * RATE), np.float32))
    onset = sum(p.size for p in head)
    sound = np.zeros(0, np.float32) if sound is None else sound
    tail = float(rng.uniform(1.5, 6.0)) if tail is None else tail
    hang_up = bool(rng.random() < 0.4) if hang_up is None else hang_up
    after = float(rng.uniform(0.2, 0.8)) if hang_up else 0.0
    connected = onset + sound.size + int((tail - after) * RATE)
    audio = np.concatenate([*head, sound, np.zeros(connected - onset - sound.size + int(after * RATE), np.float32)])
    audio[:connected] += line_noise(connected, rng, line_db)
    if hang_up:
        audio[connected:] += line_noise(audio.size - connected, rng, line_db - 12)
        c = click(rng)
        audio[connected : connected + c.size] += c
    return {"audio": audio, "onset": onset, "end": onset + sound.size, "connected": connected}


def write(
    rec: dict[str, Any],
    channel: str,
    stem: str,
    tmp: Path,
    rng: np.random.Generator,
    beds: dict[str, np.ndarray],
    speech_rms: float | None,
) -> dict[str, Any]:
    """Render ``rec`` on ``channel`` as ``stem``.wav/.mp3; label facts measured on the decoded file."""
    audio = rec["audio"].copy()
    facts: dict[str, Any] = {"noise": None, "snr_db": None}
    if channel == "noisy_mp3_8k":
        kind = ["street", "babble", "office", "pink"][int(rng.integers(4))]
        snr = float(rng.uniform(10, 20))
        bed = beds[kind]
        start = int(rng.integers(0, bed.size - audio.size)) if bed.size > audio.size else 0
        bed = np.tile(bed, audio.size // bed.size + 1)[start : start + rec["connected"]]
        level = speech_rms if speech_rms is not None else 10 ** (-24 / 20)
        audio[: rec["connected"]] += bed * level / 10 ** (snr / 20)
        facts = {"noise": kind, "snr_db": round(snr, 1)}
    audio = np.clip(phone_band(audio), -0.99, 0.99)
    part = OUT / f"{stem}.part"
    if channel == "ulaw8k":
        name = f"{stem}.wav"
        sf.write(part, audio, RATE, format="WAV", subtype="ULAW")
    else:
        mode, kbps = MP3_MODES[int(rng.integers(len(MP3_MODES)))]
        wav = tmp / "enc.wav"
        sf.write(wav, audio, RATE, subtype="PCM_16")
        name = f"{stem}.mp3"
        rate_args = (
            ["--abr", str(kbps)]
            if mode == "abr"
            else ["--cbr", "-b", str(kbps), "-t"]
            if kbps == 16
            else ["--cbr", "-b", str(kbps)]
        )
        run("lame", "--quiet", "-m", "m", "--resample", "8", *rate_args, str(wav), str(part))
        facts["bitrate"] = f"{mode}{kbps}"
    part.replace(OUT / name)
    decoded, got = sf.read(OUT / name, dtype="float32")
    assert got == RATE and decoded.ndim == 1, name
    # Where the recording starts in the decoded file (an MP3 without a gapless header keeps the encoder delay).
    n = 1 << int(np.ceil(np.log2(decoded.size + audio.size)))
    corr = np.fft.irfft(np.fft.rfft(decoded, n) * np.conj(np.fft.rfft(audio, n)), n)[:3000]
    shift = int(np.argmax(corr))
    return {"file": name, "shift": shift, "duration": round(decoded.size / RATE, 3), **facts}


def seeded(name: str) -> np.random.Generator:
    """Each clip's own random stream: changing one clip leaves the others as they were."""
    return np.random.default_rng([SEED, zlib.crc32(name.encode())])


def main() -> int:
    for messages in (CZECH + CZECH_MORE, ENGLISH + ENGLISH_MORE):
        assert len({key for key, _, _ in messages}) == len(messages), "a message key twice"
    OUT.mkdir(exist_ok=True)
    labels: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        # Voices in the background: other people in a waiting room, saying other things.
        crowd = [
            synthesize(text, voice, tmp, 0.9)
            for (_, text, _), voice in zip(
                CZECH[-6:],
                [
                    "espeak:cs+m1",
                    "espeak:cs+f3",
                    "festival:czech_machac",
                    "espeak:cs+m5",
                    "festival:czech_dita",
                    "espeak:cs+f1",
                ],
            )
        ]
        beds = noise_beds(seeded("beds"), crowd)
        speech: dict[str, tuple[np.ndarray, str]] = {}

        def add(
            kind: str, stem: str, rec: dict[str, Any], channel: str, speech_rms: float | None = None, **label: Any
        ) -> None:
            out = write(rec, channel, stem, tmp, seeded(stem), beds, speech_rms)
            shift = out.pop("shift")
            timed = kind != "empty"
            labels.append(
                {
                    "file": out.pop("file"),
                    "kind": kind,
                    "message": kind == "speech",
                    "language": label.get("language"),
                    "text": label.get("text"),
                    "callback": label.get("callback"),
                    "voice": label.get("voice"),
                    "channel": channel,
                    "onset": round((rec["onset"] + shift) / RATE, 3) if timed else None,
                    "duration": out.pop("duration"),
                    "speech_end": round((rec["end"] + shift) / RATE, 3) if timed else None,
                    "level_dbfs": label.get("level_dbfs"),
                    "rate": label.get("rate"),
                    **out,
                }
            )

        for language, messages, voices in (
            ("cs", CZECH, CZECH_VOICES),
            ("en", ENGLISH, ENGLISH_VOICES),
            ("cs", CZECH_MORE, CZECH_MORE_VOICES),
            ("en", ENGLISH_MORE, ENGLISH_MORE_VOICES),
        ):
            for i, (key, text, callback) in enumerate(messages):
                check_callback(text, callback)
                rng = seeded(f"{language}_{key}")
                voice = voices[i % len(voices)]
                rate = float(rng.choice([0.85, 0.95, 1.0, 1.0, 1.1, 1.2]))
                level = float(rng.choice([-33.0, -29.0, -25.0, -22.0, -20.0, -17.0, -15.0]))
                sound = at_level(synthesize(text, voice, tmp, rate), level)
                speech[f"{language}_{key}"] = (sound, voice)
                rec = voicemail(sound, rng)
                if rec["audio"].size < 8 * RATE:  # a message lasts 8-30 s (no first English one was shorter)
                    rec = voicemail(sound, rng, tail=6.0)
                for channel in CHANNEL_PAIRS[i % len(CHANNEL_PAIRS)]:
                    add(
                        "speech",
                        f"{language}_{key}_{voice_tag(voice)}_{channel}",
                        rec,
                        channel,
                        10 ** (level / 20),
                        language=language,
                        text=text,
                        callback=callback,
                        voice=voice,
                        level_dbfs=level,
                        rate=rate,
                    )

        # Empty: no message at all.
        def silent(name: str, seconds: float, **kw: Any) -> dict[str, Any]:
            return voicemail(None, seeded(name), tail=seconds, **kw)

        busy = silent("busy", 1.2, hang_up=True)
        busy["audio"] = np.concatenate([busy["audio"], cadence(7.0, [(0.33, 0.33)])])
        dial = silent("dial", 1.0, hang_up=True)
        dial["audio"] = np.concatenate([dial["audio"], cadence(9.0, [(0.33, 0.33), (0.66, 0.66)])])
        hum = silent("hum", 10.0, hang_up=False)
        t = np.arange(hum["audio"].size) / RATE
        hum["audio"] += 0.05 * np.tanh(3 * np.sin(2 * np.pi * 50 * t)).astype(np.float32)  # a buzz: 50 Hz harmonics
        breath = silent("breath", 9.0, hang_up=False)
        rng = seeded("breathing")
        cycle = [(1.3 + 2.9 * k + float(rng.uniform(0, 0.4)), float(rng.uniform(1.0, 1.6))) for k in range(3)]
        breath["audio"] += 10 ** (-32 / 20) * bursts(rng, cycle, breath["audio"].size / RATE, 1.0, 0.3)
        breath["audio"][int(0.3 * RATE) : int(0.3 * RATE) + 96] += click(rng)
        empties = [
            (
                "empty_digital_silence",
                {"audio": np.zeros(5 * RATE, np.float32), "onset": 0, "end": 0, "connected": 5 * RATE},
                "ulaw8k",
            ),
            ("empty_line_hiss", silent("line", 8.0, beep=False, hang_up=False), "mp3_8k"),
            ("empty_beep_silence", silent("beep", 6.0), "ulaw8k"),
            ("empty_beep_busy_tone", busy, "mp3_8k"),
            ("empty_beep_dial_tone", dial, "ulaw8k"),
            ("empty_mains_hum", hum, "mp3_8k"),
            ("empty_click_breathing", breath, "ulaw8k"),
            ("empty_background_noise", silent("street", 12.0), "noisy_mp3_8k"),
        ]
        for stem, rec, channel in empties:
            add("empty", stem, rec, channel)

        # Unintelligible: voice or sound without words to take down, or too little to be a message.
        def odd(stem: str, sound: np.ndarray, channel: str, level: float, **label: Any) -> None:
            sound = at_level(sound, level)
            add("unintelligible", stem, voicemail(sound, seeded(stem)), channel, 10 ** (level / 20), **label)

        for key, channel in (
            ("cs_objednani", "mp3_8k"),
            ("cs_vysledky", "ulaw8k"),
            ("cs_neschopenka", "noisy_mp3_8k"),
            ("cs_bolest", "mp3_8k"),
            ("en_appointment", "ulaw8k"),
            ("en_prescription", "noisy_mp3_8k"),
            ("en_results", "mp3_8k"),
        ):
            sound, voice = speech[key]
            odd(f"reversed_{key}_{channel}", sound[::-1].copy(), channel, -22.0, language=key[:2], voice=voice)
        # The first messages only: the babble clips stay as they were made before the later messages.
        pool = [
            speech[f"{language}_{key}"][0]
            for language, messages in (("cs", CZECH), ("en", ENGLISH))
            for key, _, _ in messages
        ]
        for count, channel in ((4, "mp3_8k"), (6, "ulaw8k"), (8, "noisy_mp3_8k")):
            rng = seeded(f"babble{count}")
            picks = [pool[int(j)] for j in rng.choice(len(pool), count, replace=False)]
            odd(
                f"babble_{count}_voices_{channel}",
                mix_equal(picks, rng, float(rng.uniform(7, 12))),
                channel,
                -22.0,
                voice="babble",
            )
        for word, voice, language, channel in (
            ("Haló?", "festival:czech_dita", "cs", "mp3_8k"),
            ("Haló?", "espeak:cs+m3", "cs", "ulaw8k"),
            ("Hello?", "festival:cmu_us_slt_arctic_hts", "en", "noisy_mp3_8k"),
        ):
            odd(
                f"short_{word.strip('?').lower().replace('ó', 'o')}_{voice_tag(voice)}_{channel}",
                synthesize(word, voice, tmp),
                channel,
                -20.0,
                language=language,
                voice=voice,
            )
        rng = seeded("sounds")
        coughs = [(0.0, 0.35), (0.55, 0.3), (1.1, 0.4), (2.6, 0.35)]
        odd("cough_ulaw8k", phone_band(bursts(rng, coughs, 3.2, 0.8, 0.004)), "ulaw8k", -20.0)
        odd("sigh_mp3_8k", phone_band(bursts(rng, [(0.0, 1.6), (2.8, 1.4)], 4.5, 1.4, 0.25)), "mp3_8k", -30.0)
        notes = [(261.6, 329.6, 392.0), (220.0, 261.6, 329.6), (174.6, 220.0, 261.6), (196.0, 246.9, 293.7)] * 2
        chords = np.concatenate(
            [
                tone(1.0, *(f * h for f in chord for h in (1, 2, 3)), level=0.5)
                * np.exp(-np.arange(RATE) / (0.5 * RATE)).astype(np.float32)
                for chord in notes
            ]
        )
        odd("music_chords_noisy_mp3_8k", chords, "noisy_mp3_8k", -22.0)
        dtmf = {
            "1": (697, 1209),
            "2": (697, 1336),
            "3": (697, 1477),
            "5": (770, 1336),
            "9": (852, 1477),
            "0": (941, 1336),
            "#": (941, 1477),
        }
        presses = [
            np.concatenate(
                [
                    tone(float(rng.uniform(0.08, 0.25)), *dtmf[k], level=0.4),
                    np.zeros(int(rng.uniform(0.15, 0.6) * RATE), np.float32),
                ]
            )
            for k in "1230591#"
        ]
        odd("dtmf_ulaw8k", np.concatenate(presses), "ulaw8k", -16.0)

    for x in labels:
        assert x["kind"] != "speech" or 8 <= x["duration"] <= 30, (x["file"], x["duration"])
        assert x["kind"] != "empty" or 3 <= x["duration"] <= 20, (x["file"], x["duration"])
    # Files are rewritten in place and stale ones removed last, so a test reading the set meanwhile
    # rarely finds a clip missing.
    fresh = {x["file"] for x in labels}
    for old in OUT.iterdir():
        if old.suffix in (".wav", ".mp3") and old.name not in fresh:
            old.unlink()
    staged = OUT / "labels.json.tmp"
    staged.write_text(json.dumps(labels, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    staged.replace(OUT / "labels.json")
    (OUT / "intents.json").write_text(
        json.dumps(intent_labels(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    counts: dict[str, int] = {}
    for x in labels:
        key = f"{x['kind']}/{x['language']}/{x['channel']}"
        counts[key] = counts.get(key, 0) + 1
    print(f"{len(labels)} clips in {OUT}: {json.dumps(counts, indent=1)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--intents"]:  # the intent labels only (intents.json), no audio
        (OUT / "intents.json").write_text(
            json.dumps(intent_labels(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        sys.exit(0)
    sys.exit(main())
