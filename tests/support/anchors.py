#!/usr/bin/env python3
"""Move the anchors of docs/*.md to where their items are declared now.

An anchor is [`Name`](../src/file.rs#L12); `tests/it/docs_refs.rs` fails when line 12 does not
declare Name. This rewrites each stale anchor whose item is declared exactly once in its file
and lists the others (run from the repository's root, then read the diff).
"""
import pathlib
import re

KW = ("fn ", "struct ", "enum ", "trait ", "const ", "static ", "type ", "mod ", "macro_rules! ")
ANCHOR = re.compile(r"\[`([^`\]]+)`\]\(\.\./(src/[^)#]+)#L(\d+)\)")


def declares(line, name):
    item = name.split("::")[-1]
    return any(
        re.search(re.escape(kw) + re.escape(item) + r"(?![A-Za-z0-9_])", line) for kw in KW
    )


def main():
    unresolved = []
    for doc in sorted(pathlib.Path("docs").glob("*.md")):
        text = doc.read_text()

        def fix(m):
            name, file, line = m.group(1), m.group(2), int(m.group(3))
            try:
                lines = pathlib.Path(file).read_text().splitlines()
            except OSError:
                unresolved.append(f"{doc}: {name} -> {file}: no such file")
                return m.group(0)
            if 0 < line <= len(lines) and declares(lines[line - 1], name):
                return m.group(0)
            found = [i + 1 for i, l in enumerate(lines) if declares(l, name)]
            if len(found) != 1:
                unresolved.append(f"{doc}: {name} -> {file}: declared at {found or 'nowhere'}")
                return m.group(0)
            return f"[`{name}`](../{file}#L{found[0]})"

        new = ANCHOR.sub(fix, text)
        if new != text:
            doc.write_text(new)
    for u in unresolved:
        print(u)


if __name__ == "__main__":
    main()
