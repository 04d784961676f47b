"""Sources: a corpus that follows where its documents live (docs/sources.md).

Modules: `models` (Source, SourceSync, SourceItem, SourceChange), `base` (what a connector yields),
`folder`, `s3`, `website` (one per kind), `rules` (department mapping), `crypto` (credentials at
rest), `services` (add, change, delete), `sync` (the incremental sync, its lock and its scheduler).
"""
