"""LLM providers, tools, the agentic loop, sufficiency check, citation verification, traces."""
