"""Bytes <-> records for the Tinker wire: the SDK's own protobuf classes, decoded with numpy.

forward_backward requests and the results of forward_backward and sample are protobuf
(`tinker.proto.tinker_public_pb2`); everything else is JSON. Nothing here touches torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import BadRequest

_DTYPES = {1: np.float32, 2: np.int64, 3: np.int32}  # proto DType -> numpy (bf16 is not accepted)
_FLOAT32, _INT64 = 1, 2
_STOP_REASONS = {"stop": 0, "length": 1}


def _pb():
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


@dataclass(frozen=True)
class WireDatum:
    """One decoded `Datum`: its input token ids and its loss inputs as numpy arrays."""

    input_tokens: tuple[int, ...]
    loss_fn_inputs: dict[str, np.ndarray]


@dataclass(frozen=True)
class ForwardBackwardCall:
    """A decoded `ForwardBackwardRequest`."""

    model_id: str
    seq_id: int
    loss_fn: str
    loss_fn_config: dict[str, float | str]
    forward_only: bool
    data: tuple[WireDatum, ...]


@dataclass(frozen=True)
class SampledSequence:
    tokens: tuple[int, ...]
    logprobs: tuple[float, ...]
    stop_reason: str


@dataclass(frozen=True)
class SampleOutput:
    sequences: tuple[SampledSequence, ...]
    prompt_logprobs: tuple[float, ...] | None = None
    """NaN where there is none (the first prompt token)."""


@dataclass(frozen=True)
class ForwardBackwardResult:
    """Per-datum output arrays (all 1-D, one per target token) and `name:reduction` metrics."""

    outputs: tuple[dict[str, np.ndarray], ...]
    metrics: dict[str, float] = field(default_factory=dict)


def _tensor(message, name: str) -> np.ndarray:
    dtype = _DTYPES.get(message.dtype)
    if dtype is None:
        raise BadRequest(f"loss_fn_inputs[{name!r}] has unsupported dtype {message.dtype}; send float32 or int64")
    shape = tuple(message.shape)
    if message.HasField("sparse_csr"):
        if len(shape) != 2:
            raise BadRequest(f"loss_fn_inputs[{name!r}] is sparse with shape {shape}; only 2-D CSR is defined")
        values = np.frombuffer(message.sparse_csr.values, dtype=dtype)
        crow = np.frombuffer(message.sparse_csr.crow_indices, dtype=np.int64)
        cols = np.frombuffer(message.sparse_csr.col_indices, dtype=np.int64)
        if len(crow) != shape[0] + 1 or len(cols) != len(values) or (len(cols) and cols.max() >= shape[1]):
            raise BadRequest(f"loss_fn_inputs[{name!r}] has inconsistent CSR indices for shape {shape}")
        dense = np.zeros(shape, dtype=dtype)
        for row in range(shape[0]):
            dense[row, cols[crow[row]:crow[row + 1]]] = values[crow[row]:crow[row + 1]]
        return dense
    array = np.frombuffer(message.dense, dtype=dtype)
    if shape:
        if int(np.prod(shape)) != array.size:
            raise BadRequest(f"loss_fn_inputs[{name!r}] holds {array.size} values but its shape is {list(shape)}")
        array = array.reshape(shape)
    return array.copy()


def decode_forward_backward(body: bytes) -> ForwardBackwardCall:
    """Parse a protobuf `ForwardBackwardRequest`; `BadRequest` if it is not one we can run."""
    from google.protobuf.message import DecodeError

    message = _pb().ForwardBackwardRequest()
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise BadRequest(f"the forward_backward body is not a ForwardBackwardRequest protobuf: {exc}") from exc
    if not message.model_id:
        raise BadRequest("the forward_backward request has no model_id")
    config: dict[str, float | str] = {key: float(value) for key, value in message.loss_fn_config.items()}
    for key, value in message.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else float(value.number)
    data = []
    for index, datum in enumerate(message.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            kind = chunk.WhichOneof("chunk")
            if kind != "encoded_text":
                raise BadRequest(f"datum {index} has a {kind} chunk; this server takes text token chunks only")
            tokens.extend(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32).tolist())
        inputs = {name: _tensor(tensor, name) for name, tensor in datum.loss_fn_inputs.items()}
        data.append(WireDatum(tuple(tokens), inputs))
    return ForwardBackwardCall(
        model_id=message.model_id, seq_id=message.seq_id, loss_fn=message.loss_fn,
        loss_fn_config=config, forward_only=message.forward_only, data=tuple(data),
    )


def encode_forward_backward_result(result: ForwardBackwardResult) -> bytes:
    """A protobuf `ForwardBackwardOutput`: one ArrayRecord batching every datum's outputs."""
    pb = _pb()
    message = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    for key, value in result.metrics.items():
        message.metrics[key] = float(value)
    record = message.loss_fn_outputs.add()
    record.type_tag = "ArrayRecord"
    record.num_datums = len(result.outputs)
    names = result.outputs[0].keys() if result.outputs else ()
    for name in names:
        arrays = [np.ascontiguousarray(output[name]) for output in result.outputs]
        is_float = arrays[0].dtype.kind == "f"
        arrays = [array.astype(np.float32 if is_float else np.int64) for array in arrays]
        offsets = np.cumsum([0] + [array.nbytes for array in arrays]).astype(np.int64)
        batched = record.fields[name]
        batched.data = b"".join(array.tobytes() for array in arrays)
        batched.offsets = offsets.tobytes()
        batched.dtype = _FLOAT32 if is_float else _INT64
    return message.SerializeToString()


def encode_sample_output(output: SampleOutput) -> bytes:
    """A protobuf `SampleResponse`."""
    pb = _pb()
    message = pb.SampleResponse()
    for sequence in output.sequences:
        message.sequences.add(
            stop_reason=_STOP_REASONS[sequence.stop_reason],
            tokens=np.asarray(sequence.tokens, dtype=np.int32).tobytes(),
            logprobs=np.asarray(sequence.logprobs, dtype=np.float32).tobytes(),
        )
    if output.prompt_logprobs is not None:
        message.prompt_logprobs = np.asarray(output.prompt_logprobs, dtype=np.float32).tobytes()
    return message.SerializeToString()
