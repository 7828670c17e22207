#!/usr/bin/env python3
"""This project's own rules for deploy/docker/Dockerfile, checked without Docker (each check_* function
below is one rule). The general Dockerfile lint (syntax, flags, best practice) is hadolint's, which
tests/deploy/dockerfile_test.sh runs first; this script holds what hadolint does not know: base images
pinned once the FROM variables take their ARG defaults, COPY sources present in the repository and not
excluded by .dockerignore, the final USER the manifests' runAsUser, a HEALTHCHECK stated, apt as we use it.
Exit 1 on a problem, naming the line. Standard library only.
  python3 tests/deploy/check_dockerfile.py --context DIR --uid N DOCKERFILE
"""
import argparse
import glob
import json
import os
import re
import sys
from dataclasses import dataclass

KEYWORDS = {"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL",
            "MAINTAINER", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}


@dataclass
class Instr:
    line: int      # 1-based line of the keyword
    keyword: str   # upper case
    args: str      # the arguments, continuation lines joined


# --- reading the Dockerfile -----------------------------------------------------------------------

def escape_char(lines):
    """The line-continuation character: '\\' unless a '# escape=`' parser directive at the top says."""
    for line in lines:
        m = re.match(r"\s*#\s*([A-Za-z]+)\s*=\s*(\S+)\s*$", line)
        if not m:
            break
        if m.group(1).lower() == "escape":
            return m.group(2)
    return "\\"


def is_blank_or_comment(line):
    return not line.strip() or line.lstrip().startswith("#")


def join_continuation(lines, i, esc):
    """The logical line starting at lines[i] and the index after it. As Docker does, comment and blank
    lines inside a continuation are dropped (so a commented-out package in an apt list does no harm)."""
    parts = []
    cur = lines[i]
    i += 1
    while cur.rstrip().endswith(esc):
        parts.append(cur.rstrip()[: -len(esc)])
        while i < len(lines) and is_blank_or_comment(lines[i]):
            i += 1
        if i == len(lines):
            return "".join(parts), i
        cur = lines[i]
        i += 1
    parts.append(cur)
    return "".join(parts), i


def skip_heredocs(text, lines, i):
    """RUN/COPY <<EOF bodies (BuildKit heredocs) are not instructions: skip to after each terminator."""
    for dash, word in re.findall(r"<<(-?)[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?", text):
        while i < len(lines) and (lines[i].strip() if dash else lines[i]) != word:
            i += 1
        i += 1
    return i


def parse(text, out):
    """The instructions of a Dockerfile. An unknown keyword is a problem: this script could not read the
    file as Docker would (hadolint reports it as a syntax error too)."""
    lines = text.splitlines()
    esc = escape_char(lines)
    instrs, i = [], 0
    while i < len(lines):
        if is_blank_or_comment(lines[i]):
            i += 1
            continue
        start = i
        logical, i = join_continuation(lines, i, esc)
        keyword, args = (re.split(r"\s+", logical.strip(), maxsplit=1) + [""])[:2]
        keyword = keyword.upper()
        if keyword not in KEYWORDS:
            out.append(f"line {start + 1}: Unknown instruction: {keyword}")
        if keyword in ("RUN", "COPY", "ADD"):
            i = skip_heredocs(logical, lines, i)
        instrs.append(Instr(start + 1, keyword, args.strip()))
    return instrs


def words(instr):
    """The arguments as words: the JSON (exec) form's strings, otherwise split on whitespace."""
    if instr.args.startswith("["):
        try:
            return [str(w) for w in json.loads(instr.args)]
        except ValueError:
            pass
    return instr.args.split()


def split_flags(ws):
    """Leading --name[=value] flags as a dict, and the words after them."""
    flags = {}
    while ws and ws[0].startswith("--"):
        name, _, value = ws[0][2:].partition("=")
        flags[name] = value
        ws = ws[1:]
    return flags, ws


def of(instrs, keyword):
    return [i for i in instrs if i.keyword == keyword]


# --- base images --------------------------------------------------------------------------------

def global_args(instrs):
    """ARG defaults declared before the first FROM: what ${VAR} in a FROM line means when nobody passes
    --build-arg. A variable without a default is absent (None)."""
    args = {}
    for instr in instrs:
        if instr.keyword == "FROM":
            break
        if instr.keyword == "ARG":
            for w in words(instr):
                name, eq, value = w.partition("=")
                args[name] = value.strip("\"'") if eq else None
    return args


def expand(s, args, where, out):
    """s with the FROM variables replaced by their defaults; a variable without one unpins the image."""
    def sub(m):
        name = m.group(1) or m.group(2)
        if not args.get(name):
            out.append(f"{where}: ${{{name}}} has no default (an ARG before the first FROM): "
                       "the base image is not pinned")
        return args.get(name) or ""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, s)


def check_pinned(image, where, out):
    """An image pinned by a digest, or by a tag that is not latest (which moves)."""
    if "@sha256:" in image or image == "scratch":
        return
    m = re.search(r":([^/:@]+)$", image)
    if not m:
        out.append(f"{where} {image}: no tag or digest (that is :latest, whatever it is today)")
    elif m.group(1) == "latest":
        out.append(f"{where} {image}: the latest tag is not a pinned image")


def check_base_images(instrs, out):
    """Every FROM names an earlier stage or a pinned image. Returns the stage names (lower case, as
    Docker compares them) for COPY --from."""
    args, stages = global_args(instrs), set()
    for instr in of(instrs, "FROM"):
        where = f"line {instr.line} FROM"
        _, rest = split_flags(words(instr))
        image = expand(rest[0] if rest else "", args, where, out)
        if image.lower() not in stages:
            check_pinned(image, where, out)
        if len(rest) >= 3 and rest[1].lower() == "as":
            stages.add(rest[2].lower())
    return stages


# --- the build context: COPY sources and .dockerignore ---------------------------------------------

def pattern_regex(pattern):
    """A .dockerignore pattern as a regex over context-relative paths, as Docker matches them: Go's
    filepath.Match per path segment (* and ? never cross a /), ** for any number of segments, and a
    match of a directory excluding everything below it."""
    segs, parts = [], os.path.normpath(pattern).lstrip("/").split("/")
    for n, seg in enumerate(parts):
        if seg == "**":
            segs.append(".*" if n == len(parts) - 1 else "(?:.*/)?")
            continue
        rx = re.sub(r"\\\*", "[^/]*", re.escape(seg))
        segs.append(re.sub(r"\\\?", "[^/]", rx) + "/")
    return re.compile("^" + "".join(segs).rstrip("/") + "(?:/.*)?$")


def dockerignore(context):
    """The rules of DIR/.dockerignore as (keep, regex); '!' re-includes what an earlier line excluded."""
    path = os.path.join(context, ".dockerignore")
    if not os.path.exists(path):
        return []
    rules = []
    with open(path, encoding="utf-8") as f:
        for line in (l.strip() for l in f):
            if line and not line.startswith("#"):
                keep = line.startswith("!")
                rules.append((keep, pattern_regex(line[1:] if keep else line)))
    return rules


def ignored(rules, path):
    """Excluded when the last pattern that matches the path excludes it."""
    out = False
    for keep, rx in rules:
        if rx.match(path):
            out = not keep
    return out


def check_source(src, context, rules, where, out):
    """One COPY/ADD source: present in the context (a glob: matching something) and not ignored."""
    if re.match(r"^[a-z]+://", src):
        out.append(f"{where} {src}: a URL (unpinned content); download in a RUN with a checksum")
        return
    rel = os.path.normpath(src).lstrip("/")   # Docker reads absolute sources relative to the context
    if rel == ".":
        return
    found = [os.path.relpath(p, context) for p in glob.glob(os.path.join(context, rel))] \
        if glob.has_magic(rel) else [rel] if os.path.lexists(os.path.join(context, rel)) else []
    if not found:
        out.append(f"{where} {src}: no such file in the build context ({context})")
    elif all(ignored(rules, p) for p in found):
        out.append(f"{where} {src}: excluded by .dockerignore")


def check_copy_sources(instrs, context, stages, out):
    """COPY/ADD: every source from the context exists and is not excluded by .dockerignore (the build
    would fail, or worse, copy an old file); --from names an earlier stage."""
    rules = dockerignore(context)
    for instr in (i for i in instrs if i.keyword in ("COPY", "ADD")):
        where = f"line {instr.line} {instr.keyword}"
        flags, rest = split_flags(words(instr))
        if "from" in flags:
            if flags["from"].lower() not in stages:
                out.append(f"{where} --from={flags['from']}: no earlier stage of that name")
            continue
        for src in rest[:-1]:
            if not src.startswith("<<"):   # a heredoc is inline content, not a file of the context
                check_source(src, context, rules, where, out)
    return rules


def check_context_excludes(rules, out):
    """The build context must not carry the build trees (COPY . . would send gigabytes, stale objects)."""
    for p in ("build", "build-asan", ".git"):
        if not ignored(rules, p):
            out.append(f".dockerignore does not keep {p}/ out of the build context")


# --- the runtime stage ------------------------------------------------------------------------------

def check_final_user(instrs, uid, out):
    """The final stage runs as the manifests' non-root uid, numeric (runAsNonRoot can verify only a
    number; a name would need the image's /etc/passwd)."""
    froms = of(instrs, "FROM")
    last = froms[-1].line if froms else 0
    users = [i for i in of(instrs, "USER") if i.line > last]
    if not users:
        out.append("the final stage has no USER: it runs as root")
        return
    u = (words(users[-1]) or [""])[0]
    user, where = u.split(":")[0], f"line {users[-1].line} USER {u}"
    if not user.isdigit():
        out.append(f"{where}: not numeric (Kubernetes runAsNonRoot cannot check a name)")
    elif int(user) == 0:
        out.append(f"{where}: root")
    elif user != str(uid):
        out.append(f"{where}: not the manifests' runAsUser {uid}")


def check_healthcheck(instrs, out):
    """A health check stated: HEALTHCHECK CMD, or HEALTHCHECK NONE (the manifests' probes instead)."""
    if not of(instrs, "HEALTHCHECK"):
        out.append("no HEALTHCHECK: give one, or HEALTHCHECK NONE with a comment naming the probes "
                   "that check the image")


# --- apt ----------------------------------------------------------------------------------------

def apt_commands(cmd):
    """The apt-get commands of a shell line, in order, without leading VAR=value assignments."""
    cmds = (re.sub(r"^(?:[A-Za-z_]\w*=\S*\s+)+", "", c.strip()) for c in re.split(r"&&|\|\||;", cmd))
    return [c for c in cmds if re.match(r"apt-get\s", c)]


def apt_verb(c):
    return next((w for w in c.split()[1:] if not w.startswith("-")), None)


def run_command(instr):
    """A RUN's shell command: its exec-form words joined, its BuildKit flags (--mount=...) dropped."""
    ws = words(instr)
    if instr.args.startswith("["):
        return " ".join(ws)
    _, rest = split_flags(ws)
    return " ".join(rest)


def check_apt(instrs, out):
    """apt-get update and install in one RUN (a cached update layer goes stale), no recommends, -y,
    the lists removed after the install in the same RUN (else they stay in the layer)."""
    for instr in of(instrs, "RUN"):
        cmd = run_command(instr)
        apt = apt_commands(cmd)
        install = next((n for n, c in enumerate(apt) if apt_verb(c) == "install"), None)
        if install is None:
            continue
        where = f"line {instr.line} RUN"
        if not any(apt_verb(c) == "update" for c in apt[:install]):
            out.append(f"{where}: apt-get install without apt-get update before it in the same RUN")
        flags = [w for w in apt[install].split() if w.startswith("-")]
        if "--no-install-recommends" not in flags:
            out.append(f"{where}: apt-get install without --no-install-recommends")
        if not any(f in ("--yes", "--assume-yes") or re.fullmatch(r"-[a-z]*y[a-z]*", f) for f in flags):
            out.append(f"{where}: apt-get install without -y")
        clean = re.search(r"rm\s+-rf\s+/var/lib/apt/lists/\*", cmd)
        if not clean or clean.start() < cmd.find(apt[install]):
            out.append(f"{where}: the apt lists are not removed after the install "
                       "(rm -rf /var/lib/apt/lists/*)")


def main():
    ap = argparse.ArgumentParser(description="This project's rules for its Dockerfile.")
    ap.add_argument("--context", default=".", help="the build context (the repository root)")
    ap.add_argument("--uid", required=True, help="the manifests' runAsUser")
    ap.add_argument("dockerfile")
    a = ap.parse_args()
    with open(a.dockerfile, encoding="utf-8") as f:
        text = f.read()
    out = []
    instrs = parse(text, out)
    stages = check_base_images(instrs, out)
    rules = check_copy_sources(instrs, a.context, stages, out)
    check_context_excludes(rules, out)
    check_final_user(instrs, a.uid, out)
    check_healthcheck(instrs, out)
    check_apt(instrs, out)
    for e in out:
        print(f"FAIL: {a.dockerfile}: {e}", file=sys.stderr)
    print(f"{a.dockerfile}: {len(of(instrs, 'FROM'))} stages, {len(instrs)} instructions, "
          f"{len(out)} problems")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
