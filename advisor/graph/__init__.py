"""Model graphs: OM JSON, GE dumps and ONNX read into one networkx graph (see ``model_graph.ModelGraph``).

- ``load.load_graph(path)`` reads any supported file (``load.find_graph_in_profile(dir)`` finds one in a
  profile directory); readers: ``om_json``, ``ge_text`` (ge_proto_*.txt), ``ge_onnx`` (ge_onnx_*.pbtxt),
  ``onnx_model`` (.onnx / ONNX JSON), all assembled by ``build``.
- ``join.join_profile(graph, ops)`` maps profile rows to graph nodes by name.
- ``summary.summarize(graph)`` counts what ``advisor graph`` shows.
- ``dtypes`` holds the DataType numberings, ``engines`` the kernel-lib -> engine mapping.

May import :mod:`advisor.common`, :mod:`advisor.config` and the model (:mod:`advisor.model`); never ingest,
the engine or a later stage.
"""
