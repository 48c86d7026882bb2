"""The documentation and the code they describe, from one source each: the
Loader docstring's signature against the keywords the C binding parses, the
DataLoader docstring against its Python signature, and the option tables of
docs/LOADER.md and docs/GPU.md against the options the public header declares."""
import inspect
import os
import re

import feeder

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def doc_signature(doc, name):
    """The keyword names of the `name(...)` block at the top of a docstring."""
    m = re.search(rf"{name}\((.*?)\)\n", doc, re.S)
    assert m, f"no {name}(...) signature in the docstring"
    return [p.split("=")[0].strip(" *\n") for p in m.group(1).split(",") if p.strip(" *\n")]


def test_loader_docstring_lists_every_keyword():
    src = read("python", "src", "options.c")
    kwlist = re.search(r'static char \*kwlist\[\] = \{(.*?)NULL\};', src, re.S).group(1)
    keywords = re.findall(r'"(\w+)"', kwlist)
    assert doc_signature(feeder.Loader.__doc__, "Loader") == keywords


def test_dataloader_docstring_is_its_signature():
    params = [p for p in inspect.signature(feeder.DataLoader).parameters
              if p != "native"]
    assert doc_signature(feeder.DataLoader.__doc__, "DataLoader") == params


def table_options(text):
    """The options a doc's tables name in their first column: `FEEDER_OPT_X`,
    `FEEDER_OPT_X_MIN`, `_MAX` (a suffix of the one before) and
    `FEEDER_OPT_MEAN_R/G/B`, `_STD_R/G/B` (a family)."""
    names = set()
    for row in re.findall(r"^\| (`FEEDER_OPT_.*?) \|", text, re.M):
        last = None
        for tok in re.findall(r"`([A-Z_/]+)`", row):
            if tok.startswith("_") and last:
                tok = last.rsplit("_", 1)[0] + tok if tok.count("_") == 1 else "FEEDER_OPT" + tok
            for name in ([tok] if "/" not in tok else
                         [tok.rsplit("_", 1)[0] + "_" + c for c in tok.rsplit("_", 1)[1].split("/")]):
                names.add(name)
            last = tok
    return names


def test_option_tables_list_every_option():
    header = read("include", "feeder", "loader.h")
    enum = re.search(r"typedef enum feeder_option \{(.*?)\} feeder_option;", header, re.S).group(1)
    options = set(re.findall(r"(FEEDER_OPT_\w+) = \d+", enum))
    documented = table_options(read("docs", "LOADER.md")) | table_options(read("docs", "GPU.md"))
    assert sorted(options - documented) == [], "options missing from docs/LOADER.md, docs/GPU.md"
    assert sorted(documented - options) == [], "the docs name options the header has not"
