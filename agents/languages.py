"""Calendar words (month and weekday names) of every language a corpus may be declared in, from a
library that has them: Django's own translations, which ship with Django (a dependency already).

A corpus names a PostgreSQL text search configuration as its language (kb.models.Corpus.language:
"english", "french", "german", ...). `TEXT_SEARCH_LOCALES` maps each snowball configuration
PostgreSQL ships to the locale of Django's translation catalogue (django/conf/locale/<code>); the
month and weekday names are read from that catalogue with the standard `gettext` module (the
messages of `django.utils.dates`), so no Django settings are needed and nothing here is a corpus's
or a benchmark's vocabulary: it is language data, the same for every corpus in that language.

English is Django's source language: its names are the message ids themselves. A configuration
Django has no catalogue for ("yiddish") or that has no language ("simple") contributes nothing.
"""

from __future__ import annotations

import gettext
from functools import lru_cache
from pathlib import Path

import django

# PostgreSQL's snowball text search configurations (pg_catalog.pg_ts_config) -> Django locale.
TEXT_SEARCH_LOCALES: dict[str, str] = {
    "arabic": "ar", "armenian": "hy", "basque": "eu", "catalan": "ca", "danish": "da", "dutch": "nl",
    "english": "en", "finnish": "fi", "french": "fr", "german": "de", "greek": "el", "hindi": "hi",
    "hungarian": "hu", "indonesian": "id", "irish": "ga", "italian": "it", "lithuanian": "lt",
    "nepali": "ne", "norwegian": "nb", "portuguese": "pt", "romanian": "ro", "russian": "ru",
    "serbian": "sr", "spanish": "es", "swedish": "sv", "tamil": "ta", "turkish": "tr",
}

# The message ids of django.utils.dates (English, Django's source language).
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_LOCALE_DIR = Path(django.__file__).parent / "conf" / "locale"


def _catalogues(language: str | None) -> list[gettext.NullTranslations]:
    """The translation catalogues of one text search language, or of all of them (None). English
    and unknown languages get the null catalogue (message ids returned as they are) or nothing."""
    names = list(TEXT_SEARCH_LOCALES) if language is None else [language]
    out: list[gettext.NullTranslations] = []
    for name in names:
        code = TEXT_SEARCH_LOCALES.get(name)
        if code is None:
            continue
        if code == "en":
            out.append(gettext.NullTranslations())
            continue
        try:
            out.append(gettext.translation("django", str(_LOCALE_DIR), languages=[code]))
        except OSError:  # a Django build without this catalogue: the language has no names here
            continue
    return out


def _clean(name: str) -> str:
    return " ".join(name.split()).casefold()


@lru_cache(maxsize=64)
def month_numbers(language: str | None = None) -> dict[str, int]:
    """Casefolded month names of a text search language (None: of every supported language) ->
    month number (1-12): each language's name and its alternative form where it has one (the
    genitive "октября", "lokakuuta" used in dates). English names are always included, so a date
    written in English is read in any corpus."""
    out: dict[str, int] = {_clean(m): i for i, m in enumerate(_MONTHS, 1)}
    for catalogue in _catalogues(language):
        for i, month in enumerate(_MONTHS, 1):
            for name in (catalogue.gettext(month), catalogue.pgettext("alt. month", month)):
                if name and name.strip():
                    out.setdefault(_clean(name), i)
    return out


@lru_cache(maxsize=64)
def weekday_names(language: str | None = None) -> frozenset[str]:
    """Casefolded weekday names of a text search language (None: of every supported language), the
    English ones always included."""
    out = {_clean(d) for d in _WEEKDAYS}
    for catalogue in _catalogues(language):
        out.update(_clean(catalogue.gettext(d)) for d in _WEEKDAYS)
    return frozenset(n for n in out if n)
