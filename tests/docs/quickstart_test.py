"""The README's quick starts are what this test runs, so they cannot drift.

Each command block (```sh) of the README's "Quick start" section is preceded by a
marker, `<!-- quickstart: NAME -->` or `<!-- quickstart: NAME, needs a GPU -->`.
    quickstart_test.py SOURCE_DIR BUILD_DIR check NAME...   every block has a
        marker, and the markers are exactly the NAMEs CTest runs
    quickstart_test.py SOURCE_DIR BUILD_DIR run NAME        runs block NAME
`run` executes the block's text itself with bash (errexit, pipefail) in a
scratch copy of the source tree (the files git would commit), where `build`
is BUILD_DIR (only for a block that names `build`) and HOME is a scratch
folder, with the caller's PATH as it is (no `python3` put in front: the block
must find its Python as a user's shell does) and SIGNLION_LIBRARY unset.
QUICKSTART_PYTHON, if set, is passed as PY, the variable the PyTorch blocks
document for naming the Python that has PyTorch, as a user would set it. A line ending in `# needs a GPU`, or a block marked so, runs
only where `nvidia-smi -L` lists a GPU; otherwise the line is skipped, and a
block with nothing left exits 77 (CTest: skipped), saying why.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

GPU_MARK = "# needs a GPU"
COMMAND_LANGUAGES = ("sh", "bash", "console", "")


def blocks(readme):
    """[(name, needs_gpu, text)] of the Quick start section, and the unmarked blocks found there."""
    text = open(readme, encoding="utf-8").read()
    section = re.search(r"^## Quick start\b.*?(?=^## |\Z)", text, re.S | re.M)
    if not section:
        sys.exit("README.md has no '## Quick start' section")
    found, unmarked = [], []
    pattern = re.compile(r"(?:<!-- quickstart: ([\w-]+)(, needs a GPU)? -->\s*\n)?```(\w*)\n(.*?)```", re.S)
    for m in pattern.finditer(section.group(0)):
        if m.group(3) not in COMMAND_LANGUAGES:
            continue  # an excerpt of a program (```c, ```python), not commands to run
        if m.group(1):
            found.append((m.group(1), bool(m.group(2)), m.group(4)))
        else:
            unmarked.append(m.group(4).strip().splitlines()[0] if m.group(4).strip() else "(empty block)")
    return found, unmarked


def gpu_answers():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False, "nvidia-smi is not available"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return False, "nvidia-smi -L lists no GPU"
    return True, ""


def check(source, names):
    found, unmarked = blocks(os.path.join(source, "README.md"))
    bad = ["a command block without a quickstart marker: %s" % first for first in unmarked]
    readme_names = [n for n, _, _ in found]
    for n in sorted(set(readme_names) - set(names)):
        bad.append("README quick start '%s' has no CTest test (tests/docs/docs.cmake)" % n)
    for n in sorted(set(names) - set(readme_names)):
        bad.append("CTest runs quick start '%s', which the README no longer has" % n)
    if len(set(readme_names)) != len(readme_names):
        bad.append("two quick-start blocks share a name: %s" % readme_names)
    for b in bad:
        print("FAILED:", b)
    if bad:
        sys.exit(1)
    print("%d quick-start blocks, each run by a test: %s" % (len(found), ", ".join(readme_names)))


def run(source, build, name):
    found, _ = blocks(os.path.join(source, "README.md"))
    match = [(gpu, text) for n, gpu, text in found if n == name]
    if not match:
        sys.exit("README.md has no quick start '%s'" % name)
    block_gpu, text = match[0]
    have_gpu, why = gpu_answers()
    lines, skipped = [], []
    for line in text.splitlines():
        if (block_gpu or line.rstrip().endswith(GPU_MARK)) and not have_gpu:
            skipped.append(line)
            lines.append(": skipped: " + " ".join(line.split()[:3]) + " ...")
        else:
            lines.append(line)
    for line in skipped:
        print("skipped (%s): %s" % (why, line))
    if not [l for l in text.splitlines() if l.strip() and l not in skipped and not l.lstrip().startswith("#")]:
        print("quick start '%s' needs a GPU: %s" % (name, why))
        sys.exit(77)

    scratch = tempfile.mkdtemp(prefix="signlion-quickstart-")
    try:
        tree = os.path.join(scratch, "signlion")
        files = subprocess.run(["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, check=True).stdout.split(b"\0")
        for f in files:
            f = f.decode()
            if f and os.path.isfile(os.path.join(source, f)):
                os.makedirs(os.path.dirname(os.path.join(tree, f)), exist_ok=True)
                shutil.copy2(os.path.join(source, f), os.path.join(tree, f))
        if re.search(r"(^|[\s/])build/", text) or re.search(r"\sbuild(\s|$)", text):
            os.symlink(os.path.abspath(build), os.path.join(tree, "build"))  # the block uses a built tree
        env = dict(os.environ, HOME=os.path.join(scratch, "home"))
        env.pop("SIGNLION_LIBRARY", None)  # as a user's shell: the package finds its own library
        os.makedirs(env["HOME"])
        env.pop("QUICKSTART_PYTHON", None)
        python = os.environ.get("QUICKSTART_PYTHON")
        if python:
            env["PY"] = python  # the block's documented choice of Python; PATH stays the machine's
        script = "set -euo pipefail\nset -x\n" + "\n".join(lines) + "\n"
        print("running quick start '%s' in %s:\n%s" % (name, tree, text))
        sys.stdout.flush()
        result = subprocess.run(["bash", "-c", script], cwd=tree, env=env)
        if result.returncode != 0:
            print("FAILED: quick start '%s' exited %d" % (name, result.returncode))
            sys.exit(1)
        print("quick start '%s' ran as written%s" % (name, " (%d lines skipped: %s)" % (len(skipped), why)
                                                         if skipped else ""))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    source, build, mode = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "check":
        check(source, sys.argv[4:])
    elif mode == "run":
        run(source, build, sys.argv[4])
    else:
        sys.exit("mode must be check or run")
