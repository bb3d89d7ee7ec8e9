"""Copies and fills that race with work on a non-blocking CUDA stream.

A stream made with cudaStreamNonBlocking is not ordered after the legacy
default stream, nor the legacy stream after it. So in code that enqueues work
on such a stream, a cudaMemset (asynchronous, on the legacy stream) may still
be writing when the work starts; a cudaMemcpy from host to device may return
before its DMA is done (small copies from pageable memory do); and a
cudaMemcpy from device to host may read results the stream has not written
yet. Every copy and fill belongs on the stream of the work that reads or
wrote its buffer: cudaMemcpyAsync / cudaMemsetAsync on that stream.

    stream_order_check.py SOURCE_DIR

reads every C, C++ and CUDA file under src/, kernels/, plugin/, perf/,
tests/ and examples/ that makes a non-blocking stream, and the project
headers it includes (`#include "..."`, one level), and prints each call
there that uses the legacy default stream:
  - cudaMemcpy, cudaMemcpy2D, cudaMemset, cudaMemset2D (always the legacy
    stream);
  - their Async forms with the stream omitted (C++'s default, 0) or given as
    0, NULL, nullptr or cudaStreamLegacy.
A call on purpose on the legacy stream (the work it feeds runs there too, or
a synchronize follows) carries `stream-order: ok (why)` in a comment on its
line or the line before. Calls inside helper functions defined elsewhere are
not followed. Exit status 1 when any call is found.
"""
import os
import re
import sys

FOLDERS = ("src", "kernels", "plugin", "perf", "tests", "examples")
SUFFIXES = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
INCLUDE_ROOTS = ("", "src", "include", "kernels", "plugin", "perf", "tests", "tests/common")
SYNC_CALLS = ("cudaMemcpy", "cudaMemcpy2D", "cudaMemset", "cudaMemset2D")
# Async form -> number of arguments with the stream (the last one).
ASYNC_CALLS = {"cudaMemcpyAsync": 5, "cudaMemcpy2DAsync": 8, "cudaMemsetAsync": 4, "cudaMemset2DAsync": 6}
LEGACY_STREAMS = ("0", "NULL", "nullptr", "cudaStreamLegacy", "(cudaStream_t)0", "cudaStream_t{}")
CALL = re.compile(r"\b(%s)\s*\(" % "|".join(sorted(set(SYNC_CALLS) | set(ASYNC_CALLS), key=len, reverse=True)))
MARK = "stream-order: ok"


def blank_comments_and_strings(text):
    """Comments and string literals blanked out (newlines kept, so line numbers stay)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def split_arguments(text, open_paren):
    """The top-level arguments of the call whose parenthesis is at open_paren."""
    args, depth, start = [], 0, open_paren + 1
    for i in range(open_paren, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i])
                return [" ".join(a.split()) for a in args]
        elif c == "," and depth == 1:
            args.append(text[start:i])
            start = i + 1
    return [" ".join(text[start:].split())]


def legacy_calls(path):
    raw = open(path, encoding="utf-8", errors="replace").read()
    raw_lines = raw.split("\n")
    text = blank_comments_and_strings(raw)
    out = []
    for m in CALL.finditer(text):
        name = m.group(1)
        args = split_arguments(text, m.end() - 1)
        if name in ASYNC_CALLS:
            want = ASYNC_CALLS[name]
            if len(args) == want and args[-1].replace(" ", "") not in LEGACY_STREAMS:
                continue
            what = "the stream omitted" if len(args) < want else "stream %s" % args[-1]
        else:
            what = "always the legacy stream"
        line = text.count("\n", 0, m.start()) + 1
        if MARK in raw_lines[line - 1] or (line >= 2 and MARK in raw_lines[line - 2]):
            continue
        out.append("%s:%d: %s(%s): %s" % (path, line, name, ", ".join(args), what))
    return out


def included_headers(path, source):
    found = []
    for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(path, encoding="utf-8", errors="replace").read(),
                           re.M):
        for root in (os.path.dirname(path),) + tuple(os.path.join(source, r) for r in INCLUDE_ROOTS):
            candidate = os.path.normpath(os.path.join(root, name))
            if os.path.isfile(candidate):
                found.append(candidate)
                break
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    source = sys.argv[1]
    sources = []
    for folder in FOLDERS:
        for root, _, names in os.walk(os.path.join(source, folder)):
            sources += [os.path.join(root, n) for n in sorted(names) if n.endswith(SUFFIXES)]
    checked, found = set(), []
    for path in sources:
        text = blank_comments_and_strings(open(path, encoding="utf-8", errors="replace").read())
        if "cudaStreamNonBlocking" not in text:
            continue
        for f in [path] + included_headers(path, source):
            if f not in checked:
                checked.add(f)
                found += legacy_calls(f)
    for f in found:
        print(f)
    print("stream_order_check: %d files read, %d with a non-blocking stream or included by one, %d calls on the "
          "legacy default stream there" % (len(sources), len(checked), len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
