"""The protobuf half of the Tinker wire format, as the `tinker` 0.38 SDK speaks it.

The SDK sends `forward_backward` requests as protobuf (`tinker.proto.tinker_public_pb2`) and asks
for `ForwardBackwardOutput` and `SampleResponse` results as protobuf; everything else is JSON of
the SDK's pydantic types. The SDK ships the other direction of each conversion
(`tinker.proto.request_conv`, `tinker.proto.response_conv`); these are their inverses, written
against the SDK's own message classes, so a field added to the schema fails loudly here.
"""

import dataclasses
from collections.abc import Iterable

import numpy as np
from tinker import types
from tinker.proto import tinker_public_pb2 as pb
from tinker.types.topk_logprobs import TopkLogprobs

from local_tinker.errors import DataFormatError

PROTO_CONTENT_TYPE = "application/x-protobuf"

_DTYPES: dict[int, tuple[types.TensorDtype, np.dtype]] = {
    pb.DTYPE_FLOAT32: ("float32", np.dtype(np.float32)),
    pb.DTYPE_INT64: ("int64", np.dtype(np.int64)),
    pb.DTYPE_INT32: ("int64", np.dtype(np.int32)),
}
_PROTO_DTYPE: dict[str, "pb.DType.ValueType"] = {"float32": pb.DTYPE_FLOAT32, "int64": pb.DTYPE_INT64}
_STOP_REASONS = {"stop": pb.STOP_REASON_STOP, "length": pb.STOP_REASON_LENGTH}


def decode_forward_backward(body: bytes) -> tuple[types.ForwardBackwardRequest, bool]:
    """A protobuf `forward_backward` body as the SDK's request type, and its `forward_only` flag.

    Raises:
        DataFormatError: the body is not a valid message, or holds chunk kinds or dtypes the local
            engine does not take (images, audio, bfloat16).
    """
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError or RuntimeWarning subclasses
        raise DataFormatError(f"forward_backward body is not a ForwardBackwardRequest protobuf: {exc}") from exc
    config: dict[str, float | str] = {key: value for key, value in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    data = [_datum(i, d) for i, d in enumerate(msg.data)]
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn=msg.loss_fn, loss_fn_config=config or None  # type: ignore[arg-type]
        ),
        model_id=msg.model_id,
        seq_id=msg.seq_id,
    )
    return request, msg.forward_only


def _datum(index: int, msg: pb.Datum) -> types.Datum:
    chunks: list[types.ModelInputChunk] = []
    for chunk in msg.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            raise DataFormatError(f"datum {index}: the local engine accepts text tokens only, got a {kind} chunk.")
        chunks.append(types.EncodedTextChunk(tokens=np.frombuffer(chunk.encoded_text.tokens, np.int32).tolist()))
    inputs = {name: _tensor(index, name, tensor) for name, tensor in msg.loss_fn_inputs.items()}
    datum = types.Datum(model_input=types.ModelInput(chunks=chunks), loss_fn_inputs=inputs)
    if not msg.model_input_spans and not msg.loss_fn_input_spans:
        return datum
    spans = [_spans(index, name, getattr(msg, name)) for name in ("model_input_spans", "loss_fn_input_spans")]
    return dataclasses.replace(datum, model_input_spans=spans[0], loss_fn_input_spans=spans[1])


def _spans(index: int, name: str, messages: Iterable[pb.ProvenanceSpan]) -> types.ProvenanceSpans:
    """A datum's provenance runs (`Datum.with_provenance`), checked as the SDK's own types check them."""
    spans: types.ProvenanceSpans = []
    for position, msg in enumerate(messages):
        kind = msg.WhichOneof("span")
        span_type = types.PromptProvenanceSpan if kind == "prompt_tokens" else types.SampledProvenanceSpan
        fields = msg.prompt_tokens if kind == "prompt_tokens" else msg.sampled_tokens
        if kind is None:
            raise DataFormatError(f"datum {index}: {name}[{position}] is neither a prompt nor a sampled span.")
        try:
            spans.append(span_type(sequence_id=fields.sequence_id, offset=fields.offset, length=fields.length))
        except ValueError as exc:
            raise DataFormatError(f"datum {index}: {name}[{position}]: {exc}") from exc
    return spans


def _tensor(index: int, name: str, msg: pb.Tensor) -> types.TensorData:
    if msg.dtype not in _DTYPES:
        raise DataFormatError(f"datum {index}: loss_fn_inputs[{name!r}] has unsupported dtype {msg.dtype}.")
    dtype, np_dtype = _DTYPES[msg.dtype]
    if msg.WhichOneof("encoding") != "dense" and msg.HasField("sparse_csr"):
        raise DataFormatError(f"datum {index}: loss_fn_inputs[{name!r}] is sparse; send dense tensors.")
    if len(msg.dense) % np_dtype.itemsize:
        raise DataFormatError(f"datum {index}: loss_fn_inputs[{name!r}] has a truncated buffer.")
    values = np.frombuffer(msg.dense, np_dtype).astype(np.float32 if dtype == "float32" else np.int64)
    shape = list(msg.shape) or None
    if shape is not None and int(np.prod(shape)) != values.size:
        raise DataFormatError(f"datum {index}: loss_fn_inputs[{name!r}] shape {shape} != {values.size} values.")
    return types.TensorData(data=values.tolist(), dtype=dtype, shape=shape)


def encode_forward_backward_output(output: types.ForwardBackwardOutput) -> bytes:
    """`ForwardBackwardOutput` as the protobuf the SDK's `response_conv` reads (one ArrayRecord)."""
    msg = pb.ForwardBackwardOutput(loss_fn_output_type=output.loss_fn_output_type,
                                   metrics={k: float(v) for k, v in output.metrics.items()})
    if output.loss_fn_outputs:
        record = msg.loss_fn_outputs.add(num_datums=len(output.loss_fn_outputs))
        for name in output.loss_fn_outputs[0]:
            arrays: list[np.ndarray] = [np.asarray(out[name].data, dtype=_np_dtype(out[name].dtype)) for out in output.loss_fn_outputs]
            offsets = np.cumsum([0] + [a.nbytes for a in arrays]).astype(np.int64)
            record.fields[name].CopyFrom(pb.BatchedTensor(
                data=b"".join(a.tobytes() for a in arrays), offsets=offsets.tobytes(),
                dtype=_PROTO_DTYPE[output.loss_fn_outputs[0][name].dtype]))
    return msg.SerializeToString()


def _np_dtype(dtype: str) -> type:
    return np.float32 if dtype == "float32" else np.int64


def encode_sample_response(response: types.SampleResponse) -> bytes:
    """`SampleResponse` as the protobuf the SDK's `response_conv` reads."""
    msg = pb.SampleResponse(prompt_cache_hit_tokens=response.prompt_cache_hit_tokens or 0)
    for seq in response.sequences:
        out = msg.sequences.add(stop_reason=_STOP_REASONS[seq.stop_reason],
                                tokens=np.asarray(seq.tokens, np.int32).tobytes())
        if seq.logprobs is not None:
            out.logprobs = np.asarray(seq.logprobs, np.float32).tobytes()
        if seq.topk_logprobs_np is not None:
            out.topk_sampled_logprobs.CopyFrom(_topk(seq.topk_logprobs_np))
    if response.prompt_logprobs_np is not None:  # NaN where there is none (the first token)
        msg.prompt_logprobs = np.asarray(response.prompt_logprobs_np, np.float32).tobytes()
    if response.topk_prompt_logprobs_np is not None:
        msg.topk_prompt_logprobs.CopyFrom(_topk(response.topk_prompt_logprobs_np))
    if response.target_prompt_logprobs is not None:
        msg.target_prompt_logprobs.CopyFrom(_tensor_message(response.target_prompt_logprobs))
    if response.prompt_alt_tokens is not None:
        alt = response.prompt_alt_tokens
        msg.prompt_alt_tokens.CopyFrom(pb.PromptAltTokens(tokens=_tensor_message(alt.tokens),
                                                          logprobs=_tensor_message(alt.logprobs)))
    return msg.SerializeToString()


def _tensor_message(tensor: types.TensorData) -> pb.Tensor:
    """A `TensorData` as a proto `Tensor`, sparse CSR kept sparse (what `response_conv` decodes)."""
    np_dtype = _np_dtype(tensor.dtype)
    if tensor.sparse_crow_indices is None:
        values: np.ndarray = np.asarray(tensor.to_numpy(), np_dtype)
        return pb.Tensor(dtype=_PROTO_DTYPE[tensor.dtype], shape=tensor.shape or list(values.shape),
                         dense=values.tobytes())
    csr = pb.SparseCsr(values=np.asarray(tensor.data, np_dtype).tobytes(),
                       crow_indices=np.asarray(tensor.sparse_crow_indices, np.int64).tobytes(),
                       col_indices=np.asarray(tensor.sparse_col_indices, np.int64).tobytes())
    return pb.Tensor(dtype=_PROTO_DTYPE[tensor.dtype], shape=tensor.shape, sparse_csr=csr)


def _topk(topk: TopkLogprobs) -> pb.TopkLogprobs:
    ids, logprobs = np.asarray(topk.token_ids, np.int32), np.asarray(topk.logprobs, np.float32)
    n, k = ids.shape
    return pb.TopkLogprobs(token_ids=ids.tobytes(), logprobs=logprobs.tobytes(), k=k, length=n)
