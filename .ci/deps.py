#!/usr/bin/env python3
"""The dependency check of the workspace's Rust sources: no import cycle among modules, and none
among a crate's top-level parts (each folder or file beside lib.rs/main.rs, with everything
under it), so that the parts can be read in one order, along the data flow.

Usage:
  python3 .ci/deps.py [ROOT ...]   check ROOT (default: src and cli/src); exit 1 on a cycle
  python3 .ci/deps.py --self-test  check the checker on small trees with and without cycles

What counts as a use: paths starting with `crate::`, `super::`, `self::` or a child module's
name, in `use` trees (`use crate::a::{b, c::{d}}`) and in code, with comments and string
literals removed. Test code does not count (a `#[cfg(test)]` item, such as `mod tests { .. }`,
and `tests.rs` files): tests may reach anywhere. A module using one of its ancestors (the
items of `super`, the crate root) is how Rust code is nested and is not counted either.

On success it prints the top-level parts in dependency order, by level: a part uses only parts
of lower levels. Python 3.11 standard library only.
"""

import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """`text` without comments, string and char literals (each replaced by a space); lines
    are kept so that positions still map to line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
            out.append(" ")
        elif (c in "br" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
              and (m := re.match(r'b?r(#*)"', text[i:i + 300]))):
            # A raw string: it ends at the first quote followed by as many `#`.
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append(" " + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F600}'), else a lifetime ('a).
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x..|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" ")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_item(code, i):
    """The end of the item starting at `i`: after its `;` or its closing brace."""
    depth, n = 0, len(code)
    while i < n:
        c = code[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and c == "}":
                j = i + 1
                while j < n and code[j] in " \t\n":
                    j += 1
                return j + 1 if j < n and code[j] == ";" else i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def without_tests(code):
    """`code` without its `#[cfg(test)]` items (blanked, lines kept), and the names of the
    file modules they declare (`#[cfg(test)] mod helpers;`)."""
    test_mods = set()
    for m in reversed(list(re.finditer(r"#\[cfg\(test\)\]", code))):
        start = m.end()
        # Further attributes of the same item.
        while am := re.match(r"\s*#\[[^\]]*\]", code[start:]):
            start += am.end()
        if fm := re.match(rf"\s*(pub(\([^)]*\))?\s+)?mod\s+({IDENT})\s*;", code[start:]):
            test_mods.add(fm.group(3))
        end = skip_item(code, start)
        code = code[:m.start()] + re.sub(r"[^\n]", " ", code[m.start():end]) + code[end:]
    return code, test_mods


def use_tree_paths(tree):
    """The paths of a `use` tree's leaves, prefix included: `a::{b, c::{d, e as f}}` gives
    `a::b`, `a::c::d`, `a::c::e`."""
    tree = re.sub(r"\s+", "", re.sub(rf"\s+as\s+{IDENT}", "", tree))
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"(::)?\*$", "", tree)]
    prefix, inner = tree[:brace].rstrip(":"), tree[brace + 1:tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (c == "{") - (c == "}")
        cur += c
    parts.append(cur)
    out = []
    for part in filter(None, parts):
        for leaf in use_tree_paths(part):
            out.append(prefix if leaf in ("self", "") else f"{prefix}::{leaf}" if prefix else leaf)
    return out


class Crate:
    """The modules of one crate under `root` (lib.rs or main.rs) and the uses between them."""

    def __init__(self, root):
        self.root = root
        top = "lib.rs" if os.path.exists(os.path.join(root, "lib.rs")) else "main.rs"
        self.files = {}  # module path -> file
        for d, dirs, fs in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not (d == root and x == "bin"))
            for f in sorted(fs):
                rel = os.path.relpath(os.path.join(d, f), root)
                if not f.endswith(".rs") or (d == root and f in ("lib.rs", "main.rs") and f != top):
                    continue
                parts = rel[:-3].split(os.sep)
                if parts[-1] == "mod":
                    parts.pop()
                self.files["::".join(["crate"] + parts) if parts != [top[:-3]] else "crate"] = rel
        # Folders are modules too (a module may be declared inline, `pub mod x { .. }`).
        self.modules = set(self.files)
        for m in list(self.files):
            parts = m.split("::")
            self.modules.update("::".join(parts[:i]) for i in range(1, len(parts)))
        self.edges = {}  # (from, to) -> "file:line" of the first use
        excluded = set()
        for m in sorted(self.files, key=lambda m: m.count("::")):
            if m in excluded or m.rsplit("::", 1)[-1] == "tests":
                excluded.add(m)
                continue
            text = open(os.path.join(root, self.files[m]), encoding="utf-8").read()
            code, test_mods = without_tests(strip_code(text))
            excluded.update(f"{m}::{t}" for t in test_mods)
            for mm in re.finditer(rf"\bmod\s+({IDENT})\s*\{{", code):
                self.modules.add(f"{m}::{mm.group(1)}")
            self.read_uses(m, code)
        self.modules -= {x for x in self.modules if any(x == e or x.startswith(e + "::") for e in excluded)}
        self.edges = {k: v for k, v in self.edges.items() if k[0] in self.modules and k[1] in self.modules}

    def read_uses(self, m, code):
        children = {x.rsplit("::", 1)[1] for x in self.modules if x.rsplit("::", 1)[0] == m and "::" in x}
        prefixes = ["crate", "\\$crate", "super", "self"] + sorted(children)
        start = rf"(?<![\w:$.])(?:{'|'.join(prefixes)})::"
        spans = []
        for u in re.finditer(rf"\buse\s+(::)?([^;]*);", code):
            spans.append((u.start(2), u.end(2)))
            for path in use_tree_paths(u.group(2)):
                self.add(m, path, code, u.start())
        for p in re.finditer(rf"{start}(?:{IDENT}::)*(?:{IDENT})?", code):
            if not any(a <= p.start() < b for a, b in spans):
                self.add(m, p.group(0), code, p.start())

    def add(self, m, path, code, pos):
        parts = [x for x in path.replace("$crate", "crate").split("::") if x]
        if not parts:
            return
        if parts[0] == "crate":
            base = ["crate"]
        elif parts[0] in ("self", "super"):
            base = m.split("::")
            while parts and parts[0] in ("self", "super"):
                if parts.pop(0) == "super":
                    base = base[:-1] or ["crate"]
        elif f"{m}::{parts[0]}" in self.modules:
            base = m.split("::")
        else:
            return  # another crate, a local name, a prelude item
        full = base + [p for p in parts if p != "crate"]
        for i in range(len(full), 0, -1):
            target = "::".join(full[:i])
            if target in self.modules:
                break
        if target == m or m.startswith(target + "::"):
            return  # itself or an ancestor
        where = f"{os.path.join(self.root, self.files[m])}:{code.count(chr(10), 0, pos) + 1}"
        self.edges.setdefault((m, target), where)

    def graph(self, folders):
        """Adjacency sets of modules, or of top-level parts with `folders`."""
        # A top-level part is a file or a folder: a module declared inline in the crate root
        # (`mod x { .. }` in lib.rs, without a folder of its own) is the root's.
        tops = {"::".join(m.split("::")[:2]) for m in self.files}
        if folders:
            def part(m):
                top = "::".join(m.split("::")[:2])
                return top if top in tops else "crate"
        else:
            def part(m):
                return m
        nodes = {part(m) for m in self.modules} - ({"crate"} if folders else set())
        adj = {v: set() for v in nodes}
        why = {}
        for (a, b), where in sorted(self.edges.items()):
            pa, pb = part(a), part(b)
            if pa != pb and pa in adj and pb in adj:
                adj[pa].add(pb)
                why.setdefault((pa, pb), f"{a} -> {b} ({where})")
        return adj, why


def cycles(adj):
    """Each strongly connected component of more than one node: its nodes, and one shortest
    cycle through the first of them."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(comp)
    out = []
    for comp in comps:
        # A shortest way back to the first node, through the component only.
        first = min(comp)
        prev, frontier = {first: None}, [first]
        while frontier and first not in [w for v in frontier for w in adj[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(adj[v] & comp):
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in sorted(frontier) if first in adj[v])
        path = [last]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        out.append((sorted(comp), path[::-1] + [first]))
    return out


def levels(adj):
    """Each node's level: 0 when it uses nothing, else one more than its highest use."""
    level = {}

    def of(v):
        if v not in level:
            level[v] = 0
            level[v] = 1 + max((of(w) for w in adj[v]), default=-1)
        return level[v]

    for v in adj:
        of(v)
    return level


def check(root, out=print):
    """Prints what is wrong with the crate under `root`; returns the number of cycles."""
    crate = Crate(root)
    found = 0
    for folders, what in ((False, "modules"), (True, "top-level parts")):
        adj, why = crate.graph(folders)
        cyc = cycles(adj)
        found += len(cyc)
        for comp, c in cyc:
            name = lambda v: v.replace("crate::", "")
            out(f"deps: {root}: {len(comp)} {what} in one cycle: {' '.join(map(name, comp))}")
            out("  for example " + " -> ".join(map(name, c)) + ":")
            for a, b in zip(c, c[1:]):
                out(f"  {why[(a, b)]}")
        out(f"deps: {root}: {len(cyc)} cycle(s) among {len(adj)} {what}")
        if folders and not cyc:
            lv = levels(adj)
            for n in range(max(lv.values(), default=-1) + 1):
                names = sorted(v.replace("crate::", "") for v in lv if lv[v] == n)
                out(f"  level {n}: {' '.join(names)}")
    return found


def self_test():
    """The checker finds what it must find on small trees; exit 1 otherwise."""
    trees = {
        "a module cycle": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::Thing;\n",
            "b.rs": "pub(crate) fn f() { crate::a::g(); }\n",
        }, 2),
        "a cycle among top-level parts only": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "mod x;\nmod y;\n",
            "a/x.rs": "use crate::{b::p::P, semconv};\n",
            "b/mod.rs": "mod p;\nmod q;\n",
            "b/p.rs": "pub struct P;\n",
            "b/q.rs": "use super::super::a::y::{self, Y as Why};\n",
            "a/y.rs": "pub struct Y;\n",
        }, 1),
        "a cycle through a child named without a prefix": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a/mod.rs": "mod inner;\nuse inner::X;\npub struct Z;\n",
            "a/inner.rs": "pub struct X;\nfn f() { crate::b::f() }\n",
            "b.rs": "pub fn f() { let _ = crate::a::Z; }\n",
        }, 2),
        "a back edge in a nested use tree": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "pub use crate::{x::Y, b::{self, c::{D, E}}};\n",
            "b/mod.rs": "pub mod c;\n",
            "b/c.rs": "pub fn f() { self::g(); }\nfn g() { crate::a::h(); }\n",
        }, 2),
        "uses only in tests, comments and strings": ({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\n",
            "b.rs": ('pub struct B;\n// crate::a::A\n/* crate::a::A */\n'
                     'const S: &str = "crate::a::A";\nconst R: &str = r#"crate::a::A"#;\n'
                     "const C: char = '\"'; fn f<'a>(_: &'a str) {}\n"
                     "#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n"
                     "#[cfg(test)]\nmod helpers;\n"),
            "b/helpers.rs": "use crate::a::A;\n",
        }, 0),
    }
    failed = 0
    for name, (files, want) in trees.items():
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                    f.write(text)
            lines = []
            got = check(d, lines.append)
        if got != want:
            failed += 1
            print(f"deps self-test: {name}: {got} cycle(s), expected {want}", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr)
    print(f"deps self-test: {len(trees) - failed} of {len(trees)} cases pass")
    return 1 if failed else 0


def main(args):
    if args == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = args or [os.path.join(here, "src"), os.path.join(here, "cli", "src")]
    found = sum(check(os.path.relpath(r)) for r in roots)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
