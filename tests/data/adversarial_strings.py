"""tests/data/adversarial_strings.py — the adversarial strings the tokenizer tests of the tiktoken
family encode with ours and with js-tiktoken: emoji and ZWJ sequences, combining marks, CJK and
other scripts, control bytes, every Unicode space on which PCRE2's \\s and JavaScript's differ, long
runs of spaces, newlines and digits, contractions, "<|endoftext|>" as text, 3,000 rare characters in
one piece, and 300 seeded random mixtures of them (test_gpt2_tokenizer.py, test_tiktoken_tokenizer.py)."""
import random


def adversarial_strings(extra_pieces=(), long_piece=3000):
    """The strings (326 + the extra pieces alone); `extra_pieces` also join the random mixtures.
    `long_piece`: characters of the longest pieces (rare CJK, runs of spaces and digits; the
    default gives GPT-2's test its 3,000 and 5,000): js-tiktoken merges a piece in quadratic time,
    3,000 rare CJK characters take it ~10 s."""
    spaces = "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2001\u2005\u200a\u2028\u2029\u202f\u205f\u3000\ufeff\u0085\u180e\u200b\x1c\x1f"
    pieces = [
        "Hello world", "I'm", "you're", "we've", "they'll", "she'd", "it's", "'s", "'S", "''s", "'ss", "don't", "O'Neil's",
        "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇫🇷", "🏳️‍🌈", "e\u0301", "a\u0300\u0301\u0302\u0303\u0304", "Z\u0351\u0364\u036b\u0300\u034d",
        "漢字", "日本語のテキスト", "한국어", "中文，标点。", "ภาษาไทย", "العربية", "עברית", "हिन्दी", "Ελληνικά", "русский",
        "abcабвαβγ", "١٢٣", "Ⅻ", "½²³", "１２３", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\x00\x01\x02\x07\x1b\x7f", "<|endoftext|>", "ﬁ", "İı",
        "12345678901234567890", " 42", "3.14159", "$100,000", "#hashtag", "@user", "C++", "a\\b", "::", "...", "?!", " ",
        "  ", "\n", "\n\n", "\r\n", "\t",
    ] + list(spaces) + list(extra_pieces)
    adversarial = [
        "", "Hello world", " ", "  leading", "trailing  ", "\n\n\nparagraphs\n\n\n", " " * (long_piece * 5 // 3),
        " " * long_piece + "word", "x" + " " * long_piece, "\n" * (long_piece // 3), " \t\n" * (long_piece // 6),
        "9" * long_piece, "1234567890" * (long_piece // 10), " 123 4567 89", "'s't're've'm'll'd",
        "It's the dog's bone; they'd've done it.", "\u0300" * 50 + "a", "😀" * 200, "漢" * 500,
        "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(long_piece)),       # rare CJK: one long piece, many merges
        "".join(chr(0x1F300 + (i * 31) % 700) for i in range(long_piece // 3)),         # emoji soup
        "x" + "".join(spaces) * 3 + "y", "".join(p + s for p in pieces for s in (" ", "")),
        "<|endoftext|>Start<|endoftext|>", "\x00" * 100, "".join(chr(c) for c in range(1, 128)),
    ]
    rng = random.Random(21)
    for _ in range(300):  # random mixtures of all the pieces above
        adversarial.append("".join(rng.choice(pieces + [" " * rng.randint(1, 40), "7" * rng.randint(1, 40)])
                                   for _ in range(rng.randint(1, 60))))
    return adversarial + [p for p in extra_pieces if p not in adversarial]
