"""Writes tensor-dump.txt: logprob tensors (inline and in aux frames) and a multimodal ADD with an aux
frame, encoded by vLLM's own MsgpackEncoder, in the format of vLLM 0.33's encoder dump.

Run with a vLLM 0.33 install (never in CI; the output is checked in):

    ~/.cache/vllm-peer-0.33/venv/bin/python spec/vectors/captures/make_tensor_dump.py > spec/vectors/captures/tensor-dump.txt

then ``ecp vectors --src ../shared/protocol/vllm-0.33`` extracts spec/vectors/tensor-dump.json from it.
The tensors' dtypes are the ones vLLM 0.33's model runner produces (spec/PROTOCOL.md, ECP-OUT-10):
sampled logprobs are numpy arrays (``LogprobsTensors.tolists``: ids int32, logprobs float32, ranks
int64), prompt logprobs torch tensors (``LogprobsTensors.empty_cpu``: int32, float32, int32)."""

import numpy as np
import torch
import msgspec

import vllm
from vllm.multimodal.inputs import (MultiModalBatchedField, MultiModalFeatureSpec, MultiModalFieldElem,
                                    MultiModalKwargsItem, PlaceholderRange)
from vllm.sampling_params import SamplingParams
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, EngineCoreRequestType
from vllm.v1 import outputs as vllm_outputs
from vllm.v1.outputs import LogprobsLists, LogprobsTensors
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder


def frames_of(title, frames):
    print(title)
    for i, f in enumerate(frames):
        b = bytes(f)
        print(f"  frame[{i}] {len(b)} bytes hex={b.hex()}")
    print()


def logprobs_lists(rows, k):
    """``rows`` sampled positions with the sampled token and the top ``k`` (vLLM: numpy after tolists)."""
    ids = np.array([[100 + r] + [200 + r * 10 + j for j in range(k)] for r in range(rows)], dtype=np.int32)
    lps = np.array([[-0.5 - r] + [-0.25 - r - j for j in range(k)] for r in range(rows)], dtype=np.float32)
    ranks = np.array([2 + r for r in range(rows)], dtype=np.int64)  # 1-based: 1 is the most likely token
    return LogprobsLists(ids, lps, ranks, None)


def prompt_logprobs(prompt_len, k):
    """P - 1 rows: row i scores prompt token i + 1 (the first prompt token has no logprob)."""
    vllm_outputs.PIN_MEMORY = False  # pinned memory needs an accelerator; the dtypes and shapes are the same
    t = LogprobsTensors.empty_cpu(prompt_len - 1, k + 1)
    for i in range(prompt_len - 1):
        t.logprob_token_ids[i] = torch.tensor([10 + i + 1] + [300 + j for j in range(k)], dtype=torch.int32)
        t.logprobs[i] = torch.tensor([-1.0 - i] + [-0.125 * (j + 1) for j in range(k)], dtype=torch.float32)
        t.selected_token_ranks[i] = 1 + i
    return t


def outputs(title, new_logprobs=None, prompt=None):
    out = EngineCoreOutput(request_id="cmpl-logprobs-0", new_token_ids=[100], new_logprobs=new_logprobs,
                           new_prompt_logprobs_tensors=prompt)
    msg = EngineCoreOutputs(engine_index=0, outputs=[out], timestamp=12.5)
    frames = MsgpackEncoder().encode(msg)
    back = MsgpackDecoder(EngineCoreOutputs).decode(frames)  # vLLM's own decoder reads what it wrote
    assert back.outputs[0].request_id == "cmpl-logprobs-0"
    frames_of(title, frames)


def main():
    print(f"# vLLM {vllm.__version__} tensor dump")
    print("# Produced with vLLM's own MsgpackEncoder (vllm.v1.serial_utils, msgspec "
          f"{msgspec.__version__}); example values are synthetic, dtypes and shapes are vLLM's.")
    print()
    print("5. engine->frontend EngineCoreOutputs with logprob tensors")
    print()
    outputs("outputs: 1 sampled position, logprobs=2 (LogprobsLists inline: ids <i4 [1,3], logprobs <f4 [1,3], "
            "ranks <i8 [1])", new_logprobs=logprobs_lists(1, 2))
    outputs("outputs: 8 sampled positions, logprobs=20 (ids and logprobs 8x21x4 = 672 bytes each: aux frames; "
            "ranks <i8 [8] inline)", new_logprobs=logprobs_lists(8, 20))
    outputs("outputs: prompt logprobs of a 4-token prompt, prompt_logprobs=1 (LogprobsTensors: int32 [3,2], "
            "float32 [3,2], int32 [3], inline)", prompt=prompt_logprobs(4, 1))
    outputs("outputs: prompt logprobs of a 40-token prompt, prompt_logprobs=2 (int32/float32 [39,3] = 468 bytes: "
            "aux frames; ranks int32 [39] inline)", prompt=prompt_logprobs(40, 2))
    print("4. frontend->engine multipart messages with tensors")
    print()
    pixels = torch.arange(400, dtype=torch.uint8).reshape(2, 200)
    grid = torch.tensor([[1, 2, 2]], dtype=torch.int64)
    item = MultiModalKwargsItem({
        "pixel_values": MultiModalFieldElem(data=pixels, field=MultiModalBatchedField()),
        "image_grid_thw": MultiModalFieldElem(data=grid, field=MultiModalBatchedField()),
    })
    feature = MultiModalFeatureSpec(data=item, modality="image", identifier="img-hash-0",
                                    mm_position=PlaceholderRange(offset=1, length=4), mm_hash="img-hash-0")
    req = EngineCoreRequest(request_id="cmpl-mm-0-a1b2c3d4", prompt_token_ids=[1, 151655, 151655, 151655, 151655, 2],
                            mm_features=[feature], sampling_params=SamplingParams(max_tokens=2),
                            pooling_params=None, arrival_time=1700000000.5, lora_request=None, cache_salt=None,
                            data_parallel_rank=None)
    frames = [EngineCoreRequestType.ADD.value, *MsgpackEncoder().encode(req)]
    back = MsgpackDecoder(EngineCoreRequest).decode(frames[1:])
    assert back.mm_features[0].data["pixel_values"].data.shape == (2, 200)
    frames_of("ADD multimodal (uint8 pixel_values [2,200] = 400 bytes: an aux frame; int64 image_grid_thw [1,3] "
              "inline)", frames)


def check(path):
    """Decode every vector of ``path`` (spec/vectors/tensor-dump.json) with vLLM's own MsgpackDecoder."""
    import json

    for v in json.load(open(path))["vectors"]:
        frames = [bytes.fromhex(f) for f in v["frames"]]
        if v["kind"] == "outputs":
            out = MsgpackDecoder(EngineCoreOutputs).decode(frames).outputs[0]
            tensors = [*(out.new_logprobs or ())[:3], *(out.new_prompt_logprobs_tensors or ())[:3]]
        else:
            data = MsgpackDecoder(EngineCoreRequest).decode(frames[1:]).mm_features[0].data
            tensors = [elem.data for elem in data.values()]
        print(v["name"][:60], [(str(t.dtype), tuple(t.shape)) for t in tensors])


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--check"]:  # ... make_tensor_dump.py --check spec/vectors/tensor-dump.json
        check(sys.argv[2])
    else:
        main()
