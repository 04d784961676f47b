"""The offline provider: deterministic, local, no model. Drives the same loop through the same tools.

It first asks the `facets` tool which sources and dates the caller's documents have. A question
that names some of those sources ("the TechCrunch report on October 31, 2023 ... and the Fortune
article ...") is planned into one search per named source, filtered to it and to the date named
next to it (agents.planning); otherwise it splits the question into parts (clauses, comparisons)
and searches for each. It judges sufficiency by term overlap between every part and the
retrieved text, and by whether every name the question uses occurs in it; searches again for
what is missing; and composes an extractive answer: the best sentences of the retrieved chunks,
each quoted with its citation. Parts nothing covers are named; if nothing is covered, or a name
the question asks about occurs in nothing retrieved, the answer is NOT_ENOUGH_EVIDENCE. Chunks
flagged at ingest as containing instructions to a model are never quoted, nor is any sentence
that reads like one.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from agents.citations import NOT_ENOUGH_EVIDENCE
from agents.messages import AssistantMessage, ModelRequest, ModelTurn, ToolCall, ToolResultMessage, Usage
from agents.planning import clause_segments, fact_segments, find_sources, named_terms, plan, source_aliases, without_facets
from agents.prompts import FACETS_LABEL
from agents.text import coverage, key_words, looks_like_instructions, question_context, sentences, split_question, terms

PART_COVERED = 0.5  # share of a part's terms one retrieved chunk must contain
SENTENCE_MIN = 0.25  # share of a part's terms a quoted sentence must contain
MAX_ROUNDS = 4  # tool rounds: facets, the planned searches, up to two refinements
CONTEXT_CHUNKS = 10  # what the planned searches share between them
SEGMENT_MIN_TERMS = 3  # content words a question segment needs to be searched on its own (planning.fact_segments)
MAX_SEGMENT_QUERIES = 6
SENTENCES_PER_PART = 3
NAME_CONTEXT = 0.3  # share of its part's terms a chunk must share to count as mentioning a name the part asks about
RELATIVE_MIN = 0.6  # a quoted sentence scores at least this share of the part's best sentence


@dataclass(frozen=True)
class SeenChunk:
    chunk_id: int
    text: str
    score: float
    flagged: bool
    about: str = ""  # document title and metadata values: what the chunk is about besides its text
    source: str = ""  # the document's "source" metadata value, if any


_BLOCK = re.compile(r"^<document_data[^>]*>\n?(.*?)\n?</document_data>$", re.S)


def _unwrap(block: str) -> str:
    m = _BLOCK.match(block.strip())
    text = m.group(1) if m else block
    return text.removesuffix(" […truncated]")


class OfflineProvider:
    name = "offline"
    model = "extractive-v1"

    def generate(self, request: ModelRequest) -> ModelTurn:
        handler = {"agent": self._agent, "repair": self._answer, "rewrite": self._rewrite, "judge": self._judge,
                   "answer": self._answer}[request.task]
        text, calls = handler(request)
        prompt_chars = sum(len(getattr(m, "text", "") or json.dumps(getattr(m, "content", {}), default=str)) for m in request.messages)
        return ModelTurn(text=text, tool_calls=tuple(calls),
                         usage=Usage(input_tokens=(len(request.system) + prompt_chars) // 4, output_tokens=len(text) // 4 + 5 * len(calls)))

    # --- tasks ---

    def _agent(self, request: ModelRequest) -> tuple[str, list[ToolCall]]:
        parts = split_question(request.question)
        if not request.tools_enabled:
            return self._compose(request, parts), []
        asked = _queries_asked(request)
        rounds = sum(1 for m in request.messages if isinstance(m, AssistantMessage) and m.tool_calls)
        if rounds == 0:
            return "", [ToolCall("offline-0-0", "facets", {})]
        sources = _facet_sources(request)
        if rounds == 1:
            return "", planned_searches(request.question, parts, sources)
        chunks = _chunks_from(request)
        missing = uncovered_parts(parts, chunks, sources)
        absent = absent_names(request.question, sources, chunks)
        if (not missing and not absent) or rounds >= MAX_ROUNDS:
            return self._compose(request, parts), []
        calls = _retry_undated(request, asked)
        for part in missing:
            for query, mode in ((with_context(" ".join(key_words(part)), request.question), "hybrid"), (part, "keyword")):
                if query and (query.casefold(), mode) not in asked:
                    calls.append(ToolCall(f"offline-{rounds}-{len(calls)}", "search", {"query": query, "k": 5, "mode": mode}))
                    break
        names_query = " ".join(absent)
        if absent and (names_query.casefold(), "keyword") not in asked:
            calls.append(ToolCall(f"offline-{rounds}-{len(calls)}", "search", {"query": names_query, "k": 5, "mode": "keyword"}))
        if not calls:
            return self._compose(request, parts), []
        return "", calls

    def _compose(self, request: ModelRequest, parts: list[str]) -> str:
        chunks = _chunks_from(request)
        absent = absent_names(request.question, _facet_sources(request), chunks)
        if absent:
            listed = ", ".join(f'"{n}"' for n in absent)
            return f"{NOT_ENOUGH_EVIDENCE}: nothing in the documents you can see mentions {listed}, which the question asks about."
        return compose_answer(parts, chunks, question_context(request.question), _facet_sources(request))

    def _rewrite(self, request: ModelRequest) -> tuple[str, list[ToolCall]]:
        subs = plan(request.question, _prompt_sources(request))
        if len(subs) > 1 or subs[0].sources:
            queries: list = [{"query": sub.text, "sources": list(sub.sources),
                              **{k: v for k, v in (("published_after", sub.published_after),
                                                   ("published_before", sub.published_before)) if v}} for sub in subs]
            # One more search per fact the question describes, within the publishers it names.
            named = sorted({v for sub in subs for v in sub.sources})
            segments = fact_segments(request.question, _prompt_sources(request), min_terms=SEGMENT_MIN_TERMS)
            # And per fact within its own publisher's clause, dated like it ("the Polygon report on
            # November 9 about ..."), when every publisher named has a clause describing something.
            for sub in clause_segments(request.question, _prompt_sources(request), min_terms=SEGMENT_MIN_TERMS)[:MAX_SEGMENT_QUERIES]:
                queries.append({"query": sub.text, "sources": list(sub.sources),
                                **{k: v for k, v in (("published_after", sub.published_after),
                                                     ("published_before", sub.published_before)) if v}})
            if named and len(segments) > 1:
                queries += [{"query": seg, "sources": named} for seg in segments[:MAX_SEGMENT_QUERIES]]
            return json.dumps({"queries": queries}), []
        parts = split_question(request.question)
        queries = [with_context(p, request.question) for p in parts[:3]] if len(parts) > 1 else \
            [" ".join(key_words(request.question)) or request.question]
        return json.dumps({"queries": queries}), []

    def _judge(self, request: ModelRequest) -> tuple[str, list[ToolCall]]:
        parts = split_question(request.question)
        chunks = _chunks_from(request)
        missing = uncovered_parts(parts, chunks, _prompt_sources(request))
        why = "every part of the question is covered by retrieved text" if not missing else \
            f"no retrieved text covers: {'; '.join(missing)}"
        queries: list = [with_context(" ".join(key_words(p)), request.question) for p in missing]
        found = entity_bridge(request.question, chunks, _prompt_sources(request))
        if found and found.open_facts:
            why = f"no retrieved text states these facts about {found.names}: {'; '.join(found.open_facts)}"
            return json.dumps({"sufficient": False, "why": why, "missing": found.queries(found.open_facts)}), []
        if missing and found:
            queries = found.queries(found.facts)
        return json.dumps({"sufficient": not missing, "why": why, "missing": queries}), []

    def _answer(self, request: ModelRequest) -> tuple[str, list[ToolCall]]:
        return self._compose(request, split_question(request.question)), []


def planned_searches(question: str, parts: list[str], sources: list[str]) -> list[ToolCall]:
    """The first searches: one per source the question names (filtered to it and its date), or one per part."""
    subs = plan(question, sources)
    if len(subs) == 1 and not subs[0].sources:
        return [ToolCall(f"offline-1-{i}", "search", {"query": with_context(p, question), "k": 5}) for i, p in enumerate(parts)]
    k = min(10, max(5, math.ceil(CONTEXT_CHUNKS / len(subs))))
    calls = []
    for sub in subs:
        arguments: dict = {"query": sub.text, "k": k, "metadata": {"source": list(sub.sources)}}
        if sub.published_after:
            arguments["published_after"] = sub.published_after
        if sub.published_before:
            arguments["published_before"] = sub.published_before
        calls.append(ToolCall(f"offline-1-{len(calls)}", "search", arguments))
    return calls


def _retry_undated(request: ModelRequest, asked: set[tuple[str, str]]) -> list[ToolCall]:
    """A dated, source-filtered search that found nothing, again without the date (a time zone can move a day)."""
    results = {m.call_id: m.content for m in request.messages if isinstance(m, ToolResultMessage)}
    calls = []
    for m in request.messages:
        if not isinstance(m, AssistantMessage):
            continue
        for c in m.tool_calls:
            a = c.arguments
            dated = c.name == "search" and ("published_after" in a or "published_before" in a)
            if dated and not (results.get(c.id) or {}).get("results"):
                undated = {k: v for k, v in a.items() if k not in ("published_after", "published_before")}
                if not any(undated == d.arguments for m2 in request.messages if isinstance(m2, AssistantMessage)
                           for d in m2.tool_calls):
                    calls.append(ToolCall(f"{c.id}-undated", "search", undated))
    return calls


def _prompt_sources(request: ModelRequest) -> list[str]:
    """Source values listed in a rewrite prompt (agents.prompts.rewrite_prompt with facets)."""
    for m in request.messages:
        for line in (getattr(m, "text", "") or "").splitlines():
            if line.startswith(FACETS_LABEL):
                try:
                    sources = json.loads(line[len(FACETS_LABEL):]).get("sources")
                except (ValueError, AttributeError):
                    return []
                return [v for v in sources if isinstance(v, str)] if isinstance(sources, list) else []
    return []


def _facet_sources(request: ModelRequest) -> list[str]:
    for m in request.messages:
        if isinstance(m, ToolResultMessage) and m.name == "facets" and isinstance(m.content.get("sources"), dict):
            return list(m.content["sources"])
    return []


def absent_names(question: str, sources: list[str], chunks: list[SeenChunk]) -> list[str]:
    """Names the question asks about that no relevant retrieved chunk mentions.

    A chunk counts for a name when it also shares at least NAME_CONTEXT of the terms of the question
    part naming it: "Reuters" quoted in an unrelated article is no evidence about the Reuters report
    the question asks about. Names in statement sentences ("I'm extending a trip to Lisbon.") are
    context, not asked about."""
    sources = known_sources(chunks, sources)
    context = set(named_terms(question_context(question), sources))
    names = [n for n in named_terms(question, sources) if n not in context]
    if not names:
        return []
    usable = [(set(re.findall(r"[a-z0-9]+", f"{c.text} {c.about}".lower())), terms(f"{c.text} {c.about}"))
              for c in chunks if not c.flagged]
    parts = [(set(re.findall(r"[a-z0-9]+", p.lower())), part_terms(p, sources)) for p in split_question(question)]
    absent = []
    for name in names:
        asking = [pt for words, pt in parts if name in words] or [set()]
        if not any(name in words and any(coverage(pt, chunk_terms) >= NAME_CONTEXT for pt in asking)
                   for words, chunk_terms in usable):
            absent.append(name)
    return absent


def with_context(query: str, question: str, max_terms: int = 6) -> str:
    """A part's query plus the key terms of the question's context sentences ("I'm extending a trip...")."""
    have = terms(query)
    extra = [w for w in key_words(question_context(question)) if not terms(w) & have][:max_terms]
    return " ".join([query, *extra]) if extra else query


def _queries_asked(request: ModelRequest) -> set[tuple[str, str]]:
    return {(str(c.arguments.get("query", "")).casefold(), str(c.arguments.get("mode", "hybrid")))
            for m in request.messages if isinstance(m, AssistantMessage) for c in m.tool_calls if c.name == "search"}


def _chunks_from(request: ModelRequest) -> list[SeenChunk]:
    """Chunks in the code-built context and in every tool result so far, first sighting wins."""
    seen: dict[int, SeenChunk] = {}
    for c in request.context:
        seen.setdefault(c.chunk_id, SeenChunk(c.chunk_id, c.text, c.score, bool(c.flags), _about(c.title, c.metadata),
                                              _source(c.metadata)))
    for m in request.messages:
        if isinstance(m, ToolResultMessage):
            for item in m.content.get("results", []) or []:
                if isinstance(item, dict) and "chunk_id" in item:
                    seen.setdefault(int(item["chunk_id"]), SeenChunk(
                        int(item["chunk_id"]), _unwrap(str(item.get("text", ""))), float(item.get("score", 0.0)),
                        bool(item.get("flagged")), _about(str(item.get("document", "")), item.get("metadata")),
                        _source(item.get("metadata"))))
    return list(seen.values())


def _about(title: str, metadata) -> str:
    values = [str(v) for v in (metadata or {}).values() if isinstance(v, str)] if isinstance(metadata, dict) else []
    return " ".join([title, *values])


def _source(metadata) -> str:
    value = metadata.get("source") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) else ""


def known_sources(chunks: list[SeenChunk], facet_sources: list[str] = ()) -> list[str]:
    return list(dict.fromkeys([*facet_sources, *(c.source for c in chunks if c.source)]))


def part_terms(part: str, sources: list[str] = ()) -> set[str]:
    """A part's content terms: without the publishers and dates it names, which filters (not text) match."""
    return terms(without_facets(part, sources))


def part_coverage(part: str, chunks: list[SeenChunk], sources: list[str] = ()) -> float:
    pt = part_terms(part, sources)
    return max((coverage(pt, terms(f"{c.text} {c.about}")) for c in chunks if not c.flagged), default=0.0)


def uncovered_parts(parts: list[str], chunks: list[SeenChunk], sources: list[str] = ()) -> list[str]:
    sources = known_sources(chunks, sources)
    return [p for p in parts if part_coverage(p, chunks, sources) < PART_COVERED]


def compose_answer(parts: list[str], chunks: list[SeenChunk], context: str = "", sources: list[str] = ()) -> str:
    """Quote the best sentences per part with citations; name the parts nothing covers.

    Sentences are assigned greedily by score over all parts, so a sentence goes to the part it
    answers best and is quoted once. Sentences from chunks that match the whole question (its
    context sentences included) rank higher."""
    usable = [c for c in chunks if not c.flagged]
    sources = known_sources(chunks, sources)
    covered = [i for i, p in enumerate(parts) if part_coverage(p, usable, sources) >= PART_COVERED]
    candidates = []
    ct = terms(context)
    for i in covered:
        pt = part_terms(parts[i], sources)
        for c in usable:
            chunk_terms = terms(f"{c.text} {c.about}")
            chunk_bonus = 0.5 * coverage(pt | ct, chunk_terms)
            for s in sentences(c.text):
                st = terms(s)
                score = coverage(pt, st)
                if score >= SENTENCE_MIN and '"' not in s and not looks_like_instructions(s):
                    total = score + chunk_bonus + (0.25 * coverage(ct, st) if ct else 0.0)
                    candidates.append((round(total, 6), c.score, -len(s), -i, s, c.chunk_id))
    candidates.sort(reverse=True)
    best: dict[int, float] = {}
    for total, *_, neg_i, _s, _cid in candidates:
        best.setdefault(-neg_i, total)
    picked: dict[int, list[tuple[str, int]]] = {i: [] for i in covered}
    used: set[str] = set()
    for total, *_, neg_i, s, cid in candidates:
        if total < RELATIVE_MIN * best[-neg_i]:
            continue  # far weaker than the part's best sentence: noise, not evidence
        if s not in used and len(picked[-neg_i]) < SENTENCES_PER_PART:
            picked[-neg_i].append((s, cid))
            used.add(s)
    lines = []
    for i in covered:
        if picked[i]:
            quotes = "\n".join(f'   - "{s}" [c:{cid}]' for s, cid in picked[i])
            lines.append(f"{len(lines) + 1}. {parts[i].strip()}:\n{quotes}")
    missing = [p for i, p in enumerate(parts) if not picked.get(i)]
    if not lines:
        listed = "; ".join(f'"{p}"' for p in missing) or "the question"
        return f"{NOT_ENOUGH_EVIDENCE}: none of the documents you can see cover {listed}."
    text = "Extractive answer (offline mode: the sentences below are quoted from the sources, not generated).\n\n" + "\n".join(lines)
    if missing:
        text += "\n\nNot found in the documents you can see: " + "; ".join(f'"{p}"' for p in missing) + "."
    return text


_ASKS_FOR_ENTITY = re.compile(r"^\s*(?:who|whom|whose|which|what)\b", re.I)
BRIDGE_MIN_CHUNKS = 3  # chunks that must share a name (and at least 30 % of those seen) for it to be the entity


def bridge_names(question: str, chunks: list[SeenChunk], sources: list[str] = ()) -> list[str]:
    """The (at most two) names most retrieved chunks share that the question does not use: for a
    "who/which/what" question, the entity it asks about once the first searches found text on it."""
    asked = set(named_terms(question, sources)) | terms(question)
    counts: dict[str, int] = {}
    for c in chunks:
        for name in dict.fromkeys(named_terms(c.text, sources)):  # ties: the name seen first
            if name not in asked and not terms(name) & asked:
                counts[name] = counts.get(name, 0) + 1
    spelled: dict[str, str] = {}
    for c in chunks:
        for m in re.finditer(r"[A-Z][A-Za-z0-9]*", c.text):
            spelled.setdefault(m.group(0).lower(), m.group(0))
    need = max(BRIDGE_MIN_CHUNKS, math.ceil(0.3 * len(chunks)))
    return [spelled.get(n, n) for n in sorted(counts, key=lambda n: -counts[n])[:2] if counts[n] >= need]


@dataclass(frozen=True)
class EntityBridge:
    """What a question asking for an unnamed entity needs next: each fact it states, found in a
    text that also names the entity. A multi-hop question paraphrases its facts ("likened to a
    notable investor"); searched with the entity's name ("Bankman-Fried ... compared to Warren
    Buffett") they rank where the paraphrase alone did not (measured in docs/evaluation.md)."""

    names: str
    publishers: list[str]
    facts: list[str]
    open_facts: list[str]  # facts no retrieved chunk states (PART_COVERED) together with the names

    def queries(self, facts: list[str]) -> list[dict]:
        return [{"query": f"{self.names} {fact}", "sources": self.publishers} for fact in facts]


def entity_bridge(question: str, chunks: list[SeenChunk], sources: list[str]) -> EntityBridge | None:
    """None unless the question asks who/which/what, names publishers and the chunks share a name."""
    if not _ASKS_FOR_ENTITY.match(question):
        return None
    publishers = sorted({v for _s, _e, values in find_sources(question, source_aliases(sources)) for v in values})
    names = bridge_names(question, chunks, sources)
    if not publishers or not names:
        return None
    lowered = [n.lower() for n in names]
    facts = fact_segments(question, sources, min_terms=SEGMENT_MIN_TERMS)[:MAX_SEGMENT_QUERIES]
    open_facts = [f for f in facts if not any(any(n in c.text.lower() for n in lowered) and
                                              part_coverage(f, [c], sources) >= PART_COVERED for c in chunks)]
    return EntityBridge(" ".join(names), publishers, facts, open_facts)
