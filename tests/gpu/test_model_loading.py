"""Model specs, HF-style checkpoints and deterministic random weights."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from ecp.reference.engine.executor import Executor
from ecp.reference.engine.torch_executor import ModelConfigError, TorchExecutor, parse_model_spec
from ecp.reference.engine.torch_executor.config import PRESETS, config_from_hf
from ecp.reference.engine.torch_executor.model import CausalLM
from ecp.reference.engine.torch_executor.weights import save_checkpoint

from .conftest import DEVICE, dense_logits

TOKENS = [5, 9, 14, 3, 77, 100, 42]


def test_executor_satisfies_the_engine_interface():
    ex = TorchExecutor("random:tiny", DEVICE, 0, None)
    assert isinstance(ex, Executor)
    assert ex.dtype == ("float32" if DEVICE == "cpu" else ex.dtype)
    assert (ex.vocab_size, ex.eos_token_id) == (512, 2)
    if DEVICE == "cpu":
        assert ex.available_blocks(16, 0.9) is None


def test_random_weights_depend_only_on_the_model_spec():
    a = TorchExecutor("random:tiny", DEVICE, seed=1, dtype="float32")
    b = TorchExecutor("random:tiny", DEVICE, seed=2, dtype="float32")
    c = TorchExecutor("random:tiny:7", DEVICE, seed=1, dtype="float32")
    torch.testing.assert_close(dense_logits(a, TOKENS), dense_logits(b, TOKENS), atol=0, rtol=0)
    assert not torch.allclose(dense_logits(a, TOKENS), dense_logits(c, TOKENS))


@pytest.mark.parametrize("shards", [1, 3])
def test_hf_checkpoint_round_trip(tmp_path, shards):
    # untied embeddings, no qkv bias: the Llama layout (tiny itself is Qwen2-style)
    cfg = replace(PRESETS["tiny"], tie_word_embeddings=False, qkv_bias=False, random_seed=None, name="llama")
    source = CausalLM(cfg)
    source.init_random_(11)
    save_checkpoint(source, tmp_path, shards=shards)
    assert len(list(tmp_path.glob("*.safetensors"))) == shards
    ex = TorchExecutor(str(tmp_path), DEVICE, 0, "float32")
    assert ex.model.lm_head is not None and not ex.config.qkv_bias
    expected = source.compute_logits(source.forward_dense(torch.tensor(TOKENS)))
    torch.testing.assert_close(dense_logits(ex, TOKENS).cpu(), expected, atol=1e-5, rtol=1e-5)


def test_checkpoint_missing_a_tensor_is_rejected(tmp_path):
    from safetensors.torch import load_file, save_file

    source = CausalLM(replace(PRESETS["tiny"], random_seed=None))
    source.init_random_(0)
    save_checkpoint(source, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ModelConfigError, match="lacks 1 tensors"):
        TorchExecutor(str(tmp_path), DEVICE, 0, "float32")


def test_hf_config_fields():
    cfg = config_from_hf({
        "model_type": "qwen2", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 96,
        "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 2,
        "eos_token_id": [7, 8], "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    })
    assert (cfg.head_dim, cfg.qkv_bias, cfg.eos_token_id, cfg.tie_word_embeddings) == (8, True, 7, True)
    assert CausalLM(cfg).model.rotary_emb.inv_freq.shape == (4,)
    with pytest.raises(ModelConfigError, match="model_type"):
        config_from_hf({"model_type": "gpt2"})
    with pytest.raises(ModelConfigError, match="hidden_act"):
        config_from_hf({"model_type": "llama", "hidden_act": "gelu"})


def test_bad_model_specs(tmp_path):
    for spec in ("random:huge", "random:tiny:x", str(tmp_path)):
        with pytest.raises(ModelConfigError):
            parse_model_spec(spec)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelConfigError, match="lacks vocab_size"):
        parse_model_spec(str(tmp_path))


def test_device_and_dtype_resolution():
    from ecp.reference.engine.torch_executor import resolve_device, resolve_dtype

    has_cuda = torch.cuda.is_available()
    assert resolve_device("auto").type == ("cuda" if has_cuda else "cpu")
    assert resolve_device("cpu").type == "cpu"
    if not has_cuda:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="cpu, cuda or auto"):
        resolve_device("mps")
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("int8", torch.device("cpu"))
