"""The documents a user reads hold no notebook traces, no dead links, and no README figure
that the section it links does not show.

    docs_check.py SOURCE_DIR
    docs_check.py --self-test      the checker against documents made to break each rule

Checks README.md, CONTRIBUTING.md and every docs/**/*.md:
- no time of day (`12:07`, `12:07:31`), no commit hash (7 to 40 hex digits with a letter
  and a digit), no `/tmp` path;
- every relative link `[text](path#anchor)` names a file that exists and, with an anchor,
  a heading of that file (GitHub's anchors); every `docs/NAME.md` or repository path in
  backticks, and every `docs/NAME.md` in the text, names a file or folder that exists;
  `docs/NAME.md, "Title"` names a heading (or the start of one);
- in README.md, every figure (a number with x, %, ms, s, µs, MB, GB or "bits") in a table
  row or paragraph that links a section of docs/ appears in that section (the heading's
  text up to the next heading of the same or a higher level), and every table row with a
  figure links one (in the row, or in the paragraph above the table).
Exits 1 naming each finding as FILE:LINE.
"""
import glob
import os
import re
import subprocess
import sys

TIME_OF_DAY = re.compile(r"(?<![\w:./-])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?![\w:/])")
HEX_WORD = re.compile(r"(?<![\w./-])[0-9a-f]{7,40}(?![\w-])")
TMP_PATH = re.compile(r"(?<![\w.])/tmp\b")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
REPO_DIRS = ("docs/", "scripts/", "examples/", "tests/", "perf/", "src/", "include/", "python/",
             "plugin/", "kernels/", "cmake/")
DOC_MENTION = re.compile(r"(?<![\w/.])((?:docs/)[\w/]+\.md|CONTRIBUTING\.md)\b")
SECTION_REF = re.compile(r"((?:docs/)?[A-Z][A-Za-z_]*\.md)[,:]? \"([^\"]+)\"")
FIGURE = re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)*)\s?(x|%|ms|s|µs|us|MB|GB|GB/s|bits)(?![\w/])")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def strip_fences(lines):
    """The lines with fenced code blocks blanked (their line numbers kept)."""
    out, fence = [], False
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
        else:
            out.append("" if fence else line)
    return out


def headings(path):
    """[(level, title, anchor, line index)] of a markdown file, anchors deduplicated as GitHub does."""
    lines = strip_fences(open(path, encoding="utf-8").read().splitlines())
    seen, result = {}, []
    for i, line in enumerate(lines):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            result.append((len(m.group(1)), m.group(2), base if n == 0 else "%s-%d" % (base, n), i))
    return result


def section_text(path, anchor):
    lines = open(path, encoding="utf-8").read().splitlines()
    hs = headings(path)
    for k, (level, _, a, start) in enumerate(hs):
        if a == anchor:
            end = len(lines)
            for level2, _, _, i in hs[k + 1:]:
                if level2 <= level:
                    end = i
                    break
            return "\n".join(lines[start:end])
    return None


def figures(text):
    text = LINK.sub(lambda m: m.group(1), text)  # a link's target is not a figure
    return [(m.group(1) + m.group(2)).replace(",", "") for m in FIGURE.finditer(text)]


def normalized(text):
    return FIGURE.sub(lambda m: (m.group(1) + m.group(2)).replace(",", ""), text)


class Checker:
    def __init__(self, source):
        self.source = source
        self.bad = []

    def fail(self, path, lineno, what):
        self.bad.append("%s:%d: %s" % (os.path.relpath(path, self.source), lineno, what))

    def exists(self, rel_to, target):
        return os.path.exists(os.path.normpath(os.path.join(rel_to, target)))

    def check_file(self, path):
        here = os.path.dirname(path)
        raw = open(path, encoding="utf-8").read().splitlines()
        prose = strip_fences(raw)
        for n, line in enumerate(raw, 1):
            if TMP_PATH.search(line):
                self.fail(path, n, "a /tmp path: %s" % line.strip()[:80])
            for m in HEX_WORD.finditer(line):
                w = m.group(0)
                if re.search(r"[a-f]", w) and re.search(r"\d", w):
                    self.fail(path, n, "a commit hash: %s" % w)
            for m in TIME_OF_DAY.finditer(prose[n - 1]):
                self.fail(path, n, "a time of day: %s" % m.group(0))
        for n, line in enumerate(prose, 1):
            for m in LINK.finditer(line):
                target = m.group(2)
                if re.match(r"^[a-z]+:", target):
                    continue  # http(s), mailto
                file_part, _, anchor = target.partition("#")
                file_path = os.path.normpath(os.path.join(here, file_part)) if file_part else path
                if not os.path.exists(file_path):
                    self.fail(path, n, "link to a file that does not exist: %s" % target)
                elif anchor and file_path.endswith(".md"):
                    if anchor not in [a for _, _, a, _ in headings(file_path)]:
                        self.fail(path, n, "link to an anchor that %s does not have: #%s"
                                  % (os.path.relpath(file_path, self.source), anchor))
            for m in CODE_SPAN.finditer(line):
                token = m.group(1).strip()
                if token.startswith(REPO_DIRS) and re.fullmatch(r"[\w./*-]+", token):
                    where = os.path.join(self.source, token)
                    # a built program is named by its source's path (perf/bits_bench: perf/bits_bench.cc)
                    if not glob.glob(where) and not glob.glob(where + ".*"):
                        self.fail(path, n, "names a path that does not exist: %s" % token)
            for m in DOC_MENTION.finditer(line):
                if not os.path.exists(os.path.join(self.source, m.group(1))):
                    self.fail(path, n, "names a document that does not exist: %s" % m.group(1))
            for m in SECTION_REF.finditer(line):
                name, title = m.group(1), m.group(2)
                target = os.path.join(self.source, name if name.startswith("docs/") else "docs/" + name)
                if name in ("README.md", "CONTRIBUTING.md"):
                    target = os.path.join(self.source, name)
                if not os.path.exists(target):
                    self.fail(path, n, "names a document that does not exist: %s" % name)
                elif not any(a.startswith(slug(title)) for _, _, a, _ in headings(target)):
                    self.fail(path, n, "%s has no section \"%s\"" % (name, title))

    def check_readme_figures(self, path):
        lines = strip_fences(open(path, encoding="utf-8").read().splitlines())
        blocks, cur = [], []
        for i, line in enumerate(lines):
            if line.strip():
                cur.append((i + 1, line))
            elif cur:
                blocks.append(cur)
                cur = []
        if cur:
            blocks.append(cur)
        previous_links = []
        for block in blocks:
            is_table = all(l.lstrip().startswith("|") for _, l in block)
            if is_table:
                for n, row in block:
                    links = self.doc_links(row) or previous_links
                    self.compare(path, n, row, links, require=True)
            else:
                text = " ".join(l for _, l in block)
                links = self.doc_links(text)
                if links:
                    self.compare(path, block[0][0], text, links, require=False)
                previous_links = links

    def doc_links(self, text):
        out = []
        for m in LINK.finditer(text):
            target = m.group(2)
            if re.match(r"^[a-z]+:", target) or not target.startswith("docs/"):
                continue
            out.append(target)
        return out

    def compare(self, path, n, text, links, require):
        figs = figures(text)
        if not figs:
            return
        if not links:
            if require:
                self.fail(path, n, "a table row with figures (%s) links no section that shows them"
                          % ", ".join(figs))
            return
        sections = []
        for target in links:
            file_part, _, anchor = target.partition("#")
            file_path = os.path.join(self.source, file_part)
            if not os.path.exists(file_path):
                return  # reported as a dead link
            sec = section_text(file_path, anchor) if anchor else open(file_path, encoding="utf-8").read()
            if sec is None:
                return  # reported as a dead anchor
            sections.append(normalized(sec))
        for fig in figs:
            if not any(re.search(r"(?<![\d.])" + re.escape(fig) + r"(?![\d])", s) for s in sections):
                self.fail(path, n, "figure %s is not in the linked section (%s)" % (fig, ", ".join(links)))


def run_checks(source):
    files = subprocess.run(["git", "-C", source, "ls-files", "--cached", "--others", "--exclude-standard",
                            "README.md", "CONTRIBUTING.md", "docs"],
                           capture_output=True, text=True, check=True).stdout.split()
    files = [os.path.join(source, f) for f in files if f.endswith(".md")]
    c = Checker(source)
    for f in sorted(files):
        if os.path.exists(f):
            c.check_file(f)
    c.check_readme_figures(os.path.join(source, "README.md"))
    return list(dict.fromkeys(c.bad)), files


def self_test():
    """Each rule fails on a document that breaks it, and a clean pair of documents passes."""
    import tempfile
    section = "# Perf\n\n## Results\n\nThe call took 12.5 ms, 3.1x faster.\n\n## Other\n\nAlso 7.0x.\n"
    clean = ("# t\n\n| network | figure |\n|---|---|\n"
             "| 1 Gbit/s | 12.5 ms (3.1x) [here](docs/P.md#results) |\n")
    broken = {
        "a time of day": clean + "\nMeasured from 12:07 to 12:28 UTC.\n",
        "a commit hash": clean + "\nBuilt from 34d37ac.\n",
        "a /tmp path": clean + "\nWritten to /tmp/out.\n",
        "link to a file that does not exist": clean + "\nSee [x](docs/NOPE.md).\n",
        "link to an anchor": clean + "\nSee [x](docs/P.md#nowhere).\n",
        "names a path that does not exist": clean + "\nRun `scripts/nope.sh`.\n",
        "has no section": clean + '\nSee docs/P.md, "Nowhere".\n',
        "is not in the linked section": clean.replace("(3.1x)", "(3.2x)"),
        "links no section": clean + "| 10 Gbit/s | 9.9 ms |\n",
    }
    failures = []
    for expect, readme in [(None, clean)] + sorted(broken.items()):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "docs"))
            open(os.path.join(d, "docs", "P.md"), "w").write(section)
            open(os.path.join(d, "README.md"), "w").write(readme)
            subprocess.run(["git", "init", "-q", d], check=True)
            bad, _ = run_checks(d)
            if expect is None and bad:
                failures.append("clean documents reported: %s" % bad)
            elif expect is not None and not any(expect in b for b in bad):
                failures.append("not caught: %s (reported: %s)" % (expect, bad))
    for f in failures:
        print("FAILED:", f)
    if failures:
        sys.exit(1)
    print("self-test: every rule caught its broken document (%d), and clean documents pass" % len(broken))


def main():
    if sys.argv[1] == "--self-test":
        return self_test()
    source = os.path.abspath(sys.argv[1])
    bad, files = run_checks(source)
    for b in bad:
        print("FAILED:", b)
    if bad:
        print("%d findings in %d documents" % (len(bad), len(files)))
        sys.exit(1)
    print("%d documents: no time of day, commit hash or /tmp path; every link and path resolves; "
          "every README figure is in the section it links" % len(files))


if __name__ == "__main__":
    main()
