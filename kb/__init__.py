"""Knowledge base: corpora, documents, chunks, ingestion and retrieval. `kb.embedded` stands apart from
that domain: the embedded PostgreSQL and Redis used when none is configured."""
