"""Model serving: ONNX export, the Triton model repository, and a smoke client."""
