"""The documentation against the binary and itself, so the two cannot drift: docs/CONFIGURATION.md
lists exactly the options each command's `--help` lists, with the defaults `--help` prints; the
README stays short; every relative link in README.md and docs/*.md (anchors included) resolves;
no issue numbers and no paths outside the repository; the sections code comments cite in
docs/SEMANTICS.md exist."""
import glob
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT

DOCS = os.path.join(ROOT, "docs")
CONFIGURATION = os.path.join(DOCS, "CONFIGURATION.md")
README = os.path.join(ROOT, "README.md")

# Every command whose options CONFIGURATION.md documents ("" is `bucketfs` itself).
COMMANDS = ["", "mount", "gcsfuse", "unmount", "login", "logout", "whoami", "mb", "ls", "stat", "cat", "put", "rm",
            "meta", "meta get", "meta set", "meta rm", "versions", "restore", "status", "recover"]


def doc_files():
    return [README] + sorted(glob.glob(os.path.join(DOCS, "**", "*.md"), recursive=True))


def help_text(command):
    p = subprocess.run([BIN, *command.split(), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


OPTION_LINE = re.compile(r"^  (?:(-\w), )?(--[a-z][a-z0-9-]*)")


def help_options(command):
    """{option: default or None} from `bucketfs COMMAND --help` (an option's help may wrap)."""
    options, current, text = {}, None, {}
    for line in help_text(command).splitlines():
        m = OPTION_LINE.match(line)
        if m:
            current = m.group(2)
            text[current] = line
        elif current and line.startswith("      "):
            text[current] += " " + line.strip()
        else:
            current = None
    for opt, t in text.items():
        d = re.search(r"default: ([^;)]*)\)", t)
        options[opt] = d.group(1).strip() if d else None
    return options


def sections(path, level):
    """{heading: body} for the headings of exactly `level` #s."""
    out, head = {}, None
    for line in open(path).read().splitlines():
        m = re.match(r"^(#+) (.*)$", line)
        if m and len(m.group(1)) <= level:
            head = m.group(2).strip() if len(m.group(1)) == level else None
            if head is not None:
                out[head] = []
            continue
        if head is not None:
            out[head].append(line)
    return {h: "\n".join(b) for h, b in out.items()}


ROW = re.compile(r"^\| `(?:(-\w), )?(--[a-z][a-z0-9-]*)` \| ([^|]*) \|", re.M)


def rows(body):
    """{option: default cell} of the option tables in a section."""
    return {m.group(2): m.group(3).strip() for m in ROW.finditer(body)}


def documented_options():
    """{command: {option: default cell}} from CONFIGURATION.md, shared groups included."""
    by_heading = sections(CONFIGURATION, 2)
    groups = {slug(h): rows(b) for h, b in sections(CONFIGURATION, 3).items()}
    out = {}
    for heading, body in by_heading.items():
        m = re.fullmatch(r"`bucketfs( [a-z ]+)?`", heading)
        if not m:
            continue
        opts = rows(body)
        for anchor in re.findall(r"\]\(#([a-z0-9-]+-options)\)", body):
            assert anchor in groups, f"{heading} links to a group #{anchor} that CONFIGURATION.md lacks"
            opts.update(groups[anchor])
        out[(m.group(1) or "").strip()] = opts
    return out


def slug(heading):
    """GitHub's anchor for a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def same_default(shown, cell):
    """Whether the CONFIGURATION.md default cell states the default `--help` prints."""
    cell = cell.replace("`", "").strip()
    try:
        return float(cell.split()[0]) == float(shown)
    except (ValueError, IndexError):
        return shown.lower() in cell.lower()


def test_configuration_lists_every_option_of_every_command():
    documented = documented_options()
    top = help_text("")
    subcommands = re.findall(r"^  ([a-z]+) {2,}", top.split("SUBCOMMANDS:")[1], re.M)
    meta = re.findall(r"^  ([a-z]+) {2,}", help_text("meta").split("SUBCOMMANDS:")[1], re.M)
    assert set(subcommands) | {f"meta {s}" for s in meta} | {""} == set(COMMANDS), \
        "a command was added or removed: document it in docs/CONFIGURATION.md and list it in COMMANDS"
    for command in COMMANDS:
        assert command in documented, f"docs/CONFIGURATION.md has no section `bucketfs {command}`".replace(" `", "`")
        shown = set(help_options(command))
        doc = set(documented[command])
        assert shown - doc == set(), f"bucketfs {command}: in --help but not in docs/CONFIGURATION.md: {sorted(shown - doc)}"
        assert doc - shown == set(), f"bucketfs {command}: in docs/CONFIGURATION.md but not in --help: {sorted(doc - shown)}"


def test_configuration_states_the_defaults_help_prints():
    documented = documented_options()
    checked = 0
    for command in COMMANDS:
        for option, default in help_options(command).items():
            if default is None:
                continue
            assert option in documented[command], f"bucketfs {command} {option}: not in docs/CONFIGURATION.md"
            cell = documented[command][option]
            assert same_default(default, cell), \
                f"bucketfs {command} {option}: --help says default {default!r}, docs/CONFIGURATION.md says {cell!r}"
            checked += 1
    assert checked >= 20  # mount alone prints over twenty defaults


def test_readme_is_at_most_150_lines():
    n = len(open(README).read().splitlines())
    assert n <= 150, f"README.md has {n} lines; move detail into docs/"


def test_readme_keeps_the_two_commands():
    text = open(README).read()
    body = sections(README, 2)["The two commands"]
    assert "Scripts/demo.sh" in body and "Scripts/test.sh" in body
    assert "lost+found" in text and "docs/SEMANTICS.md" in text


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path):
    text = open(path).read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # no headings inside code blocks
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_relative_link_resolves():
    broken = []
    for path in doc_files():
        text = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.M | re.S)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            where = os.path.relpath(path, ROOT)
            if not os.path.exists(dest):
                broken.append(f"{where}: {target} (no such file)")
            elif not os.path.realpath(dest).startswith(os.path.realpath(ROOT) + os.sep):
                broken.append(f"{where}: {target} (outside the repository)")
            elif anchor and os.path.isfile(dest) and dest.endswith(".md") and anchor not in anchors(dest):
                broken.append(f"{where}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_no_issue_numbers_and_nothing_outside_the_repository():
    bad = []
    for path in doc_files():
        for n, line in enumerate(open(path).read().splitlines(), 1):
            # ... nor a path of the machine a result was measured on (a worktree, a build folder).
            if re.search(r"[Ii]ssues? \d|\.\./shared|SPEC\.md|\bSPEC §|(?<![\w.])/work/|/\.build[\w-]*/", line):
                bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()[:100]}")
    assert not bad, "say what the thing is, and cite only files in the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize("number, title", [(1, "The model"), (2, "Sources"), (3, "The mount"), (4, "Extended attributes"),
                                           (5, "Errors"), (6, "Caching and consistency"), (7, "Security")])
def test_semantics_keeps_the_section_numbers_code_cites(number, title):
    headings = sections(os.path.join(DOCS, "SEMANTICS.md"), 2)
    assert any(h.startswith(f"{number}. {title}") for h in headings), \
        f"docs/SEMANTICS.md must keep '## {number}. {title}…': code comments cite §{number}"


def test_operating_keeps_the_blocks_test_operating_runs():
    text = open(os.path.join(DOCS, "OPERATING.md")).read()
    for marker in ("fstab", "systemd"):
        assert f"<!-- checked by Tests/e2e/test_operating.py: {marker} -->" in text


def code_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "Sources", "Tests", "Scripts", "Package.swift"],
                         capture_output=True, text=True, check=True).stdout.split()
    return [os.path.join(ROOT, p) for p in out if p.endswith((".swift", ".py", ".sh", ".c", ".h"))]


def test_code_cites_only_sections_that_exist():
    """Comments cite the project's own contract as `docs/SEMANTICS.md §N` (or §N.M); each cited
    section must exist, and nothing cites a file outside the repository or an issue number."""
    text = open(os.path.join(DOCS, "SEMANTICS.md")).read()
    numbers = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M))
    bad = []
    this = os.path.abspath(__file__)
    for path in code_files():
        if os.path.abspath(path) == this:
            continue
        lines = open(path, errors="replace").read().splitlines()
        for n, line in enumerate(lines, 1):
            where = f"{os.path.relpath(path, ROOT)}:{n}"
            joined = line
            if n < len(lines) and re.search(r"docs/SEMANTICS\.md\s*$", line):
                # A citation split over two comment lines: `docs/SEMANTICS.md` / `/// §3.4`.
                joined = line.rstrip() + " " + re.sub(r"^\s*(?:///?|#|\*)\s*", "", lines[n])
            elif re.search(r"docs/SEMANTICS\.md\s*$", line):
                bad.append(f"{where}: cites docs/SEMANTICS.md with no section after it")
            for cited in re.findall(r"docs/SEMANTICS\.md ((?:§\d+(?:\.\d+)?(?:, )?)+)", joined):
                for number in re.findall(r"§(\d+(?:\.\d+)?)", cited):
                    if number not in numbers:
                        bad.append(f"{where}: cites §{number}, which docs/SEMANTICS.md does not have")
            if re.search(r"\bSPEC(\.md)? §|\.\./shared/|\b[Ii]ssue \d+\b", line):
                bad.append(f"{where}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)
