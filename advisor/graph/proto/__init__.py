"""Python classes generated from GE's protos (see README.md); regenerate, never edit by hand."""
