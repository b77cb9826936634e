"""Built-in knowledge bases: one module per KB, each registered as a plugin through the ``advisor.knowledge_bases`` entry-point group."""
