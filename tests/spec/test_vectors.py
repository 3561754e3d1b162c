"""Golden vectors: real vLLM 0.33 bytes decode to their recorded values; Python-encoded bytes
re-encode byte-identically; vllm-rs encodings mean the same as the Python form."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import msgspec
import pytest

from ecp import spec
from ecp.spec import golden
from ecp.spec.frames import decode_frames, encode_decoded

REPO = Path(__file__).resolve().parents[2]
SHARED_DUMPS = REPO / ".." / "shared" / "protocol" / "vllm-0.33"
VECTORS = golden.load_vectors()


def _id(v: golden.Vector) -> str:
    return f"{v.source['file']}:{v.source['line']}"


def test_every_source_file_and_kind_is_covered():
    docs = golden.load_documents()
    assert sorted(docs) == sorted(n.replace(".txt", ".json") for n in (*golden.SOURCE_FILES, *golden.LOCAL_SOURCE_FILES))
    kinds = {v.kind for v in VECTORS}
    assert kinds >= {"add", "abort", "utility", "start_dp_wave", "outputs", "engine_dead", "hello", "ready",
                     "init", "ready_response"}
    producers = {v.producer for v in VECTORS}
    assert {"python-encoder", "python-frontend", "python-engine", "vllm-rs"} <= producers
    # every Python-produced vector is marked for byte-identical re-encoding, nothing else is
    assert all(v.reencode == (v.producer in golden.PYTHON_PRODUCERS) for v in VECTORS)
    assert sum(v.producer == "python-encoder" for v in VECTORS) >= 30


@pytest.mark.parametrize("vector", VECTORS, ids=_id)
def test_vector_decodes_to_its_value(vector):
    decoded = decode_frames(vector.frames, vector.direction)
    assert decoded.kind == vector.kind
    # JSON round trip so the comparison sees what the file holds (int keys become strings, …)
    assert msgspec.json.decode(msgspec.json.encode(decoded.value)) == vector.value
    # auto-detection finds the same kind
    assert decode_frames(vector.frames).kind == vector.kind


@pytest.mark.parametrize("vector", [v for v in VECTORS if v.reencode], ids=_id)
def test_python_vector_reencodes_byte_identically(vector):
    decoded = decode_frames(vector.frames, vector.direction)
    assert encode_decoded(decoded) == vector.frames


def test_encoder_dump_abort_immediately_request():
    (v,) = [v for v in VECTORS if v.name.startswith("3a.")]
    req = decode_frames(v.frames, "input").body
    assert req.abort_immediately is True and req.prompt_token_ids == [0]
    assert req.sampling_params.max_tokens == 1
    assert req.kv_transfer_params["do_remote_prefill"] is True


RS_ADD = [v for v in VECTORS if v.producer == "vllm-rs" and v.kind == "add"]


@pytest.mark.parametrize("vector", RS_ADD, ids=_id)
def test_vllm_rs_float32_fixmap_means_the_same_as_python_form(vector):
    payload = vector.frames[1]
    assert b"\x8e\xabtemperature\xca" in payload  # fixmap of 14 keys, float32 temperature
    rs = decode_frames(vector.frames, "input").body
    python_form = spec.encode_add(rs)
    sp_start = python_form[1].index(b"\xde\x00\x0e")  # the Python encoder writes map16 ...
    assert b"\xca" not in python_form[1][sp_start:sp_start + 40]  # ... and float64 only
    assert python_form[1] != payload
    again = spec.decode_input(python_form)
    assert again == rs
    sp = rs.sampling_params
    assert (sp.temperature, sp.top_p, sp.watermarking, sp.top_k) == (1.0, 1.0, True, 0)
    assert type(sp.temperature) is float


def test_vectors_match_the_shared_dumps_when_present():
    """Cross-check against ``../shared`` beside the repository (it exists in CI)."""
    docs = golden.load_documents()
    if not SHARED_DUMPS.is_dir():
        # Only a developer checkout without ../shared gets here; CI always has it.
        assert not os.environ.get("CI"), f"CI must provide {SHARED_DUMPS}"
        for doc in docs.values():
            assert len(doc["source_sha256"]) == 64 and doc["vectors"]
        return
    for name in golden.SOURCE_FILES:
        doc = docs[name.replace(".txt", ".json")]
        assert doc["source_sha256"] == hashlib.sha256((SHARED_DUMPS / name).read_bytes()).hexdigest()
    assert golden.dump_documents(golden.extract(SHARED_DUMPS)) == {
        n: (golden.VECTORS_DIR / n).read_text(encoding="utf-8") for n in docs}


def test_vectors_command(tmp_path, capsys):
    from ecp.spec.cli import main

    assert main(["vectors", "--src", str(tmp_path / "missing")]) == 2
    if SHARED_DUMPS.is_dir():  # CI: the checked-in vectors are exactly what the command extracts
        assert main(["vectors", "--src", str(SHARED_DUMPS), "--check"]) == 0
        assert main(["vectors", "--src", str(SHARED_DUMPS), "--out", str(tmp_path / "v")]) == 0
        (tmp_path / "v" / "encoder-dump.json").write_text("{}\n")
        assert main(["vectors", "--src", str(SHARED_DUMPS), "--out", str(tmp_path / "v"), "--check"]) == 1
    else:
        assert "no dump directory" in capsys.readouterr().err


def _tensor_vectors() -> list[golden.Vector]:
    return [v for v in VECTORS if v.source["file"] == "tensor-dump.txt"]


def test_tensor_vectors_hold_vllms_logprob_dtypes_inline_and_in_aux_frames():
    """vLLM 0.33's own encoder wrote these (spec/vectors/captures/make_tensor_dump.py); ecp.spec reads
    them: sampled logprobs as numpy dtypes (ids <i4, logprobs <f4, ranks <i8), prompt logprobs as torch
    names (int32, float32, int32) with P - 1 rows, buffers of 256 bytes or more in aux frames."""
    vectors = {v.name.split(" (")[0]: v for v in _tensor_vectors()}
    assert len(vectors) == 5
    small = decode_frames(vectors["outputs: 1 sampled position, logprobs=2"].frames, "output").body.outputs[0]
    ids, lps, ranks = small.new_logprobs.logprob_token_ids, small.new_logprobs.logprobs, \
        small.new_logprobs.sampled_token_ranks
    assert (ids.dtype, tuple(ids.shape), lps.dtype, tuple(lps.shape), ranks.dtype, tuple(ranks.shape)) == \
        ("<i4", (1, 3), "<f4", (1, 3), "<i8", (1,))
    # a row: the sampled token first, then the top-K; its rank is 1-based (1: the most likely token)
    assert struct.unpack("<3i", ids.data) == (100, 200, 201) and struct.unpack("<q", ranks.data) == (2,)
    big_v = vectors["outputs: 8 sampled positions, logprobs=20"]
    assert len(big_v.frames) == 3 and len(big_v.frames[1]) == 8 * 21 * 4  # ids and logprobs in aux frames
    big = decode_frames(big_v.frames, "output").body.outputs[0].new_logprobs
    assert tuple(big.logprob_token_ids.shape) == (8, 21) and big.logprob_token_ids.data == big_v.frames[1]
    prompt = decode_frames(vectors["outputs: prompt logprobs of a 4-token prompt, prompt_logprobs=1"].frames,
                           "output").body.outputs[0].new_prompt_logprobs_tensors
    assert (prompt.logprob_token_ids.dtype, tuple(prompt.logprob_token_ids.shape)) == ("int32", (3, 2))
    assert (prompt.logprobs.dtype, prompt.selected_token_ranks.dtype) == ("float32", "int32")
    long_v = vectors["outputs: prompt logprobs of a 40-token prompt, prompt_logprobs=2"]
    assert len(long_v.frames) == 3
    long = decode_frames(long_v.frames, "output").body.outputs[0].new_prompt_logprobs_tensors
    assert tuple(long.logprobs.shape) == (39, 3) and long.logprobs.data == long_v.frames[2]
    mm_v = vectors["ADD multimodal"]
    assert len(mm_v.frames) == 3 and len(mm_v.frames[2]) == 400
    mm = decode_frames(mm_v.frames, "input").body.mm_features[0]
    pixels = mm.data["pixel_values"]["data"]
    assert (pixels.dtype, tuple(pixels.shape), pixels.data) == ("uint8", (2, 200), mm_v.frames[2])


def test_vectors_check_needs_no_dumps(tmp_path, capsys):
    """``ecp vectors --check`` alone checks the shipped vectors against the codec (it works from a
    wheel, where no dump directory exists), and names a vector whose bytes no longer decode."""
    from ecp.spec.cli import main

    assert main(["vectors", "--check"]) == 0
    assert f"{len(VECTORS)} vectors" in capsys.readouterr().out
    assert main(["vectors"]) == 2 and "pass --src DIR" in capsys.readouterr().err
    docs = golden.load_documents()
    doc = docs["encoder-dump.json"]
    doc["vectors"][0]["frames"] = ["00"] + doc["vectors"][0]["frames"]  # a stray frame: not an ADD any more
    for name, text in golden.dump_documents(docs).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    assert main(["vectors", "--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"1 of {len(VECTORS)} vector(s)" in err and doc["vectors"][0]["name"] in err
