"""Every relative link of README.md and docs/*.md resolves: the file (or
folder) it names exists, and an anchor (#section) names a heading of that
page as GitHub spells it. Also every quoted mention of a page section
(a page path, then the section in double quotes) in the tree's code and docs,
and every .md path named in a comment of the code (C++, scripts, CMake,
YAML): it exists from the repository root or from the file's folder, and a
docs page's section quoted after it (also as `page, "Section"`, wrapped
over comment lines) is a heading of it. Paths under folders .gitignore
ignores (runs/, build/) name outputs, not pages, and are not checked.

    check_links.py SOURCE_DIR

Prints each broken link as file:line: link: why, and exits 1 if any.
"""
import fnmatch
import io
import os
import re
import sys
import tokenize

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MENTION = re.compile(r"(docs/[\w./-]+\.md) \\?\"([^\"\\]+)\\?\"")
# A .md path in a comment: not part of a longer path, URL or variable
# ($OUT/x.md, https://...); `docs/<page>.md` and `docs/*.md` are patterns.
COMMENT_PATH = re.compile(r"(?<![\w$/.{}:<>*-])((?:\.\.?/)*[\w-][\w.-]*(?:/[\w.-]+)*\.md)\b(?![\w/-])")
COMMENT_SECTION = re.compile(r",? \"([^\"]+)\"")
C_COMMENTS = (".cpp", ".hpp", ".h", ".cpp.in", ".proto", ".js")
HASH_COMMENTS = (".sh", ".py", ".cmake", ".yaml", ".yml", ".supp", "CMakeLists.txt")


def anchors(path):
    """GitHub's heading ids: lowercased, punctuation but - and _ dropped, spaces to -."""
    ids, counts, fence = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^#{1,6} (.*)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        ids.add(slug if n == 0 else "%s-%d" % (slug, n))
    return ids


def headings(path):
    return {re.sub(r"^#+ ", "", l.strip()).strip("`")
            for l in open(path, encoding="utf-8") if re.match(r"^#{1,6} ", l)}


def c_comments(text):
    """(line number, text) of each line's // or /* */ comment, outside string
    and character literals (raw strings included)."""
    out, block, i, line = {}, False, 0, 1
    n = len(text)

    def add(chunk):
        out[line] = out.get(line, "") + chunk

    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif block:
            end = text.find("*/", i)
            stop = n if end < 0 else end
            for part_number, part in enumerate(text[i:stop].split("\n")):
                if part_number:
                    line += 1
                add(" " + part.strip().lstrip("*"))
            block, i = False, stop + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            add(" " + text[i + 2:end].lstrip("/!"))
            i = end
        elif text.startswith("/*", i):
            block, i = True, i + 2
        elif c == "R" and re.match(r'R"([^(\s]*)\(', text[i:i + 20]) and not re.match(r"\w", text[i - 1:i] or " "):
            delimiter = re.match(r'R"([^(\s]*)\(', text[i:]).group(1)
            end = text.find(")" + delimiter + '"', i)
            end = n if end < 0 else end + len(delimiter) + 2
            line += text.count("\n", i, end)
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return sorted(out.items())


def hash_comments(text):
    """(line number, text) of each line's # comment: a # at the line's start
    or after a space, outside quotes (shell, CMake, YAML)."""
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        quote = None
        for i, c in enumerate(line):
            if quote:
                quote = None if c == quote else quote
            elif c in "\"'":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1].isspace()):
                out.append((number, line[i + 1:]))
                break
    return out


def python_comments(text):
    """(line number, text) of each line of Python's comments and triple-quoted
    strings (docstrings); a file that does not tokenize has none."""
    out = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                out.append((token.start[0], token.string.lstrip("#")))
            elif token.type == tokenize.STRING and token.string.lstrip("rRbBuUfF").startswith(('"""', "'''")):
                for offset, part in enumerate(token.string.split("\n")):
                    out.append((token.start[0] + offset, part.replace('"' * 3, " ").replace("'" * 3, " ")))
    except (tokenize.TokenError, SyntaxError):
        return []
    return out


def comment_blocks(path, text):
    """Runs of consecutive comment lines, each joined into one text, with the
    line number of each character's line."""
    name = os.path.basename(path)
    if name.endswith(C_COMMENTS):
        lines = c_comments(text)
    elif name.endswith(".py"):
        lines = python_comments(text)
    elif name.endswith(HASH_COMMENTS):
        lines = hash_comments(text)
    else:
        return []
    blocks, current, numbers, last = [], "", [], None
    for number, comment in lines:
        if last is not None and number != last + 1:
            blocks.append((current, numbers))
            current, numbers = "", []
        piece = " " + comment.strip()
        current += piece
        numbers += [number] * len(piece)
        last = number
    if current:
        blocks.append((current, numbers))
    return blocks


def ignored_folders(root):
    """The top-level folder patterns of the root .gitignore (/runs/, /build*/)."""
    try:
        lines = open(os.path.join(root, ".gitignore"), encoding="utf-8").read().split("\n")
    except OSError:
        return []
    return [l.strip("/") for l in lines if re.match(r"^/[^/!#]+/$", l.strip())]


def resolve(root, path, page):
    """The file a path in `path`'s comment names, from the root or from
    `path`'s folder; None when neither exists."""
    for base in (root, os.path.dirname(path)):
        candidate = os.path.normpath(os.path.join(base, page))
        if os.path.exists(candidate):
            return candidate
    return None


def comment_references(root, path, text, outputs):
    """Broken .md paths (and sections quoted after them) in the comments of a code file."""
    broken = []
    for joined, numbers in comment_blocks(path, text):
        for m in COMMENT_PATH.finditer(joined):
            page = m.group(1)
            first = os.path.normpath(os.path.join(os.path.relpath(os.path.dirname(path), root), page)
                                     if page.startswith(".") else page).split(os.sep)[0]
            if any(fnmatch.fnmatch(first, pattern) for pattern in outputs):
                continue
            where = "%s:%d: %s" % (os.path.relpath(path, root), numbers[m.start(1)], page)
            target = resolve(root, path, page)
            if target is None:
                broken.append(where + ": no such file (from the repository root or from the file's folder)")
                continue
            # Sections of docs pages only, as MENTION checks them: bench/RESULTS.md's
            # are named by their heading's start, without its issue number.
            section = COMMENT_SECTION.match(joined, m.end(1))
            in_docs = os.path.relpath(target, root).startswith("docs" + os.sep)
            if in_docs and section and section.group(1) not in headings(target):
                broken.append('%s "%s": no such heading' % (where, section.group(1)))
    return broken


def main(root):
    pages = [os.path.join(root, "README.md")]
    for dirpath, _, files in os.walk(os.path.join(root, "docs")):
        pages += [os.path.join(dirpath, f) for f in files if f.endswith(".md")]
    broken = []
    for page in sorted(pages):
        fence = False
        for number, line in enumerate(open(page, encoding="utf-8"), 1):
            if line.startswith("```"):
                fence = not fence
            if fence:
                continue
            for link in LINK.findall(line):
                if re.match(r"^[a-z]+:", link):
                    continue  # http:, https:, mailto:
                target, _, anchor = link.partition("#")
                path = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
                where = "%s:%d: %s" % (os.path.relpath(page, root), number, link)
                if not os.path.exists(path):
                    broken.append(where + ": no such file")
                elif anchor and path.endswith(".md") and anchor not in anchors(path):
                    broken.append(where + ": no heading with that anchor in " + os.path.relpath(path, root))
    # Sections named in code and docs (a docs page path, then the section in double quotes) must be headings of that page.
    outputs = ignored_folders(root)
    for dirpath, dirs, files in os.walk(root):
        top = dirpath == root
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "corpus"
                         and not (top and any(fnmatch.fnmatch(d, pattern) for pattern in outputs)))
        for f in sorted(files):
            if not f.endswith((".cpp", ".hpp", ".md", ".sh", ".py", ".yaml", ".txt") + C_COMMENTS + HASH_COMMENTS):
                continue
            path = os.path.join(dirpath, f)
            try:
                text = open(path, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            if not f.endswith(".md"):
                broken += comment_references(root, path, text, outputs)
            for number, line in enumerate(text.split("\n"), 1):
                for page, section in MENTION.findall(line):
                    target = os.path.join(root, page)
                    where = "%s:%d: %s \"%s\"" % (os.path.relpath(path, root), number, page, section)
                    if not os.path.exists(target):
                        broken.append(where + ": no such file")
                    elif section not in headings(target):
                        broken.append(where + ": no such heading")
    broken = list(dict.fromkeys(broken))  # a mention on one comment line is found by both checks
    for b in broken:
        print(b)
    print("%d pages checked, %d broken links" % (len(pages), len(broken)))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
