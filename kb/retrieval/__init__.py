"""The one scoped entry point for searching chunks.

Contract (other modules rely on it): `search(scope, query, k=..., mode=..., filters=...)` returns a
`SearchResult`. The scope comes from the authenticated caller; `filters` can only narrow it. A filter
naming something outside the scope yields no hits (never an error that reveals existence).

How a search runs (docs/retrieval.md has the measurements behind each choice):

1. Resolve the effective filter under RLS for the scope's tenant (set by every statement script:
   see TenantStatements), in one round trip: visible corpora (tenant, departments, requested corpus ids),
   the documents matching document-level filters (ids, metadata, Document.dated_at) and the query's
   lexemes under each text search language of those corpora (Corpus.language).
   The scope's size per embedding model comes from the stored chunk counts of those
   corpora/documents, never from a count(*) over chunks.
2. Vector: the query is embedded once per model key in scope; each model is searched on its own
   rows only. Small scopes are scanned exactly (pgvector filters after the index scan, so a
   selective filter would starve it); large ones use the cheapest covering HNSW index (the
   model's, the tenant's own, or one arm per department on the departments' own indexes:
   kb.vector_index scope indexes) with iterative relaxed-order scanning, re-sorted, and fall back
   to exact when short of k.
3. Keyword (per language of the corpora in scope, merged by score when there are several):
   BM25 computed in SQL over the GIN candidates of an OR tsquery of the rarest lexemes
   (at most 10% of the chunks and 1,000 by document frequency), with per-corpus document
   frequencies from ts_stat (cached) and per-term frequencies via ts_rank_cd. The GIN index is
   usable under RLS only because migration kb 0003 marks ts_match_vq LEAKPROOF.
4. Hybrid: weighted reciprocal rank fusion of the two lists. Optional MMR diversification.
5. Optional sentence re-rank (`rerank=True`, corpora with sentence vectors): the candidates' rank
   fused with their ranks by best-matching sentences, by vector and by the query terms one
   sentence holds (kb.sentences), one more round trip.

Raw SQL lives in this package only; the tenant id in every statement is a parameter taken from the scope.

The package is a pipeline of stages, each a module with one public entry, called in that order by
`search` (kb.retrieval.pipeline) and never calling back into a stage before it:

- `pipeline`: `search`; the SearchPlan, the statement runner (TenantStatements) and the corpus rows
  remembered per scope, which the stages use while it runs (step 1's round trip, every later one);
- `prepare`: query preparation, `prepare` (step 1, and the query's embedding per model);
- `retrieve`: retrieval, `retrieve` (steps 2-4: the keyword side and fusion here, the vector side in
  `vector`; BM25 on a side connection for hybrid searches);
- `postprocess`: post-processing, `postprocess` (the winners' rows, step 5, MMR);
- shared without calls: `query` (filters, hits, results, a hit's columns) and `tunables` (read once
  per search by `pipeline`).

Beside the search, one count over the same scope: `names.documents_naming` (the share of the
documents a caller sees that name a name; counts only, no text leaves it).
"""

from kb.retrieval.names import documents_naming
from kb.retrieval.pipeline import search
from kb.retrieval.query import MODES, Mode, SearchFilters, SearchHit, SearchResult, search_mode
from kb.retrieval.tunables import DEFAULTS, MAX_K
from kb.retrieval.vector import HnswIndex, VectorPlan, choose_vector_plan, use_hnsw

__all__ = ["DEFAULTS", "MAX_K", "MODES", "HnswIndex", "Mode", "SearchFilters", "SearchHit", "SearchResult", "VectorPlan",
           "choose_vector_plan", "documents_naming", "search", "search_mode", "use_hnsw"]
