"""A minimal GPT-2-style byte-level BPE tokenizer built from a GGUF file's vocabulary.

Enough to turn a prompt into ids and ids back into text for the reference transformer's
correctness check, in the spirit of tiktoken's educational implementation: slow, short and
easy to check against a production tokenizer (the tests do, against ``transformers``).

The GGUF metadata holds the pieces: ``tokenizer.ggml.tokens`` (id → token string in
GPT-2's byte-to-unicode alphabet), ``tokenizer.ggml.merges`` ("a b", by rank) and
``tokenizer.ggml.token_type`` (3 marks control tokens such as <|im_start|>).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# GPT-2's pre-tokenizer, \p{L} and \p{N} written with Python's re classes: letters are word
# characters that are neither digits nor "_"; "other" is neither space nor letter nor digit.
_LETTERS, _DIGITS, _OTHER = r"[^\W\d_]", r"\d", r"(?:[^\s\w]|_)"
GPT2_SPLIT = re.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?{_LETTERS}+| ?{_DIGITS}+| ?{_OTHER}+|\s+(?!\S)|\s+")
# SmolLM, StarCoder and others first isolate every digit (llama.cpp's "smollm" pre-tokenizer;
# the Hugging Face tokenizer's Digits(individual_digits=True) step).
DIGIT_FIRST_PRE_TOKENIZERS = ("smollm", "starcoder", "refact", "falcon")
CONTROL_TOKEN_TYPES = (3, 4)  # llama.cpp: CONTROL and USER_DEFINED


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (openai/gpt-2 encoder.py)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


class BPETokenizer:
    def __init__(self, tokens: list[str], merges: list[str], token_types: list[int],
                 *, digits_first: bool = True) -> None:
        self.tokens = tokens
        self.ids = {token: i for i, token in enumerate(tokens)}
        self.ranks = {tuple(m.split(" ", 1)): rank for rank, m in enumerate(merges)}
        self.special = {tokens[i]: i for i, kind in enumerate(token_types)
                        if kind in CONTROL_TOKEN_TYPES}
        self.digits_first = digits_first
        pattern = "|".join(re.escape(t) for t in sorted(self.special, key=len, reverse=True))
        self._special_split = re.compile(f"({pattern})") if pattern else None
        self._byte_char = bytes_to_unicode()
        self._char_byte = {c: b for b, c in self._byte_char.items()}

    @classmethod
    def from_gguf(cls, reader: Any) -> BPETokenizer:
        from phasewise.measure.gguf_file import metadata

        model = metadata(reader, "tokenizer.ggml.model")
        if model != "gpt2":
            from phasewise.errors import InputError

            raise InputError(f"the GGUF tokenizer is '{model}'; only byte-level BPE ('gpt2') "
                             "is implemented here.")
        return cls(list(metadata(reader, "tokenizer.ggml.tokens")),
                   list(metadata(reader, "tokenizer.ggml.merges")),
                   [int(t) for t in metadata(reader, "tokenizer.ggml.token_type")],
                   digits_first=(metadata(reader, "tokenizer.ggml.pre", "")
                                 in DIGIT_FIRST_PRE_TOKENIZERS))

    def encode(self, text: str) -> list[int]:
        """Control tokens written in the text become their ids; the rest is pre-split, mapped
        to the byte alphabet and merged pair by pair in rank order."""
        pieces = self._special_split.split(text) if self._special_split else [text]
        ids: list[int] = []
        for piece in pieces:
            if piece in self.special:
                ids.append(self.special[piece])
                continue
            for word in self._pre_split(piece):
                ids += [self.ids[t] for t in self._merge(word)]
        return ids

    def decode(self, ids: list[int]) -> str:
        out, pending = [], bytearray()
        for i in ids:
            token = self.tokens[i]
            if token in self.special:
                out.append(pending.decode("utf-8", errors="replace") + token)
                pending = bytearray()
            else:
                pending += bytes(self._char_byte[c] for c in token)
        return "".join(out) + pending.decode("utf-8", errors="replace")

    def _pre_split(self, text: str) -> list[str]:
        chunks = re.split(r"(\d)", text) if self.digits_first else [text]
        words = []
        for chunk in chunks:
            words += GPT2_SPLIT.findall(chunk) if chunk else []
        return ["".join(self._byte_char[b] for b in w.encode("utf-8")) for w in words]

    def _merge(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get(pair, len(self.ranks)), i)
                     for i, pair in enumerate(zip(parts, parts[1:], strict=False))]
            rank, i = min(pairs)
            if rank == len(self.ranks):
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts


def chatml_prompt(user_message: str, *, system: str | None = None) -> str:
    """A one-turn ChatML prompt (the template of SmolLM2's GGUF ``tokenizer.chat_template``),
    ending where the assistant's answer begins."""
    system = system or "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user_message}"
            "<|im_end|>\n<|im_start|>assistant\n")
