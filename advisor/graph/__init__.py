"""Model graphs: OM JSON, GE dumps and ONNX read into one networkx graph (see ``model.ModelGraph``)."""
