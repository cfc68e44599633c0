"""The triage benchmark's unseen set: voicemails written for reporting alone.

No word list, threshold or rule of the triage or the transcription was chosen while any
of these was read back: they are scored, never tuned on (the labelled set and the older
held-out set are where choices are made). Phrased as callers phrase things to a GP's
reception (colloquial forms, names, a year of birth, a past or negated request beside the
real one), each rendered in two voices (a Festival and an espeak-ng one, at a random rate)
on two of the three telephone channels.

Each entry: (key, text, intent, other types it could fairly be filed under, urgent).
"""

from __future__ import annotations

UNSEEN: dict[str, list[tuple[str, str, str, tuple[str, ...], bool]]] = {
    "cs": [
        (
            "recept_tlak",
            "Dobrý den, tady Miroslav Kučera, ročník padesát dva. Docházejí mi léky na tlak, "
            "mohla by mi paní doktorka poslat nový recept? Děkuju.",
            "prescription",
            (),
            False,
        ),
        (
            "recept_sms",
            "Dobrý den, Jitka Pospíšilová. Prosím o e-recept na Euthyrox, kód mi stačí poslat esemeskou.",
            "prescription",
            (),
            False,
        ),
        (
            "recept_babicka",
            "Dobrý den, volám za babičku Boženu Královou. Dojdou jí kapky do očí, "
            "potřebovala by předepsat nové. Díky moc.",
            "prescription",
            (),
            False,
        ),
        (
            "objednat_krev",
            "Dobrý den, chtěla bych se objednat na odběr krve, paní doktorka mi to minule říkala. Jsem Iveta Němcová.",
            "appointment",
            (),
            False,
        ),
        (
            "objednat_kontrola",
            "Dobrý den, tady Jiří Vlček. Můžu se objednat na kontrolu po té operaci kolena? Nejlíp někdy ráno.",
            "appointment",
            (),
            False,
        ),
        (
            "objednat_prohlidka",
            "Dobrý den, jmenuji se Lucie Urbanová a potřebuji termín na preventivní prohlídku. Zavolejte mi prosím.",
            "appointment",
            (),
            False,
        ),
        (
            "zrusit_stredu",
            "Dobrý den, tady Radek Hájek. Ve středu v deset nepřijdu, musím do práce, tak ten termín prosím zrušte.",
            "cancellation",
            (),
            False,
        ),
        (
            "zrusit_dcera",
            "Dobrý den, Simona Benešová. Dcera je už zdravá, takže zítřejší návštěvu rušíme. Děkuji.",
            "cancellation",
            (),
            False,
        ),
        (
            "presunout",
            "Dobrý den, tady Oldřich Kříž. Potřeboval bych přesunout zítřejší kontrolu "
            "na příští týden, jestli by to šlo.",
            "appointment",
            ("cancellation",),
            False,
        ),
        (
            "vysledky_krev",
            "Dobrý den, tady Dana Růžičková. Byla jsem minulý týden na odběru a chtěla bych vědět výsledky. Děkuji.",
            "results",
            (),
            False,
        ),
        (
            "vysledky_rentgen",
            "Dobrý den, volá Zdeněk Moravec. Přišel vám už výsledek z rentgenu plic? Ozvěte se mi prosím.",
            "results",
            (),
            False,
        ),
        (
            "neschopenka_zada",
            "Dobrý den, tady Libor Sedláček. Seklo mě v zádech, nemůžu do práce, potřeboval bych neschopenku.",
            "sick_note",
            (),
            False,
        ),
        (
            "neschopenka_ukoncit",
            "Dobrý den, Markéta Šťastná. Od pondělí už můžu do práce, chtěla bych ukončit neschopenku.",
            "sick_note",
            (),
            False,
        ),
        (
            "ocr_dite",
            "Dobrý den, potřebuji potvrzení na ošetřování dítěte, malý má neštovice. Tady Kamila Veselá.",
            "sick_note",
            ("other",),
            False,
        ),
        (
            "dotaz_ockovani",
            "Dobrý den, mám dotaz, jestli můžu jít na očkování, když beru antibiotika. Tady Blanka Marešová.",
            "advice",
            ("appointment",),
            False,
        ),
        (
            "dotaz_lek",
            "Dobrý den, chtěla bych se poradit, jestli můžu brát Ibalgin spolu s tím novým lékem. Nic akutního.",
            "advice",
            ("prescription",),
            False,
        ),
        (
            "potvrzeni_sport",
            "Dobrý den, syn potřebuje potvrzení pro sportovní oddíl, kdy si pro něj můžeme přijít?",
            "other",
            ("appointment",),
            False,
        ),
        (
            "faktura",
            "Dobrý den, tady účetní firmy Stavby Novák, volám kvůli faktuře za pracovnělékařské prohlídky.",
            "other",
            (),
            False,
        ),
        (
            "nepotrebuji_recept",
            "Dobrý den, recept už jsem si vyzvedla, to je v pořádku. Volám jen kvůli "
            "termínu kontroly, chci se objednat. Hana Dvořáková.",
            "appointment",
            (),
            False,
        ),
        (
            "urg_tehotna",
            "Dobrý den, tady Petra Kolářová, jsem ve třicátém týdnu těhotenství "
            "a krvácím. Prosím, ozvěte se co nejdřív.",
            "advice",
            ("other",),
            True,
        ),
        (
            "urg_hrudnik",
            "Haló, tady Jaroslav Beneš, od rána mě tlačí na hrudi a pálí to do ruky. Zavolejte mi hned.",
            "advice",
            ("other",),
            True,
        ),
        (
            "urg_dite_horecka",
            "Dobrý den, dcera má čtyřicet horečku, zvrací a je strašně spavá. Co máme dělat? Volejte prosím rychle.",
            "advice",
            ("appointment", "other"),
            True,
        ),
        (
            "urg_alergie",
            "Dobrý den, manželovi po tom novém léku otekl celý obličej a špatně se mu dýchá. Prosím o zavolání.",
            "advice",
            ("other", "prescription"),
            True,
        ),
        (
            "urg_pad",
            "Dobrý den, tatínek upadl na chodníku a hodně ho bolí ruka, asi je zlomená. Co máme dělat?",
            "advice",
            ("other", "appointment"),
            True,
        ),
        (
            "urg_cukr",
            "Dobrý den, mamince je hrozně zle, má vysoký cukr a skoro nekomunikuje. Zavolejte nám okamžitě.",
            "advice",
            ("other",),
            True,
        ),
        (
            "urg_bolest_bricha",
            "Dobrý den, tady Filip Doležal, mám strašné bolesti břicha vpravo dole a teplotu. Můžu dnes přijít?",
            "appointment",
            ("advice",),
            True,
        ),
        (
            "zavolat_zpet",
            "Dobrý den, tady Alois Pokorný, prosím o zpětné zavolání, děkuji. Na shledanou.",
            "other",
            (),
            False,
        ),
        (
            "zprava_nemocnice",
            "Dobrý den, z nemocnice mi řekli, že vám pošlou propouštěcí zprávu, "
            "tak jen abyste o tom věděli. Tady Václav Holub.",
            "other",
            ("results",),
            False,
        ),
    ],
    "en": [
        (
            "repeat_statins",
            "Hi there, it's Gary Wilson, I'm running low on my statins, could the doctor do a repeat for me? Cheers.",
            "prescription",
            (),
            False,
        ),
        (
            "move_appointment",
            "Hello, Linda Brown speaking, I can't make Tuesday afternoon, could we cancel it "
            "and find something next week?",
            "cancellation",
            ("appointment",),
            False,
        ),
        (
            "xray_result",
            "Hi, this is Mark Evans, I had an x-ray last Monday and wanted to know if the result is in.",
            "results",
            (),
            False,
        ),
        (
            "baby_rash",
            "Hello, my baby has a rash that doesn't fade and a high temperature, please call me straight away.",
            "advice",
            ("other",),
            True,
        ),
    ],
}
