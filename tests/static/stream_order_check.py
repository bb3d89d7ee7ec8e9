"""Copies and fills that race with work on a non-blocking CUDA stream.

A stream made with cudaStreamNonBlocking is not ordered after the legacy
default stream. So in code that enqueues work on such a stream, a plain
cudaMemset (asynchronous, on the legacy stream) may still be writing when the
work starts, and a cudaMemcpy from host to device (or device to device) may
return before its DMA is done (small copies from pageable memory do). A
device-to-host cudaMemcpy is safe: it returns only once the bytes are on the
host. Every other copy or fill belongs on the stream of the work that reads it
(cudaMemcpyAsync / cudaMemsetAsync on that stream).

    stream_order_check.py SOURCE_DIR

checks every C, C++ and CUDA file under src/, kernels/, plugin/, perf/,
tests/ and examples/ that makes a non-blocking stream, and prints each
cudaMemset / cudaMemset2D / cudaMemcpy / cudaMemcpy2D call in it that is not
device to host, with its file and line. It does not follow calls into helper
functions: a helper that copies on the legacy stream is reviewed by hand.
Exit status 1 when any is found.
"""
import os
import re
import sys

FOLDERS = ("src", "kernels", "plugin", "perf", "tests", "examples")
SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
CALL = re.compile(r"\b(cudaMemset|cudaMemset2D|cudaMemcpy|cudaMemcpy2D)\s*\(")


def arguments(text, open_paren):
    """The text between the parenthesis at open_paren and its match."""
    depth = 0
    for i in range(open_paren, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_paren + 1:i]
    return text[open_paren + 1:]


def strip_comments(text):
    """Comments blanked out (newlines kept, so line numbers stay)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r"//[^\n]*|/\*.*?\*/", blank, text, flags=re.S)


def findings(path):
    text = strip_comments(open(path, encoding="utf-8", errors="replace").read())
    if "cudaStreamNonBlocking" not in text:
        return []
    out = []
    for m in CALL.finditer(text):
        args = arguments(text, m.end() - 1)
        if m.group(1).startswith("cudaMemcpy") and "cudaMemcpyDeviceToHost" in args:
            continue
        line = text.count("\n", 0, m.start()) + 1
        out.append("%s:%d: %s(%s) on the legacy default stream, in a file that enqueues work on a "
                   "non-blocking stream: use the Async form on that stream" %
                   (path, line, m.group(1), " ".join(args.split())))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = sys.argv[1]
    found, files = [], 0
    for folder in FOLDERS:
        for root, _, names in os.walk(os.path.join(source, folder)):
            for name in sorted(names):
                if name.endswith(SUFFIXES):
                    files += 1
                    found += findings(os.path.join(root, name))
    for f in found:
        print(f)
    print("stream_order_check: %d files read, %d copies or fills off the stream of their work" % (files, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
