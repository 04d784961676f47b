"""The evaluation suite: every question set `manage.py evaluate --suite` runs, and how each one's
corpus is configured. Pure: no ORM.

This registry is the one place a dataset's configuration lives: where its files are, which tenant
and corpus it is ingested into, and its corpus profile (which metadata key is the documents' date,
which keys are enumerations to narrow by, which text-search language). The news configuration of
MultiHop-RAG is data here, not code in the answer engine. Each set has its own tenant, so sets never
see each other's documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SHARED_EVAL = Path(__file__).resolve().parents[2].parent / "shared" / "eval"


@dataclass(frozen=True)
class CorpusProfile:
    """What a corpus declares about its documents (kb.models.Corpus.date_key, facet_keys, language)."""

    date_key: str = ""  # metadata key holding each document's date; "" = undated
    facet_keys: tuple[str, ...] = ()  # metadata keys whose values are enumerations; () = discovered from the data
    language: str = "english"  # PostgreSQL text-search configuration of keyword search

    def fields(self) -> dict:
        """As Corpus field values."""
        return {"date_key": self.date_key, "facet_keys": list(self.facet_keys), "language": self.language}


NEWS = CorpusProfile(date_key="published_at", facet_keys=("source", "category"), language="english")
ENCYCLOPEDIA = CorpusProfile(language="english")
# Product documentation and web pages: undated, enumerations discovered from the data (a manual's
# chapter, a page's collection), English keyword search.
DOCUMENTATION = CorpusProfile(language="english")


@dataclass(frozen=True)
class EvalSet:
    """One question set of the suite and the corpus it is asked over."""

    name: str
    corpus: Path
    questions: Path
    tenant: str
    corpus_name: str
    profile: CorpusProfile = field(default_factory=CorpusProfile)
    description: str = ""
    paper_anchors: bool = False  # its report shows MultiHop-RAG's published figures beside ours

    def missing(self) -> list[Path]:
        """Files of this set that are absent (the set is skipped when any is)."""
        return [p for p in (self.corpus, self.questions) if not p.is_file()]


SUITE: tuple[EvalSet, ...] = (
    EvalSet(name="multihop-rag-dev", corpus=SHARED_EVAL / "corpus.jsonl", questions=SHARED_EVAL / "questions-dev.jsonl",
            tenant="evaluation", corpus_name="corpus", profile=NEWS,
            description="MultiHop-RAG dev: news articles; questions name publishers and dates", paper_anchors=True),
    EvalSet(name="hotpotqa", corpus=SHARED_EVAL / "hotpotqa" / "corpus.jsonl", questions=SHARED_EVAL / "hotpotqa" / "questions.jsonl",
            tenant="evaluation-hotpotqa", corpus_name="corpus", profile=ENCYCLOPEDIA,
            description="HotpotQA dev, distractor paragraphs pooled: Wikipedia bridge and comparison questions"),
    EvalSet(name="emanual", corpus=SHARED_EVAL / "emanual" / "corpus.jsonl", questions=SHARED_EVAL / "emanual" / "questions.jsonl",
            tenant="evaluation-emanual", corpus_name="corpus", profile=DOCUMENTATION,
            description="E-Manual QA dev: a TV manual's sections; expert how-to questions, gold = the section"),
    EvalSet(name="mtrag", corpus=SHARED_EVAL / "mtrag" / "corpus.jsonl", questions=SHARED_EVAL / "mtrag" / "questions.jsonl",
            tenant="evaluation-mtrag", corpus_name="corpus", profile=DOCUMENTATION,
            description="MTRAG-UN dev (govt + ibmcloud): last turns of conversations over web pages; gold = passages"),
)
DEFAULT_SET = SUITE[0]


def select(names: str | None) -> list[EvalSet]:
    """The sets named (comma-separated, in the order given), or all of them; unknown names raise ValueError."""
    if not names:
        return list(SUITE)
    by_name = {s.name: s for s in SUITE}
    picked = []
    for name in (n.strip() for n in names.split(",")):
        if not name:
            continue
        if name not in by_name:
            raise ValueError(f"unknown set {name!r}: the suite has {', '.join(by_name)}")
        picked.append(by_name[name])
    return picked


def profile_for(corpus: Path) -> CorpusProfile | None:
    """The profile of the suite set whose corpus file this is (None for any other file)."""
    try:
        target = corpus.resolve()
    except OSError:
        return None
    return next((s.profile for s in SUITE if s.corpus.resolve() == target), None)
