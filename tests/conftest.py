"""Shared test setup."""
