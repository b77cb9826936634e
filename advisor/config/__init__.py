"""Configuration as data: the rules files (built-in ``rules/``, plugins', the user's overrides and waivers) and the CI
gate's settings, loaded and validated before anything is read.

May import: :mod:`advisor.common`.
"""
