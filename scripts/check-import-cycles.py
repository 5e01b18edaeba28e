#!/usr/bin/env python3
"""Fails when two source files of one crate reach each other through their imports.

A file reaches another when it names an item of it: `use crate::a::b::X;` (use trees with
braces expanded), or a path such as `super::costs::NodeCost` in its code. A path resolves to the
longest module prefix that is a file of the crate. A file's own ancestors and descendants
(`mod.rs` declaring it, the modules it declares) are not counted: that nesting is the module
tree, not an import. Test code is left out (files named tests.rs or under tests/, and the
`#[cfg(test)] mod ... { }` at a file's end), as are comments and the binaries under src/bin.
Each strongly connected set of more than one file is printed; the exit status is 1 if any.

usage: scripts/check-import-cycles.py [REPO_ROOT]   (`make lint` runs it)
"""

import os
import re
import sys

PATH_RE = re.compile(r"\b(?:crate|super|self)(?:::\w+)+")
USE_RE = re.compile(r"\buse\s+([^;]+);")
TEST_MOD_RE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{.*", re.S)


def crate_sources(root):
    """Every crate's src/ directory under `root` (the fuzz workspace and build output aside)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("target", "fuzz", ".git")]
        if "Cargo.toml" in filenames and os.path.isdir(os.path.join(dirpath, "src")):
            yield os.path.join(dirpath, "src")


def module_of(src, path):
    """The module path of a file: src/a/b.rs and src/a/b/mod.rs are ("a", "b")."""
    parts = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if parts[0] == "bin":
        return None
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return tuple(parts)


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    if "{" not in tree:
        return [tree.split(" as ")[0]]
    brace = tree.index("{")
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rindex("}")]
    parts, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        current += ch
    parts.append(current)
    out = []
    for part in filter(None, parts):
        for path in expand_use(part):
            out.append(prefix.rstrip(":") if path == "self" else prefix + path)
    return out


def referenced_paths(text):
    code = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("//"))
    code = TEST_MOD_RE.sub("", code)
    paths = []
    for use in USE_RE.finditer(code):
        paths += expand_use(re.sub(r"\s+", "", use.group(1)))
    paths += PATH_RE.findall(USE_RE.sub("", code))
    return [p for p in paths if p.split("::")[0] in ("crate", "super", "self")]


def edges_of(src):
    files = {}
    for dirpath, _, filenames in os.walk(src):
        for name in filenames:
            path = os.path.join(dirpath, name)
            module = module_of(src, path) if name.endswith(".rs") else None
            if module is not None:
                files[module] = path
    edges = {module: set() for module in files}
    for module, path in files.items():
        if os.path.basename(path) == "tests.rs" or f"{os.sep}tests{os.sep}" in path:
            continue
        # `super` in a/b.rs and in a/b/mod.rs both name a; `self` names the file's own module.
        parent = module[:-1]
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for reference in referenced_paths(text):
            head, *rest = reference.split("::")
            base = {"crate": (), "super": parent, "self": module}[head]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
            full = base + tuple(rest)
            target = next((full[:k] for k in range(len(full), 0, -1) if full[:k] in files), None)
            nested = target is None or target[: len(module)] == module or module[: len(target)] == target
            if not nested:
                edges[module].add(target)
    return files, edges


def cycles(edges):
    """Strongly connected sets of more than one node (Tarjan, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    failed = False
    for src in sorted(crate_sources(root)):
        files, edges = edges_of(src)
        for component in cycles(edges):
            failed = True
            names = ", ".join(os.path.relpath(files[m], root) for m in component)
            print(f"import circle: {names}")
    if failed:
        print("check-import-cycles: move what both files need into one of them or a third file")
        return 1
    print("check-import-cycles: no import circle between files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
