"""An MLServer runtime for the exported GPT: ONNX Runtime on the CPU, answering with the next
token's top k, as the served model does. Loaded by MLServer from the benchmark's model
folder (bench/serve_server.py); runs in MLServer's own virtualenv, so it imports nothing of
the project."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse

OUTPUTS = ("top_k_ids", "top_k_logprobs")


class OnnxNextToken(MLModel):
    async def load(self) -> bool:
        extra = self.settings.parameters.extra or {}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(extra.get("threads", 1))
        self._session = ort.InferenceSession(str(self.settings.parameters.uri), options,
                                             providers=["CPUExecutionProvider"])
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        ids = NumpyCodec.decode_input(payload.inputs[0]).astype(np.int64, copy=False)
        answers = self._session.run(list(OUTPUTS), {"input_ids": ids})
        return InferenceResponse(model_name=self.name,
                                 outputs=[NumpyCodec.encode_output(name, value) for name, value in zip(OUTPUTS, answers)])
