"""Every public name of the Python package carries a docstring a user can read
with help(): each function and class exported by signlion, signlion.capi and
signlion.torch (their __all__, else every name not starting with "_" that the
package itself defines), and each public method and property such a class
defines. Needs PyTorch for signlion.torch.
    api_docstrings_test.py SOURCE_DIR"""
import importlib
import inspect
import os
import sys
import types

sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[1]), "python"))

MODULES = ("signlion", "signlion.capi", "signlion.torch")


def public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return names


def ours(obj):
    """Defined by the package (not an imported module, constant or third-party name)."""
    return (inspect.isfunction(obj) or inspect.isclass(obj)) and (obj.__module__ or "").split(".")[0] == "signlion"


def members(cls):
    """Public methods and properties the class itself defines (inherited ones are documented where defined)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) or isinstance(value, property):
            yield name, value


missing, checked = [], 0
for module_name in MODULES:
    module = importlib.import_module(module_name)
    if not (module.__doc__ or "").strip():
        missing.append(module_name + " (the module)")
    for name in public_names(module):
        obj = getattr(module, name, None)
        if obj is None and name not in vars(module):
            missing.append("%s.%s: listed in __all__ but not defined" % (module_name, name))
            continue
        if not ours(obj):
            continue
        checked += 1
        if not (obj.__doc__ or "").strip():
            missing.append("%s.%s" % (module_name, name))
        if inspect.isclass(obj):
            for member, value in members(obj):
                checked += 1
                if not (value.__doc__ or "").strip():
                    missing.append("%s.%s.%s" % (module_name, name, member))
for m in missing:
    print("no docstring:", m)
if missing:
    sys.exit(1)
print("%d public functions, classes, methods and properties of %s, each with a docstring" % (checked, ", ".join(MODULES)))
