"""tests/data/gpt2_test_ranks.py — a stand-in for GPT-2's ranks file, for tests that need one but
not GPT-2's actual merges (llm.c conversion, memory bounds): tiktoken's format ("base64 rank" lines),
50,256 distinct tokens — the 256 single bytes first, then `words` (each also with a leading space),
then filler byte pairs and triples — so Gpt2Bpe accepts it and encodes text made of `words` fast."""
import base64
import itertools


def write_test_ranks(path, words=()):
    tokens, seen = [], set()

    def add(b):
        if b not in seen and len(tokens) < 50256:
            seen.add(b)
            tokens.append(b)

    for b in range(256):
        add(bytes([b]))
    for w in words:
        add(w.encode())
        add((" " + w).encode())
    for n in (2, 3):
        for combo in itertools.product(range(32, 127), repeat=n):
            add(bytes(combo))
            if len(tokens) == 50256:
                break
    with open(path, "w") as f:
        for rank, t in enumerate(tokens):
            f.write(f"{base64.b64encode(t).decode()} {rank}\n")
