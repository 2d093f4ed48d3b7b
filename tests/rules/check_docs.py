#!/usr/bin/env python3
"""The docs that describe the code, checked against it: ARCHITECTURE.md's code quoted "as it is" is
in its file word for word; README.md's module map ('## Map') has an entry for every folder of src/ and
names every source file in it; every path under src/, include/, tests/, scripts/ or examples/ that README.md or
ARCHITECTURE.md names in backticks exists. Prints what does not match; exits 1 when something does not.

    python3 tests/rules/check_docs.py [ROOT]
    python3 tests/rules/check_docs.py --self-test   (the check finds a break of each kind)
"""
import os
import re
import sys

QUOTED = re.compile(r"^```c\n/\* (\S+), as it is \*/\n(.*?)^```", re.S | re.M)
MAP_BLOCK = re.compile(r"^## Map\n.*?^```\n(.*?)^```", re.S | re.M)
MAP_ENTRY = re.compile(r"^(src/[a-z_]+)/\s+(.*?)(?=^\S|\Z)", re.S | re.M)
NAMED_PATH = re.compile(r"`((?:src|include|tests|scripts|examples)/[\w./-]*[\w/])`")


def check(root):
    errors = []
    read = lambda rel: open(os.path.join(root, rel), encoding="utf-8").read()
    arch, readme = read("ARCHITECTURE.md"), read("README.md")
    for m in QUOTED.finditer(arch):
        path, quoted = m.group(1), m.group(2)
        if not os.path.isfile(os.path.join(root, path)):
            errors.append(f"ARCHITECTURE.md: quotes {path}, which is not there")
        else:  # each paragraph of the quote (a function) word for word
            source = read(path)
            for part in quoted.strip("\n").split("\n\n"):
                if part.strip() and part not in source:
                    line = part.strip().splitlines()[0]
                    errors.append(f"ARCHITECTURE.md: the code quoted from {path} 'as it is' is not in it word for word: {line}")
    block = MAP_BLOCK.search(readme)
    if not block:
        errors.append("README.md: no module map ('## Map' and its code block)")
    else:
        listed = {m.group(1) for m in MAP_ENTRY.finditer(block.group(1))}
        for folder in sorted(os.listdir(os.path.join(root, "src"))):
            if os.path.isdir(os.path.join(root, "src", folder)) and f"src/{folder}" not in listed:
                errors.append(f"README.md: the map has no entry for src/{folder}/")
        for m in MAP_ENTRY.finditer(block.group(1)):
            folder, text = m.group(1), m.group(2)
            d = os.path.join(root, folder)
            if not os.path.isdir(d):
                errors.append(f"README.md: the map names {folder}/, which is not there")
                continue
            words = set(re.findall(r"\w+", text))
            for f in sorted(os.listdir(d)):
                stem, ext = os.path.splitext(f)
                if ext in (".c", ".cpp") and stem not in words:
                    errors.append(f"README.md: the map's {folder}/ does not name {f}")
    for doc, text in (("README.md", readme), ("ARCHITECTURE.md", arch)):
        for m in NAMED_PATH.finditer(text):
            if not os.path.exists(os.path.join(root, m.group(1))):
                errors.append(f"{doc}: names `{m.group(1)}`, which is not there")
    return errors


def self_test():
    import tempfile

    planted = {
        "src/engine/engine.c": "static void step(void) {\n    run();\n}\n",
        "src/engine/lane.c": "int x;\n",
        "src/engine/new.c": "int y;\n",
        "src/fresh/f.c": "int z;\n",
        "ARCHITECTURE.md": "```c\n/* src/engine/engine.c, as it is */\nstatic void step(void) {\n    walk();\n}\n```\n"
        "See `src/engine/gone.c`.\n",
        "README.md": "## Map\n\n```\nsrc/engine/   engine.c: the step; lane.c: the lane\nsrc/old/      gone\n```\n",
    }
    want = ["not in it word for word", "does not name new.c", "names src/old/", "names `src/engine/gone.c`", "no entry for src/fresh/"]
    with tempfile.TemporaryDirectory() as d:
        for rel, text in planted.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        errors = check(d)
        bad = [w for w in want if not any(w in e for e in errors)]
        with open(os.path.join(d, "src/engine/engine.c"), "w") as f:
            f.write("static void step(void) {\n    walk();\n}\n")
        fixed = [e for e in check(d) if "word for word" in e]
    for w in bad:
        print(f"self-test: nothing says '{w}'")
    if fixed:
        print(f"self-test: a quote that matches is refused: {fixed}")
    ok = not bad and not fixed and len(errors) == len(want)
    if not ok and not bad and not fixed:
        print(f"self-test: more than the planted breaks: {errors}")
    print("self-test: " + ("each planted break found" if ok else "failed"))
    return 0 if ok else 1


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    errors = check(os.path.normpath(root))
    for e in errors:
        print(e)
    print(f"docs: {len(errors)} out of step with the code" if errors else "docs: in step with the code")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
