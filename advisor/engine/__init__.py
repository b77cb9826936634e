"""The engine: knowledge bases found through pluggy entry points, selected, run on the normalized model (built-ins in
process, third-party ones isolated in a child process), and msadvisor ecosystem knowledge bases adapted.

May import: the plugin API (:mod:`advisor.kb`, :mod:`advisor.hookspecs`, the model modules, :mod:`advisor.toolkit`),
:mod:`advisor.graph`, :mod:`advisor.config`, :mod:`advisor.common`. Never a knowledge base, the pipeline or a report.
"""
