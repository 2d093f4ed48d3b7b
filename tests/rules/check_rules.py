#!/usr/bin/env python3
"""The house rules of ARCHITECTURE.md ('Layers', 'Rules'), checked over src/: which folder may
include which, where llama.cpp's headers and calls may appear, what the pure layers may not do, and
that the layers below the engine never call its public API, that no function is longer than 120
lines, that the front ends include each other in one order, that no file is longer than 800 (the few still longer may not grow), and that the files of one
folder never call each other in a circle. Prints every broken rule with its file and line; exits 1
when there is one.

    python3 tests/rules/check_rules.py [SRC_DIR]
    python3 tests/rules/check_rules.py --self-test   (the check finds a break of each rule)
"""
import os
import re
import sys

FRONT = {"openai", "anthropic", "responses", "native", "ollama", "server", "batch", "bench", "cli"}
LAYER = {"util": "util", "core": "core", "runtime": "runtime", "engine": "engine"}
LAYER.update({d: "front" for d in FRONT})

# the folders each layer's files may include from (a front end: the other front ends and util)
MAY_INCLUDE = {
    "util": {"util"},
    "core": {"core", "util"},
    "runtime": {"runtime", "core", "util"},
    "engine": {"engine", "runtime", "core", "util"},
    "front": FRONT | {"util"},
}
# the order among the front ends: a front end includes only those of a lower rank (the OpenAI schema
# under the dialects that translate to it, those under the server, the batch runner and the bench,
# all of them under the command line)
FRONT_RANK = {"openai": 0, "anthropic": 1, "responses": 1, "native": 1, "ollama": 1,
              "server": 2, "batch": 2, "bench": 2, "cli": 3}
# the doors below the API open to tools that measure llama.cpp or write models, with no engine between
# (their headers see no llama.h): `cobatch mkmodel` and the bench's ceiling
FRONT_DOORS = {"runtime/synth.h", "runtime/ceiling.h"}
LLAMA_HEADER = re.compile(r"^(llama|ggml|gguf)[-\w]*\.h$")
LLAMA_CALL = re.compile(r"\b(llama|ggml|gguf)_[a-z0-9_]+\s*\(")
# the public API (include/cobatch.h) is the engine's: the layers below it may use its types, never call it
API_CALL = re.compile(r"\bcobatch_[a-z0-9_]+\s*\(")
IMPURE_CALL = re.compile(r"\b(getenv|secure_getenv|clock_gettime|gettimeofday|time|fopen|open|printf|fprintf|puts)\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
# a function's definition as clang-format lays it out: its signature from column 0, its body closed
# by a "}" at column 0
FUNCTION_START = re.compile(r"^[A-Za-z_][^;=]*[(,]$|^[A-Za-z_][^;=]*\)\s*(const\s*)?\{$")
MAX_FUNCTION_LINES = 120
MAX_FILE_LINES = 800
# the files longer than MAX_FILE_LINES, each at most its length today: they may shrink, never grow; an
# entry goes when its file fits (the check says so). llama_common.cpp is the one C++ file (ARCHITECTURE:
# C++ and its exceptions stay inside it), so it is kept whole rather than split in two.
OVER_LENGTH = {
    "runtime/llama_common.cpp": 1455,
}
# a non-static function's definition: its name before the first "("
DEFINES = re.compile(r"^(?!static\b|typedef\b|struct\b|extern\b)[A-Za-z_][\w\s\*]*?\b([a-z_][a-z0-9_]*)\s*\(")
CALLS = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")
# circles of calls between the files of one folder that are one module in two files, each with why
KNOWN_CIRCLES = {
    ("core/preempt.c", "core/scheduler.c"): "preemption is the scheduler's, in a file of its own",
}


def strip_comments(text):
    """The text with comments and string literals blanked, line breaks kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check(src):
    errors = []
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cpp")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            folder = rel.split(os.sep)[0]
            layer = LAYER.get(folder)
            if layer is None:
                errors.append(f"{rel}: the folder src/{folder} has no layer in the rules")
                continue
            if name.endswith(".cpp") and rel != os.path.join("runtime", "llama_common.cpp"):
                errors.append(f"{rel}: C++ stays in src/runtime/llama_common.cpp")
            text = open(path, encoding="utf-8").read()
            for no, line in enumerate(text.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, inc = m.groups()
                where = f"{rel}:{no}"
                if kind == "<":
                    if LLAMA_HEADER.match(os.path.basename(inc)) and layer != "runtime":
                        errors.append(f"{where}: <{inc}> outside src/runtime")
                    if layer == "runtime" and name.endswith(".h") and LLAMA_HEADER.match(os.path.basename(inc)):
                        errors.append(f"{where}: a runtime header includes <{inc}> (forward-declare the type)")
                    if inc == "cobatch.h" and layer in ("util", "core"):
                        errors.append(f"{where}: src/{folder} is below the public API and includes <cobatch.h>")
                    continue
                target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                tfolder = target.split(os.sep)[0]
                if tfolder.startswith(".."):
                    errors.append(f"{where}: \"{inc}\" leaves src/")
                    continue
                if layer == "front" and tfolder in FRONT and tfolder != folder and FRONT_RANK[tfolder] >= FRONT_RANK[folder]:
                    errors.append(f"{where}: src/{folder} may not include \"{inc}\": the front ends' order puts src/{tfolder} beside or above it")
                    continue
                if tfolder == folder or tfolder in MAY_INCLUDE[layer]:
                    continue
                if layer == "front" and target in FRONT_DOORS:
                    continue
                errors.append(f"{where}: src/{folder} ({layer}) may not include \"{inc}\" (src/{tfolder})")
            n_lines = text.count("\n")
            most = OVER_LENGTH.get(rel.replace(os.sep, "/"))
            if most is None and n_lines > MAX_FILE_LINES:
                errors.append(f"{rel}:1: a file of {n_lines} lines (at most {MAX_FILE_LINES})")
            elif most is not None and n_lines > most:
                errors.append(f"{rel}:1: a file of {n_lines} lines, longer than its {most} (it may shrink, not grow)")
            elif most is not None and n_lines <= MAX_FILE_LINES:
                errors.append(f"{rel}:1: fits in {MAX_FILE_LINES} lines now: take it off OVER_LENGTH")
            code = strip_comments(text)
            start = None
            opened = False
            for no, line in enumerate(code.splitlines(), 1):
                if start is None and FUNCTION_START.match(line) and not line.startswith(("typedef", "struct ")):
                    start, opened = no, "{" in line
                elif start is not None and not opened and line.rstrip().endswith(";"):
                    start = None  # a declaration over several lines, not a definition
                elif start is not None and line.rstrip() == "}":
                    if no - start + 1 > MAX_FUNCTION_LINES:
                        errors.append(f"{rel}:{start}: a function of {no - start + 1} lines (at most {MAX_FUNCTION_LINES})")
                    start = None
                elif start is not None and "{" in line:
                    opened = True
            for no, line in enumerate(code.splitlines(), 1):
                if layer != "runtime":
                    for m in LLAMA_CALL.finditer(line):
                        errors.append(f"{rel}:{no}: calls {m.group(0).rstrip('( ')} outside src/runtime")
                if layer in ("util", "core", "runtime"):
                    for m in API_CALL.finditer(line):
                        errors.append(f"{rel}:{no}: src/{folder} calls {m.group(0).rstrip('( ')}, the engine's API above it")
                if layer == "core":
                    for m in IMPURE_CALL.finditer(line):
                        if line[: m.start()].rstrip().endswith((".", "->")):
                            continue  # a field or a function pointer of that name
                        errors.append(f"{rel}:{no}: src/core calls {m.group(1)} (no I/O, no clock, no environment)")
    errors += call_circles(src)
    return errors


def call_circles(src):
    """The circles of calls among the .c files of each folder: file a calls a function file b defines,
    b one that a defines (through any others). One message per circle, on its first file."""
    errors = []
    for folder in sorted(os.listdir(src)):
        d = os.path.join(src, folder)
        if not os.path.isdir(d):
            continue
        files = sorted(f for f in os.listdir(d) if f.endswith((".c", ".cpp")))
        defs, calls = {}, {}
        for f in files:
            code = strip_comments(open(os.path.join(d, f), encoding="utf-8").read())
            defs[f] = {m.group(1) for line in code.splitlines() if FUNCTION_START.match(line) or line.rstrip().endswith("}") for m in [DEFINES.match(line)] if m}
            calls[f] = {m.group(1) for m in CALLS.finditer(code)}
        edges = {a: sorted(b for b in files if b != a and calls[a] & (defs[b] - defs[a])) for a in files}
        for circle in strongly_connected(files, edges):
            names = tuple(f"{folder}/{f}" for f in circle)
            if len(circle) > 1 and names not in KNOWN_CIRCLES:
                errors.append(f"{folder}/{circle[0]}:1: the files {', '.join(circle)} of src/{folder} call each other in a circle")
    return errors


def strongly_connected(nodes, edges):
    """Tarjan's components of the graph, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


# --self-test: a tree that breaks each rule once, and what the check must say of it
PLANTED = {
    "util/u.c": ('#include "../core/kv.h"\n', "may not include"),
    "core/a.c": ('#include <cobatch.h>\nstatic void f(void) { getenv("X"); }\n', "getenv"),
    "core/b.c": ('#include "../engine/sizes.h"\n', "may not include"),
    "runtime/r.h": ("#include <llama.h>\n", "forward-declare"),
    "engine/e.c": ("static int f(void) { return llama_decode(0, 0); }\n", "calls llama_decode"),
    "runtime/up.c": ("static void f(void *p) { cobatch_params_resolve(p); }\n", "calls cobatch_params_resolve"),
    "server/s.c": ('#include "../core/kv.h"\n#include <ggml.h>\n', "outside src/runtime"),
    "cli/c.cpp": ("int x;\n", "C++ stays"),
    "cli/long.c": ("static int f(int x) {\n" + "    x++;\n" * 119 + "    return x;\n}\n", "a function of 122 lines"),
    "cli/long2.c": ("int f(int x,\n      int y) {\n" + "    x++;\n" * 119 + "    return x + y;\n}\n", "a function of 123"),
    "cli/short.c": ("static int f(int x) {\n" + "    x++;\n" * 117 + "    return x;\n}\n", None),
    "anthropic/a.c": ('#include "../responses/responses.h"\n#include "../openai/openai.h"\n', "front ends' order"),
    "openai/o.c": ('#include "../server/server.h"\n', "front ends' order"),
    "cli/big.c": ("int x;\n" * 801, "a file of 801 lines"),
    "runtime/llama_common.cpp": ("int x;\n" * 1456, "longer than its 1455"),
    "cli/was_long.c": ("int x;\n", "take it off OVER_LENGTH"),  # listed by the self-test below
    "engine/one.c": ("int cb_one(void) { return cb_two(); }\n", "call each other in a circle"),
    "engine/two.c": ("int cb_two(void);\nint cb_two(void) {\n    return cb_one();\n}\n", None),
    "engine/three.c": ("int cb_three(void) { return cb_one(); }\n", None),
    "cli/ok.c": ('#include "../runtime/synth.h"\n#include "../util/util.h"\n/* llama_decode() */\n', None),
}


def self_test():
    import tempfile

    OVER_LENGTH["cli/was_long.c"] = 900  # a file listed as long that now fits
    with tempfile.TemporaryDirectory() as d:
        for rel, (text, _) in PLANTED.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as f:
                f.write(text)
        errors = check(d)
    bad = 0
    for rel, (_, want) in PLANTED.items():
        said = [e for e in errors if e.startswith(rel + ":")]
        if want and not any(want in e for e in said):
            print(f"self-test: nothing says '{want}' of {rel}")
            bad += 1
        if not want and said:
            print(f"self-test: {rel} keeps every rule, yet: {said}")
            bad += 1
    print("self-test: " + ("failed" if bad else f"each planted break found ({len(errors)} in all)"))
    return bad


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return 1 if self_test() else 0
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "src")
    errors = check(os.path.normpath(src))
    for e in errors:
        print(e)
    print(f"rules: {len(errors)} broken" if errors else "rules: every rule holds")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
