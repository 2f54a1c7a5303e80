"""Every relative link of README.md and docs/*.md resolves: the file (or
folder) it names exists, and an anchor (#section) names a heading of that
page as GitHub spells it. Also every quoted mention of a page section
(a page path, then the section in double quotes) in the tree's code and docs.

    check_links.py SOURCE_DIR

Prints each broken link as file:line: link: why, and exits 1 if any.
"""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MENTION = re.compile(r"(docs/[\w./-]+\.md) \\?\"([^\"\\]+)\\?\"")


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
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "corpus"]
        for f in files:
            if not f.endswith((".cpp", ".hpp", ".md", ".sh", ".py", ".yaml", ".txt")):
                continue
            path = os.path.join(dirpath, f)
            try:
                text = open(path, encoding="utf-8").read()
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.split("\n"), 1):
                for page, section in MENTION.findall(line):
                    target = os.path.join(root, page)
                    where = "%s:%d: %s \"%s\"" % (os.path.relpath(path, root), number, page, section)
                    if not os.path.exists(target):
                        broken.append(where + ": no such file")
                    elif section not in headings(target):
                        broken.append(where + ": no such heading")
    for b in broken:
        print(b)
    print("%d pages checked, %d broken links" % (len(pages), len(broken)))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
