#!/usr/bin/env python3
"""Atomic read-modify-write instructions executed, from callgrind profiles made with
--dump-instr=yes (scripts/bench-callgrind.sh --atomics).

Prints one number: how many times the profiled processes executed an x86 instruction with a
`lock` prefix, or an `xchg` with a memory operand (locked without the prefix). These are the
atomic operations of reference counts (`Arc`, `Bytes`), locks, semaphores and wake-ups; each
costs tens of cycles where an ordinary instruction costs one, so instruction counts alone
understate them.

How: callgrind records the instructions executed at each address of each object. For every
object in the profiles, `objdump -d` lists where its locked instructions are; the profile's
addresses are those of the loaded object, so the load offset is found by matching the first
address callgrind saw in each function with the function's symbol (`nm`), taking the offset
most functions agree on.

Usage: callgrind-atomics.py [--top N] callgrind.out.PID...   (--top: the N functions with the
most, on standard error)
"""
import collections
import re
import subprocess
import sys


def parse(path, costs, first, fn_at):
    """Adds each (object, address)'s executions to `costs`, each function's lowest address
    to `first`, and the function of each address to `fn_at`."""
    names = {"ob": {}, "fn": {}}
    ob = fn = None
    last = 0
    after_call = False

    def name(kind, text):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", text)
        if not m:
            return text
        if m.group(2):
            names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), text)

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("ob="):
                ob = name("ob", line[3:])
            elif line.startswith("fn="):
                fn = name("fn", line[3:])
            elif line.startswith("cob="):
                name("ob", line[4:])
            elif line.startswith("cfn="):
                name("fn", line[4:])
            elif line.startswith("calls="):
                # The next line is the call's position and inclusive cost: not this function's own.
                after_call = True
            elif line and line[0] in "0123456789+-*":
                pos = line.split()
                a = pos[0]
                if a == "*":
                    addr = last
                elif a[0] in "+-":
                    step = int(a[1:], 0)
                    addr = last + step if a[0] == "+" else last - step
                else:
                    addr = int(a, 0)
                last = addr
                if after_call:
                    after_call = False
                    continue
                executed = int(pos[2]) if len(pos) > 2 else 0
                costs[(ob, addr)] += executed
                fn_at[(ob, addr)] = fn
                if (ob, fn) not in first or addr < first[(ob, fn)]:
                    first[(ob, fn)] = addr


def symbols(obj):
    out = {}
    for flags in (["-C", "--defined-only"], ["-D", "-C", "--defined-only"]):
        text = subprocess.run(["nm", *flags, obj], capture_output=True, text=True).stdout
        for line in text.splitlines():
            p = line.split(None, 2)
            if len(p) == 3 and p[1] in "tTwW":
                out.setdefault(p[2], int(p[0], 16))
        if out:
            break
    return out


def locked(obj):
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True, text=True).stdout
    return {int(m.group(1), 16) for m in re.finditer(r"(?m)^\s*([0-9a-f]+):\s+(?:lock\b|xchg\b[^\n]*\()", text)}


def main(argv):
    top = 0
    if argv[:1] == ["--top"]:
        top, argv = int(argv[1]), argv[2:]
    costs, first, fn_at = collections.Counter(), {}, {}
    for path in argv:
        parse(path, costs, first, fn_at)
    total = 0
    per_fn = collections.Counter()
    for obj in sorted({o for o, _ in costs if o and o.startswith("/")}):
        sym = symbols(obj)
        offsets = collections.Counter(a - sym[f] for (o, f), a in first.items() if o == obj and f in sym)
        if not offsets:
            continue
        offset = offsets.most_common(1)[0][0]
        at = {a + offset for a in locked(obj)}
        for (o, a), n in costs.items():
            if o == obj and a in at:
                total += n
                per_fn[fn_at[(o, a)]] += n
    print(total)
    for f, n in per_fn.most_common(top):
        print(f"{n:12d}  {f}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
