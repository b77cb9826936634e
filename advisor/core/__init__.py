"""What builds the normalized model's derived views: which steps are analyzed (steady state), what the device's free
time is spent on, and what the kernels' own counters say about the chip.

The model's public classes are the plugin API and live at the top level (:mod:`advisor.model`,
:mod:`advisor.timemodel`, :mod:`advisor.findings`, :mod:`advisor.platform`). May import: :mod:`advisor.common`,
:mod:`advisor.config` and those modules.
"""
