"""The repository's documents refer only to files inside the repository: every
`*.md` path or markdown link in a tracked .md file names a file that exists
(relative to the repository root or to the document), and none points outside
the repository (a ../ that leaves it), so a fresh clone has everything its docs
mention.
    docs_links_test.py SOURCE_DIR"""
import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1])
git = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                     capture_output=True, text=True)
if git.returncode == 0:
    docs = git.stdout.split()
else:  # not a git checkout (a source archive): every .md outside build folders
    docs = [os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root)
            for f in files if f.endswith(".md") and not os.path.relpath(d, root).startswith(("build", "_build", "."))]
bad = []
for doc in docs:
    text = open(os.path.join(root, doc), encoding="utf-8").read()
    here = os.path.dirname(os.path.join(root, doc))
    refs = set(re.findall(r"\]\(([^)#\s]+)", text))  # markdown links
    refs |= set(re.findall(r"`([\w./-]+\.md)`", text))  # `docs/X.md` in code spans
    for ref in sorted(refs):
        if re.match(r"[a-z]+://", ref) or "*" in ref:
            continue
        inside = os.path.normpath(os.path.join(here, ref))  # docs/dev/X.md may link ../Y.md
        if ref.startswith("/") or (ref.startswith("../") and not inside.startswith(root + os.sep)):
            bad.append("%s: %s points outside the repository" % (doc, ref))
        elif not (os.path.exists(os.path.join(root, ref)) or os.path.exists(os.path.join(here, ref))):
            bad.append("%s: %s does not exist" % (doc, ref))
for b in bad:
    print(b)
if bad:
    sys.exit(1)
print("%d documents, every reference inside the repository" % len(docs))
