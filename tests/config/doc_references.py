#!/usr/bin/env python3
"""tests/config/doc_references.py — every reference to a section of the project's docs names one
that exists, and every relative Markdown link reaches a file (and its #anchor a heading). Code, scripts and docs cite sections as `docs/checkpoints.md "Checkpoints"` or
`[checkpoints.md](checkpoints.md) "Checkpoints"` (a citation may wrap across comment lines); a section is
a Markdown heading or a bold paragraph lead (`**Speed.**`) of that file, and the cited name must be
one of them or the start of one. Files: what git tracks under the source tree (argument 1, default
the repository root), third_party and binary data left out. Links: `[text](path#anchor)` in the
tracked .md files, path relative to the file, anchor GitHub's slug of a heading (lower case,
punctuation dropped, spaces as hyphens). Exit 1 listing each dangling reference (file, doc,
section or link), 0 when none dangles.
"""
import os
import re
import subprocess
import sys

# docs/x.md "Section", x.md "Section" or [x.md](...) "Section"; the quote may open the next comment
# line (//, /// or #) or be escaped (a C++ string literal)
CITATION = re.compile(r'(?:docs/)?([a-z_]+\.md)(?:\]\([^)]*\))?\s+(?:(?:///?|#)\s*)?\\?"([^"\n\\]+(?:\n[^"\n\\]*){0,2})\\?"')
# a line break inside a citation, with the comment marker of the next line (//, /// or #)
WRAP = re.compile(r'\s*\n\s*(?:///?|#)?\s*')


def sections(path):
    """Headings and bold paragraph leads of a Markdown file."""
    found = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#+\s+(.*)", line)
            if m:
                found.add(m.group(1).strip())
            for lead in re.findall(r"\*\*([^*]+?)\*\*", line):
                found.add(lead.strip().rstrip(".:"))
    return found


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def dangling_links(root, rel, text, anchors):
    """The relative links of Markdown file rel (text) whose file or #anchor does not exist; anchors:
    a cache, path -> the slugs of its headings."""
    bad = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        path, _, anchor = link.partition("#")
        target = os.path.normpath(os.path.join(root, os.path.dirname(rel), path)) if path else os.path.join(root, rel)
        if not os.path.exists(target):
            bad.append(f"{rel}: link {link}")
        elif anchor and target.endswith(".md"):
            if target not in anchors:
                with open(target, encoding="utf-8") as f:
                    anchors[target] = {slug(line.lstrip("#")) for line in f if line.startswith("#")}
            if anchor not in anchors[target]:
                bad.append(f"{rel}: link {link}")
    return bad


def dangling(root):
    files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    cache, anchors, bad = {}, {}, []
    for rel in files:
        if rel.startswith("third_party/") or not rel.endswith((".md", ".hpp", ".cpp", ".cu", ".cuh", ".h", ".sh",
                                                                 ".py", ".toml", ".txt", ".cmake")):
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        if rel.endswith(".md"):
            bad += dangling_links(root, rel, text, anchors)
        for m in CITATION.finditer(text):
            doc, name = m.group(1), WRAP.sub(" ", m.group(2)).strip()
            path = next((p for p in (os.path.join(root, "docs", doc), os.path.join(root, doc)) if os.path.exists(p)),
                        None)
            if path is None:
                continue  # not one of ours (e.g. another project's README)
            if path not in cache:
                cache[path] = sections(path)
            if not any(s == name or s.startswith(name) for s in cache[path]):
                bad.append(f'{rel}: {doc} "{name}"')
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    bad = dangling(root)
    for b in bad:
        print("dangling reference:", b)
    print(f"{len(bad)} dangling references")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
