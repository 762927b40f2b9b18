"""Checks what the folder READMEs say each library may include.

Every library folder's README has a paragraph that starts with "May
include:" and names, in backticks, the folders (or subfolders, such as
`inner/protocol/`, or single headers) its code may #include, besides itself
and the standard library; the list ends at the first ";" or "never", after
which a README may say what is forbidden. This reads those lines, then every #include "..." of every C++ and
CUDA file, and fails naming each include a README does not allow. A file
obeys the nearest README above it that has such a line; a folder with
sources but no such line anywhere above it is an error too, so a new
library cannot skip the rule.

    python3 tests/check_layering.py [REPO]
"""

import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".h.in")
SKIP = {".git", "demo", "python", "examples", "packaging", "cmake"}


def skipped(top):
    """Folders outside the libraries: the ones above, hidden ones, and every
    build folder (`build`, `build-*`: what .gitignore leaves out, generated
    sources included)."""
    return top in SKIP or top.startswith(".") or top == "build" or top.startswith("build-")
# A library's tests and fuzzers may use whatever they test against (loopback
# sites, a real all-reduce): the rule binds the library's own code.
CONSUMERS = {"tests", "fuzz"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def top_folders():
    return {d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)) and not skipped(d)}


def rule_of(folder):
    """The allowed prefixes from folder/README.md's "May include:" line, or None."""
    path = os.path.join(ROOT, folder, "README.md")
    if not os.path.exists(path):
        return None
    text = open(path, encoding="utf-8").read()
    # The paragraph that starts with "May include:" (it may wrap).
    m = re.search(r"^May include:(.*?)(?:\n\s*\n|\Z)", text, re.M | re.S)
    if not m:
        return None
    # The list ends at the first ";" or "never": what follows names what is
    # forbidden ("; nothing else of `inner/`", "never `daemon/`").
    listed = re.split(r";|\bnever\b", m.group(1), maxsplit=1)[0]
    # `folder/` allows a folder, `folder/file.h` one header.
    return [a for a in re.findall(r"`([^`]+)`", listed) if "/" in a]


def main():
    tops = top_folders()
    problems = []
    checked = 0
    rules = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        if parts and skipped(parts[0]):
            dirnames[:] = []
            continue
        sources = [f for f in filenames if f.endswith(SOURCES)]
        if not parts or not sources or CONSUMERS & set(parts):
            continue
        # The nearest README with a rule, walking up from this folder.
        owner, allowed = None, None
        for depth in range(len(parts), 0, -1):
            folder = "/".join(parts[:depth])
            if folder not in rules:
                rules[folder] = rule_of(folder)
            if rules[folder] is not None:
                owner, allowed = folder, rules[folder]
                break
        if owner is None:
            problems.append(f"{rel_dir}/: no README above it says what it may include (a line 'May include: ...')")
            continue
        for name in sources:
            path = os.path.join(dirpath, name)
            text = open(path, encoding="utf-8", errors="replace").read()
            checked += 1
            for inc in INCLUDE.findall(text):
                first = inc.split("/", 1)[0]
                if "/" not in inc or first not in tops:
                    continue  # a file next to it, a generated header, or a third-party one
                # Its own library (subfolders included), or what its README names. A subfolder with a
                # rule of its own is its own library: inner/protocol/ may not include the rest of inner/.
                if inc.startswith(owner + "/") or any(inc == a or a.endswith("/") and inc.startswith(a)
                                                      for a in allowed):
                    continue
                problems.append(f"{os.path.relpath(path, ROOT)}: includes \"{inc}\", which {owner}/README.md does "
                                f"not allow (May include: {', '.join(allowed) or 'nothing else'})")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) break the layering the READMEs state ({checked} files read)")
        return 1
    print(f"the layering holds: {checked} files, every include allowed by its folder's README")
    return 0


if __name__ == "__main__":
    sys.exit(main())
