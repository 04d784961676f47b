"""Run traces: filled in by the agent loop."""
