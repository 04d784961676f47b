"""Tenants, departments, memberships, API keys, and the scope every query runs under."""
