"""Built-in rules data: ``<name>.yaml`` files validated against ``schema/<name>.schema.json``."""
