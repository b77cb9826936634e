"""Helpers every stage uses: errors, guarded loading, atomic output, escaping, units, interval arithmetic, progress.

May import: nothing of advisor (only the standard library and third-party libraries).
"""
