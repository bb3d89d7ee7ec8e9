"""The modules of the signlion package import each other without a loop:
 1. the import graph read from the source (every import of a signlion module, at the top of a
    module or deferred inside a function, since a deferred import hides a loop until the call
    that runs it) has no cycle; a failure names the modules of the cycle;
 2. each module imports as the first signlion module of an interpreter, then the others after
    it, in the listed order and in reverse (the modules that need PyTorch only where it is
    importable): one interpreter, emptied of signlion modules before each order."""
import ast
import os
import subprocess
import sys
import unittest

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:  # pragma: no cover
    HAVE_TORCH = False

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
PACKAGE = "signlion"


def package_modules():
    """{dotted name: source path} of every module of the package (subpackages included)."""
    root = os.path.join(PYTHON_DIR, PACKAGE)
    out = {}
    for folder, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, f), PYTHON_DIR)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join(rel)] = os.path.join(folder, f)
    return out


def imported_modules(name, path, modules):
    """The package's modules that module `name` imports anywhere in its source."""
    is_package = os.path.basename(path) == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[:len(base) - (node.level - 1)]
                stem = ".".join(anchor + ([node.module] if node.module else []))
            else:
                stem = node.module
            # "from X import y": y is a module of the package where one is named so, else a name in X.
            targets = [stem] + ["%s.%s" % (stem, a.name) for a in node.names]
        else:
            continue
        for t in targets:
            # A module's parent packages run first; an import of a package's own ancestors is no edge.
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):
                found.add(t)
    return found


def find_cycle(graph):
    """One cycle of the graph as a list of nodes (the first repeated at the end), or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state:
                cycle = visit(m)
                if cycle:
                    return cycle
        stack.pop()
        state[n] = "done"
        return None

    for n in sorted(graph):
        if n not in state:
            cycle = visit(n)
            if cycle:
                return cycle
    return None


def needs_torch(name, graph, path):
    """Whether importing the module imports torch (itself or through a module it imports)."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        with open(path[n]) as f:
            tree = ast.parse(f.read())
        for node in tree.body:  # module level only: what an import runs
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
                return True
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "torch":
                return True
        todo += graph[n]
    return False


class PackageImports(unittest.TestCase):
    def test_no_import_cycle(self):
        modules = package_modules()
        self.assertIn("signlion.capi", modules)
        graph = {n: imported_modules(n, p, modules) for n, p in modules.items()}
        cycle = find_cycle(graph)
        self.assertIsNone(cycle, "an import loop in the package: %s" % " -> ".join(cycle or []))

    def test_each_module_first_in_a_fresh_interpreter(self):
        modules = package_modules()
        graph = {n: imported_modules(n, p, modules) for n, p in modules.items()}
        names = sorted(n for n in modules if HAVE_TORCH or not needs_torch(n, graph, modules))
        self.assertIn("signlion.capi", names)
        # One interpreter (PyTorch is imported once: its import takes seconds) in which every
        # order starts from no signlion module loaded, as a fresh interpreter would.
        run = subprocess.run([sys.executable, "-c", ORDERS, repr(names)], cwd=PYTHON_DIR, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertIn("%d orders imported" % (2 * len(names)), run.stdout)


# Per module: it first, then the others in the listed order, and again with the others reversed.
ORDERS = """
import ast, importlib, sys, traceback
names = ast.literal_eval(sys.argv[1])
failed = 0
for first in names:
    rest = [n for n in names if n != first]
    for order in ([first] + rest, [first] + rest[::-1]):
        for n in [m for m in sys.modules if m == "signlion" or m.startswith("signlion.")]:
            del sys.modules[n]
        try:
            for n in order:
                importlib.import_module(n)
        except Exception:
            failed += 1
            print("importing %s fails (order %s):" % (n, order))
            traceback.print_exc(file=sys.stdout)
print("%d orders imported" % (2 * len(names) - failed))
sys.exit(1 if failed else 0)
"""


if __name__ == "__main__":
    result = unittest.main(exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
