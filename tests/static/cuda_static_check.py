#!/usr/bin/env python3
"""Static checks of the CUDA kernels inside libnccl-sign.so, without a GPU.

The SIMT emulator (tests/simt) runs the kernels' source on the CPU and
supplies its own warp votes and shuffles, so it cannot see what nvcc made of
that source. These checks read the machine code nvcc put into the library,
with NVIDIA's cuobjdump (and the nvdisasm it calls for SASS):

  resources  registers, shared memory, stack frame and local memory of every
             kernel on every architecture (cuobjdump --dump-resource-usage),
             and its local stores and loads (STL / LDL in the SASS: a register
             spill is a store to the stack frame and a load back); fails when a
             streaming kernel spills or uses local memory.
  sass       the warp vote, shuffle and popcount instructions that the source
             asks for (derived from kernels/ and checked against the list
             below) are in the SASS of every architecture and in the PTX; no
             kernel loads or stores local memory; the library holds a kernel
             image for each real architecture of CMAKE_CUDA_ARCHITECTURES and
             PTX for each virtual one, for every kernel.

Exit status: 0 pass, 1 fail, 77 skip (the reason is printed), 2 bad usage.
cuobjdump and nvdisasm are looked for in SIGNLION_CUOBJDUMP / SIGNLION_NVDISASM,
the CUDA toolkit's bin folder, the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm Python packages (scripts/setup.sh installs them for
/usr/bin/python3) and PATH.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

SKIP = 77

# Kernels that stream whole buffers: each byte read once, a few integer or
# float operations per element, so their speed is the memory bandwidth
# (kernels/README.md: GB/s against a device-to-device copy). A spill or a
# local array there adds local-memory traffic on that same path for every
# element, and a load latency inside the loop: it lowers the one figure these
# kernels are judged by. The key is the kernel's name, or elementwise<Op> for
# the Lion passes (kernels/lion_passes.cu), whose work is the Op.
STREAMING = {
    "packKernel": "values -> vote planes (kernels/pack.cu)",
    "addKernel": "counter + counter (kernels/add.cu)",
    "sumVotesKernel": "N vote planes -> counter, counts in registers (kernels/add.cu)",
    "decideKernel": "counters -> result planes (kernels/decide.cu)",
    "unpackKernel": "result planes -> elements (kernels/decide.cu)",
    "averageKernel": "counters -> (P - M) / N elements (kernels/decide.cu)",
    "fusedMajorityKernel": "add, decide and unpack in one pass (kernels/fused.cu)",
    "fusedAverageKernel": "add and average in one pass (kernels/fused.cu)",
    "packFieldsKernel": "values -> f-bit fields (kernels/fields.cu)",
    "fieldsToPlanesKernel": "f-bit fields -> planes (kernels/fields.cu)",
    "encodeTritsKernel": "result planes -> 5 elements per byte (kernels/trits.cu)",
    # Variants (kernels/variants.h): the same work as the kernel they stand in for.
    "sumVotesBatchKernel": "sumVotes, 8 slots' loads in flight (kernels/add.cu)",
    "sumVotesPairKernel": "sumVotes, two words per thread (kernels/add.cu)",
    "unpackChunksKernel": "unpack, 2 or 4 chunks per warp step (kernels/decide.cu)",
    "averageChunkKernel": "average, a warp per 1024 elements, results from a table (kernels/decide.cu)",
    "fusedMajorityPrefetchKernel": "fused majority, planes loaded up front (kernels/fused.cu)",
    "fusedAverageChunkKernel": "fused average, a warp per 1024 elements, results from a table (kernels/fused.cu)",
    "packFieldsThreadKernel": "packFields, a thread per field word (kernels/fields.cu)",
    "fieldsToPlanesThreadKernel": "fieldsToPlanes, a thread per 64-element block (kernels/fields.cu)",
    "fieldsToPlanesPow2Kernel": "fieldsToPlanes for f = 1, 2, 4, 8 (kernels/fields.cu)",
    "fieldsToPlanesGatherKernel": "fieldsToPlanes for f <= 8 (kernels/fields.cu)",
    "encodeTritsWordKernel": "encodeTrits, 4 coded bytes per thread (kernels/trits.cu)",
    "decodeTritsX4Kernel": "decodeTrits, 4 half-groups per warp step (kernels/trits.cu)",
    "decodeTritsKernel": "5 elements per byte -> result planes (kernels/trits.cu)",
    "elementwise<InterpolateAndVote>": "Lion pass 1: momentum and votes (kernels/lion_passes.cu)",
    "elementwise<ApplyUpdate>": "Lion pass 2: parameters (kernels/lion_passes.cu)",
    "elementwise<FlagNonFinite>": "scan for inf / NaN (kernels/lion_passes.cu)",
    "elementwise<ToFloat>": "widening to fp32 (kernels/lion_passes.cu)",
    "elementwise<Divide>": "in-place divide (kernels/lion_passes.cu)",
}
# Kernels whose memory traffic is a few bytes, where a spill would cost
# nothing measurable (still reported, and still refused by the sass check).
NOT_STREAMING = {
    "elementwise<Assign>": "stores one float, the non-finite flag's reset (kernels/lion_passes.cu)",
}

# What each warp intrinsic becomes: the SASS instruction (a regular
# expression over "OPCODE.MODIFIERS operands") and the PTX instruction.
INTRINSICS = {
    "__ballot_sync": ("VOTE", r"^VOTE\.ANY R\d+,", "vote.sync.ballot.b32"),
    "__any_sync": ("VOTE", r"^VOTE\.ANY P", "vote.sync.any.pred"),
    "__all_sync": ("VOTE", r"^VOTE\.ALL P", "vote.sync.all.pred"),
    "__shfl_sync": ("SHFL", r"^SHFL\.IDX ", "shfl.sync.idx.b32"),
    "__shfl_xor_sync": ("SHFL", r"^SHFL\.BFLY ", "shfl.sync.bfly.b32"),
    "__shfl_up_sync": ("SHFL", r"^SHFL\.UP ", "shfl.sync.up.b32"),
    "__shfl_down_sync": ("SHFL", r"^SHFL\.DOWN ", "shfl.sync.down.b32"),
    "__popc": ("POPC", r"^POPC ", "popc.b32"),
    "__popcll": ("POPC", r"^POPC ", "popc.b64"),
}

# Which kernel calls which intrinsic, and in which file the call is written
# (directly, or through launch.cuh's wrappers warpBallot / warpShfl /
# warpShflXor). Every call found in the kernels' source must be listed here
# and every row must still match the source: the sass check compares both.
EXPECTED = [
    ("packKernel", "__ballot_sync", "kernels/pack.cu", "one ballot per 32 elements on the element path"),
    ("packKernel", "__shfl_xor_sync", "kernels/pack.cu", "OR of the lanes' masks on the 16-byte vector path"),
    ("packFieldsKernel", "__ballot_sync", "kernels/fields.cu", "votes of 32 elements per ballot"),
    ("fieldsToPlanesKernel", "__ballot_sync", "kernels/fields.cu", "one ballot per counter plane"),
    ("decodeTritsKernel", "__ballot_sync", "kernels/trits.cu", "one ballot per digit and sign, and the malformed check"),
    ("decodeTritsX4Kernel", "__ballot_sync", "kernels/trits.cu", "one ballot per digit and sign, and the malformed check"),
    ("unpackKernel", "__shfl_sync", "kernels/result_store.cuh", "storeMajorityChunk: results to lanes"),
    ("fusedMajorityKernel", "__shfl_sync", "kernels/result_store.cuh", "storeMajorityChunk: results to lanes"),
    ("unpackChunksKernel", "__shfl_sync", "kernels/result_store.cuh", "storeMajorityChunk: results to lanes"),
    ("fusedMajorityPrefetchKernel", "__shfl_sync", "kernels/result_store.cuh",
     "storeMajorityChunk: results to lanes"),
    ("averageChunkKernel", "__shfl_sync", "kernels/result_store.cuh", "addChunkCounts, lookupAverage: counter bits and results to lanes"),
    ("fusedAverageChunkKernel", "__shfl_sync", "kernels/result_store.cuh", "addChunkCounts, lookupAverage: counter bits and results to lanes"),
]

LOCAL_MEMORY_SASS = re.compile(r"^(LDL|STL)\b")


def arch_order(arch):
    """sm_80 < sm_90 < sm_100 (names sort sm_100 first)."""
    m = re.search(r"(\d+)", arch)
    return (int(m.group(1)) if m else 0, arch)


def fail(msg):
    print("FAIL: " + msg)


# ---- tools -------------------------------------------------------------------

def python_site_dirs():
    """sys.path of this interpreter and of /usr/bin/python3 (where setup.sh installs)."""
    dirs = [d for d in sys.path if d]
    other = "/usr/bin/python3"
    if os.path.exists(other) and os.path.realpath(other) != os.path.realpath(sys.executable):
        try:
            out = subprocess.run([other, "-c", "import sys; print('\\n'.join(sys.path))"], capture_output=True,
                                 text=True, timeout=60).stdout
            dirs += [d for d in out.splitlines() if d]
        except (OSError, subprocess.SubprocessError):
            pass
    return dirs


def find_tool(name, cuda_bin, site_dirs):
    """The first executable `name`; returns (path or None, places looked at)."""
    candidates = []
    env = os.environ.get("SIGNLION_" + name.upper())
    if env:
        candidates.append(env)
    if cuda_bin:
        candidates.append(os.path.join(cuda_bin, name))
    for d in site_dirs:
        # nvidia-cuda-<tool> 13.x wheels: nvidia/cu13/bin; nvidia/cuda_<tool>/bin is the layout
        # of NVIDIA's -cu12 wheels (not tried here: the registry offers 13.2 and later)
        candidates.append(os.path.join(d, "nvidia", "cu13", "bin", name))
        candidates.append(os.path.join(d, "nvidia", "cuda_" + name, "bin", name))
    on_path = shutil.which(name)
    if on_path:
        candidates.append(on_path)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c, candidates
    return None, candidates


class Tools:
    def __init__(self, cuda_bin):
        sites = python_site_dirs()
        self.cuobjdump, looked = find_tool("cuobjdump", cuda_bin, sites)
        if self.cuobjdump is None:
            raise LookupError("cuobjdump not found (bash scripts/setup.sh installs the nvidia-cuda-cuobjdump "
                              "package); looked at: " + ", ".join(dict.fromkeys(looked)))
        self.nvdisasm, looked = find_tool("nvdisasm", cuda_bin, sites)
        if self.nvdisasm is None:
            raise LookupError("nvdisasm not found, which cuobjdump needs for SASS (bash scripts/setup.sh installs "
                              "the nvidia-cuda-nvdisasm package); looked at: " + ", ".join(dict.fromkeys(looked)))

    def cuobjdump_out(self, *args):
        env = dict(os.environ)
        env["PATH"] = os.path.dirname(self.nvdisasm) + os.pathsep + env.get("PATH", "")
        r = subprocess.run([self.cuobjdump, *args], capture_output=True, text=True, env=env, timeout=1200)
        if r.returncode != 0:
            raise RuntimeError("%s %s exited %d: %s" % (self.cuobjdump, " ".join(args), r.returncode,
                                                        r.stderr.strip()[-2000:]))
        return r.stdout

    def version(self, path):
        r = subprocess.run([path, "--version"], capture_output=True, text=True)
        m = re.search(r"release [\d.]+, V([\d.]+)", r.stdout)
        return m.group(1) if m else "?"


# ---- names -------------------------------------------------------------------

def demangle(names):
    names = list(names)
    if not names:
        return {}
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
        plain = out.split("\n")[:len(names)]
        if len(plain) == len(names):
            return dict(zip(names, plain))
    except OSError:
        pass
    return {n: n for n in names}


def kernel_key(plain):
    """packKernel, or elementwise<Op> for the Lion passes (the keys of STREAMING)."""
    s = short_name(plain)
    name = re.match(r"\w+", s).group(0)
    if name == "elementwise":
        m = re.match(r"elementwise<(\w+)", s)
        return "elementwise<%s>" % (m.group(1) if m else "?")
    return name


def short_name(plain):
    """The demangled name without namespaces and parameters, datatypes by name."""
    s = plain[5:] if plain.startswith("void ") else plain
    s = s.replace("(anonymous namespace)::", "").replace("signlion::kernels::", "").replace("signlion::lion::", "")
    depth, cut = 0, len(s)
    for i, ch in enumerate(s):  # drop the parameter list (the first '(' outside <...>)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    s = s[:cut]
    # kernels/elem_traits.h: ElemTraits<Raw, exponent mask, ...>
    s = re.sub(r"ElemTraits<unsigned char, [^>]*>", "int8", s)
    s = re.sub(r"ElemTraits<unsigned short, 32640u[^>]*>", "bf16", s)
    s = re.sub(r"ElemTraits<unsigned short, 31744u[^>]*>", "fp16", s)
    s = re.sub(r"ElemTraits<unsigned int, [^>]*>", "fp32", s)
    s = re.sub(r"\(ncclSignZeroRule_t\)(\d)", lambda m: ["zero+", "zero-", "abstain"][int(m.group(1))]
               if int(m.group(1)) < 3 else m.group(0), s)
    return s.replace(" >", ">")


# ---- parsing cuobjdump's output ----------------------------------------------

def parse_sass(text):
    """{(arch, mangled kernel): [instruction text "OPCODE.MOD operands", ...]}"""
    code = {}
    arch = fn = None
    instr = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][^;]*?)\s*;")
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch, fn = m.group(1), None
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            fn = m.group(1)
            code[(arch, fn)] = []
            continue
        if fn is not None:
            m = instr.match(line)
            if m:
                code[(arch, fn)].append(m.group(1))
    return code


def parse_ptx(text):
    """{(arch, mangled kernel): PTX text of its .entry}"""
    entries = {}
    arch = None
    in_ptx = False
    current = None
    for line in text.splitlines():
        if line.startswith("Fatbin ptx code:"):
            in_ptx, current = True, None
            continue
        if line.startswith("Fatbin elf code:"):
            in_ptx, current = False, None
            continue
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1).replace("sm_", "compute_")
            continue
        if not in_ptx:
            continue
        m = re.match(r"\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+(\w+)\s*\(", line)
        if m:
            current = (arch, m.group(1))
            entries[current] = []
            continue
        if re.match(r"\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)?\.func\b", line):
            current = None
            continue
        if current is not None:
            entries[current].append(line)
    return {k: "\n".join(v) for k, v in entries.items()}


def parse_resources(text):
    """{(arch, mangled kernel): {"REG": n, "STACK": n, "SHARED": n, "LOCAL": n, ...}}"""
    usage = {}
    arch = fn = None
    for line in text.splitlines():
        m = re.match(r"\s*arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function (\S+):\s*$", line)
        if m:
            fn = m.group(1)
            continue
        if fn is not None and "REG:" in line:
            usage[(arch, fn)] = {k: int(v) for k, v in re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line)}
            fn = None
    return usage


def parse_list(text, kind):
    """cuobjdump --list-elf / --list-ptx: Counter of architectures."""
    return collections.Counter(re.findall(r"\.(sm_\w+)\.%s\b" % kind, text))


def expected_archs(spec):
    """CMAKE_CUDA_ARCHITECTURES -> (real sm_XX set, virtual sm_XX set), or None for native/all/all-major."""
    real, virtual = set(), set()
    for item in filter(None, re.split(r"[;,\s]+", spec)):
        m = re.fullmatch(r"(\d+[af]?)(?:-(real|virtual))?", item)
        if not m:
            return None
        arch = "sm_" + m.group(1)
        if m.group(2) in (None, "real"):
            real.add(arch)
        if m.group(2) in (None, "virtual"):
            virtual.add(arch)
    return real, virtual


# ---- the source ----------------------------------------------------------------

def source_files(root):
    """kernels/*.cu and every project header they include, recursively (relative paths)."""
    todo = sorted("kernels/" + f for f in os.listdir(os.path.join(root, "kernels")) if f.endswith(".cu"))
    seen = []
    while todo:
        rel = todo.pop(0)
        if rel in seen:
            continue
        seen.append(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            text = f.read()
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
            for base in ("", "src/", "include/"):
                if os.path.isfile(os.path.join(root, base + inc)):
                    todo.append(base + inc)
                    break
    return seen


def intrinsic_calls(root):
    """{(file, intrinsic)} for every call written in the kernels' source, a
    call of a launch.cuh wrapper counted as the intrinsic it wraps."""
    files = source_files(root)
    texts = {}
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            # comments do not call anything
            texts[rel] = re.sub(r"//[^\n]*|/\*.*?\*/", "", f.read(), flags=re.S)
    wrappers = {}  # warpBallot -> __ballot_sync, from the one-line wrappers "T name(...) { return __x(...); }"
    definitions = set()  # (file, offset) of the wrappers' own names and bodies: not calls
    for rel, text in texts.items():
        for m in re.finditer(r"\b(\w+)\s*\([^(){};]*\)\s*\{\s*return\s+(__\w+)\s*\(", text):
            if m.group(2) in INTRINSICS:
                wrappers[m.group(1)] = m.group(2)
                definitions |= {(rel, m.start(1)), (rel, m.start(2))}
    calls = set()
    names = "|".join(sorted(set(INTRINSICS) | set(wrappers), key=len, reverse=True))
    for rel, text in texts.items():
        for m in re.finditer(r"\b(%s)\s*\(" % names, text):
            if (rel, m.start(1)) not in definitions:
                calls.add((rel, wrappers.get(m.group(1), m.group(1))))
    return calls, wrappers


# ---- checks ------------------------------------------------------------------

def dump(args, tools, what):
    """cuobjdump -sass / -ptx / --dump-resource-usage of the library, parsed."""
    if not os.path.isfile(args.library):
        raise RuntimeError("no library at %s" % args.library)
    parse = {"-sass": parse_sass, "-ptx": parse_ptx, "--dump-resource-usage": parse_resources}[what]
    return parse(tools.cuobjdump_out(what, args.library))


def check_resources(args, tools):
    res, sass = dump(args, tools, "--dump-resource-usage"), dump(args, tools, "-sass")
    if not res:
        fail("no kernel in %s (was it built without its CUDA objects?)" % args.library)
        return 1
    plain = demangle({fn for _, fn in res})
    rows, problems = [], []
    for (arch, fn), u in res.items():
        key = kernel_key(plain[fn])
        code = sass.get((arch, fn), [])
        stl = sum(1 for i in code if i.startswith("STL"))
        ldl = sum(1 for i in code if i.startswith("LDL"))
        if key in STREAMING:
            kind = "streaming"
        elif key in NOT_STREAMING:
            kind = "-"
        else:
            kind = "?"
            problems.append("%s (%s) is in neither STREAMING nor NOT_STREAMING of %s: say which it is" %
                            (short_name(plain[fn]), key, os.path.basename(__file__)))
        if kind == "streaming":
            local = [("%s %d bytes" % (k.lower(), u.get(k, 0))) for k in ("STACK", "LOCAL") if u.get(k, 0)]
            if stl or ldl:
                local.append("%d STL and %d LDL instructions" % (stl, ldl))
            if local:
                problems.append("streaming kernel %s on %s spills or uses local memory: %s" %
                                (short_name(plain[fn]), arch, ", ".join(local)))
        rows.append((short_name(plain[fn]), arch, u.get("REG", 0), u.get("SHARED", 0), u.get("STACK", 0),
                     u.get("LOCAL", 0), stl, ldl, kind))
    rows.sort(key=lambda r: (r[0], arch_order(r[1])))
    width = max(len(r[0]) for r in rows)
    print("Resource usage per kernel and architecture in %s (cuobjdump %s):" %
          (args.library, tools.version(tools.cuobjdump)))
    print("  STACK: stack frame bytes per thread (spills live there); LOCAL: other local memory bytes;")
    print("  STL / LDL: local-memory store / load instructions in the SASS (a spill is one of each).")
    head = "%-*s  %-7s %4s %7s %6s %6s %4s %4s  %s" % (width, "kernel", "arch", "REG", "SHARED", "STACK", "LOCAL",
                                                       "STL", "LDL", "kind")
    print(head)
    print("-" * len(head))
    for r in rows:
        print("%-*s  %-7s %4d %7d %6d %6d %4d %4d  %s" % ((width,) + r))
    kernels = {r[0] for r in rows}
    print("%d kernels, %d architectures, %d images" % (len(kernels), len({r[1] for r in rows}), len(rows)))
    for p in problems:
        fail(p)
    if problems:
        return 1
    print("PASS: no streaming kernel spills or uses local memory")
    return 0


def check_sass(args, tools):
    problems = []
    # 1. The source's warp intrinsics against EXPECTED, both ways.
    calls, wrappers = intrinsic_calls(args.source_dir)
    print("Warp intrinsics written in the kernels' source (launch.cuh wrappers: %s):" %
          ", ".join("%s -> %s" % kv for kv in sorted(wrappers.items())))
    for rel, intr in sorted(calls):
        print("  %-28s %s" % (rel, intr))
    cited = {(f, i) for _, i, f, _ in EXPECTED}
    for rel, intr in sorted(calls - cited):
        problems.append("%s calls %s, but no kernel in EXPECTED of %s says it uses it: add the kernel(s)" %
                        (rel, intr, os.path.basename(__file__)))
    for rel, intr in sorted(cited - calls):
        problems.append("EXPECTED says %s calls %s, but the source no longer does: update EXPECTED" % (rel, intr))

    # 2. The library's architectures (cuobjdump --list-elf / --list-ptx).
    elf = parse_list(tools.cuobjdump_out("--list-elf", args.library), "cubin")
    ptx_list = parse_list(tools.cuobjdump_out("--list-ptx", args.library), "ptx")
    print("Kernel images in %s: %s; PTX: %s" % (
        args.library, ", ".join("%s x%d" % (k, elf[k]) for k in sorted(elf, key=arch_order)) or "none",
        ", ".join("compute_%s x%d" % (k[3:], ptx_list[k]) for k in sorted(ptx_list, key=arch_order)) or "none"))
    want = expected_archs(args.archs)
    if want is None:
        print("CMAKE_CUDA_ARCHITECTURES=%s: not a list of numbers, the architectures are not compared" % args.archs)
        want = (set(elf), set(ptx_list))
    real, virtual = want

    def by_arch(archs):
        return sorted(archs, key=arch_order)

    if set(elf) != real:
        problems.append("SASS for %s, CMAKE_CUDA_ARCHITECTURES=%s asks for %s" %
                        (by_arch(elf), args.archs, by_arch(real)))
    if set(ptx_list) != virtual:
        problems.append("PTX for %s, CMAKE_CUDA_ARCHITECTURES=%s asks for %s" %
                        (["compute_" + a[3:] for a in by_arch(ptx_list)], args.archs,
                         ["compute_" + a[3:] for a in by_arch(virtual)]))
    # An architecture missing altogether is said once, above; below, each
    # kernel on the architectures the library has.
    real, virtual = real & set(elf), virtual & set(ptx_list)
    counts = set(elf.values()) | set(ptx_list.values())
    if len(counts) > 1:  # each .cu object carries one image per architecture
        problems.append("the objects do not all carry every architecture: %s %s" % (dict(elf), dict(ptx_list)))

    # 3. Every kernel on every architecture; the intrinsics' instructions; no local memory.
    sass, ptx = dump(args, tools, "-sass"), dump(args, tools, "-ptx")
    kernels = sorted({fn for _, fn in sass})
    if not kernels:
        problems.append("no kernel in %s" % args.library)
    plain = demangle(kernels)
    for fn in kernels:
        for arch in sorted(real, key=arch_order):
            if (arch, fn) not in sass:
                problems.append("%s has no SASS for %s" % (short_name(plain[fn]), arch))
        for arch in sorted(virtual):
            if ("compute_" + arch[3:], fn) not in ptx:
                problems.append("%s has no PTX for compute_%s" % (short_name(plain[fn]), arch[3:]))
    for (arch, fn), code in sorted(sass.items(), key=lambda kv: (arch_order(kv[0][0]), kv[0][1])):
        local = collections.Counter(i.split()[0] for i in code if LOCAL_MEMORY_SASS.match(i))
        if local:
            problems.append("%s on %s loads or stores local memory: %s" %
                            (short_name(plain[fn]), arch, ", ".join("%d %s" % (n, op) for op, n in local.items())))

    print("Expected instructions (kernel, intrinsic, where it is called, why):")
    for key, intr, rel, why in EXPECTED:
        opcode, sass_re, ptx_instr = INTRINSICS[intr]
        mine = [fn for fn in kernels if kernel_key(plain[fn]) == key]
        print("  %-22s %-16s %-26s %s" % (key, intr, rel, why))
        if not mine:
            problems.append("no %s in the library, which EXPECTED lists" % key)
            continue
        rx = re.compile(sass_re)
        for fn in mine:
            for arch in sorted(real, key=arch_order):
                n = sum(1 for i in sass.get((arch, fn), []) if rx.match(i))
                if n == 0:
                    problems.append("%s on %s: no %s (%s) for %s" %
                                    (short_name(plain[fn]), arch, opcode, sass_re, intr))
            for arch in sorted(virtual):
                text = ptx.get(("compute_" + arch[3:], fn), "")
                if ptx_instr not in text:
                    problems.append("%s, PTX compute_%s: no %s for %s" %
                                    (short_name(plain[fn]), arch[3:], ptx_instr, intr))
        print("    %d kernel(s) x %d architecture(s): checked %s in SASS and %s in PTX" %
              (len(mine), len(real), opcode, ptx_instr))
    print("%d kernels checked for LDL/STL on %s (cuobjdump %s, nvdisasm %s)" %
          (len(kernels), ", ".join(sorted(real, key=arch_order)), tools.version(tools.cuobjdump),
           tools.version(tools.nvdisasm)))
    for p in problems:
        fail(p)
    if problems:
        return 1
    print("PASS: intrinsics present, no local memory, every architecture present")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["resources", "sass"])
    ap.add_argument("--library", required=True, help="libnccl-sign.so")
    ap.add_argument("--source-dir", required=True, help="the repository (for kernels/)")
    ap.add_argument("--archs", default="", help="CMAKE_CUDA_ARCHITECTURES, ';' or ',' separated")
    ap.add_argument("--cuda-bin", default="", help="the CUDA toolkit's bin folder")
    ap.add_argument("--skip", default="", help="skip with this reason (a build without CUDA)")
    args = ap.parse_args()
    if args.skip:
        print("SKIP: " + args.skip)
        return SKIP
    try:
        tools = Tools(args.cuda_bin)
    except LookupError as e:
        print("SKIP: %s" % e)
        return SKIP
    print("cuobjdump: %s\nnvdisasm: %s" % (tools.cuobjdump, tools.nvdisasm))
    try:
        return check_resources(args, tools) if args.check == "resources" else check_sass(args, tools)
    except RuntimeError as e:
        fail(str(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
