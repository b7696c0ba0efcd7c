"""Compares Brokk's ClassAd values with HTCondor's Python bindings.

Reads `expression<TAB>value` lines (from the classad_cases example) on stdin,
evaluates each expression with HTCondor's evaluator and reports disagreements.
Exit status 1 when any value differs.
"""
import json
import math
import sys

try:
    import classad2 as classad
except ImportError:  # older htcondor releases
    import classad


def canon(v):
    if v is classad.Value.Undefined:
        return "undefined"
    if v is classad.Value.Error:
        return "error"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return "int:%d" % v
    if isinstance(v, float):
        return "real:%r" % v
    if isinstance(v, str):
        return "str:" + json.dumps(v, ensure_ascii=False)
    return "other:%r" % (v,)


def same(ours, theirs):
    if ours == theirs:
        return True
    if ours.startswith("real:") and theirs.startswith("real:"):
        a, b = float(ours[5:]), float(theirs[5:])
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300)
    return False


def main():
    total = agree = 0
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        text, ours = line.split("\t", 1)
        total += 1
        try:
            theirs = canon(classad.ExprTree(text).eval())
        except Exception as e:  # the bindings raise on some parse failures
            theirs = "exception:%s" % e
        if same(ours, theirs):
            agree += 1
        else:
            print("DIFF %s\n  brokk:    %s\n  htcondor: %s" % (text, ours, theirs))
    print("classad cross-check: %d/%d expressions agree" % (agree, total))
    sys.exit(0 if total and agree == total else 1)


if __name__ == "__main__":
    main()
