"""How a claim record reads: the markdown a claim cell shows and the scorecard's lines.

A value prints with enough digits to tell it from the thresholds it is judged against; a
registered record shows its estimate, its 95% interval, the sample behind it and its rule.
"""
from __future__ import annotations


def claim_text(rec: dict) -> str:
    """The markdown a claim cell shows."""
    text = f"**Claim** ({rec['paper']}): {rec['claimed']}  \n**Measured:** {rec['measured']}"
    if rec.get("registered"):
        text += f"  \n**Evidence:** {evidence_text(rec)}  \n**Test:** {test_text(rec)}"
    elif "quantity" in rec:
        size = rec["size"]
        runs = f"{size['runs']} run(s) x {size['seeds']} seed(s)" + (
            f" x {size['steps']} steps" if size["steps"] else "")
        text += (f"  \n**Evidence:** {rec['substrate']}, {runs}"
                 + (f"; bytes {rec['bytes']}" if rec.get("bytes") else "")
                 + f"  \n**Test:** {rec['quantity']} = {_show(rec['value'], rec['holds'], rec.get('in_part'))}; holds if "
                 + _thresholds(rec["holds"])
                 + (f"; in part if {_thresholds(rec['in_part'])}" if rec.get("in_part") else ""))
    return text + f"  \n**Verdict:** {rec['verdict']}" + (f" ({rec['why']})" if rec["why"] else "")


def evidence_text(rec: dict) -> str:
    """The evidence a record rests on, in words: substrate, runs x seeds x steps, bytes, and
    what the runs' histories said of their link, clock and bytes."""
    size = rec["size"]
    text = f"{rec['substrate']}, {size['runs']} run(s) x {size['seeds']} seed(s)" + (
        f" x {size['steps']} steps" if size["steps"] else "")
    text += f"; bytes {rec['bytes']}" if rec.get("bytes") else ""
    ev = rec.get("evidence")
    return text + ("; read from the runs: " + ", ".join(f"{k} {v}" for k, v in ev.items() if v is not None)
                   if ev else "")


def _rule_words(rule: dict) -> str:
    kind = rule["kind"]
    if kind == "ratio":
        return f"ratio rule, holds if the 95% interval's low end >= T = {rule['T']:g}"
    if kind == "parity":
        return f"parity rule, holds if the 95% interval's upper end <= {rule['tolerance']:g}"
    if kind == "bound":
        return f"bound rule, holds if {rule['op']} {rule['limit']:g} at the interval's far end"
    t = _thresholds({"value": tuple(rule["holds"])})
    return f"deterministic (one run decides), holds if {t}" + (
        f", in part if {_thresholds({'value': tuple(rule['in_part'])})}" if rule.get("in_part") else "")


def _judged_words(rule: dict, j: dict) -> str:
    if rule["kind"] == "deterministic":
        return _digits(j["estimate"], [rule["holds"][1]] + ([rule["in_part"][1]] if rule.get("in_part") else []))
    lim = [rule.get("T", rule.get("tolerance", rule.get("limit")))]
    what = {"ratio": "rounds", "parity": "seeds", "bound": "estimate"}[rule["kind"]]
    return (f"{_digits(j['estimate'], lim)}, 95% interval [{_digits(j['low'], lim)}, "
            f"{_digits(j['high'], lim)}]" + (f" over {j['n']} {what}" if what != "estimate" else ""))


def test_text(rec: dict) -> str:
    """A registered record's test in words: the quantity, the estimate with its interval, and
    the rule (a composite claim: each part's)."""
    rule = rec["rule"]
    if rec.get("parts"):
        return f"{rec['quantity']}: " + "; ".join(
            f"{name}: {_judged_words(rule['parts'][name], j)} ({_rule_words(rule['parts'][name])})"
            for name, j in rec["parts"].items()) + "; the weakest part decides"
    return f"{rec['quantity']} = {_judged_words(rule, rec['judged'])} ({_rule_words(rule)})"


def _digits(v: float, bounds) -> str:
    """``v`` at 4 significant digits, or more where that would print it equal to a threshold it
    is not equal to (0.9999990 against "< 1" prints as 0.999999, not 1)."""
    for p in range(4, 17):
        text = f"{v:.{p}g}"
        if all(float(text) != b or v == b for b in bounds):
            return text
    return repr(v)


def _show(value, *specs) -> str:
    """The value(s) as a claim shows them; ``specs`` (holds, in_part) give the thresholds they
    must be told apart from."""
    def bounds(q):
        return [b for spec in specs if spec for name, (_, b) in spec.items() if name == q]
    if isinstance(value, dict):
        return ", ".join(f"{k} {_digits(v, bounds(k))}" for k, v in value.items())
    return _digits(value, bounds("value"))


def _thresholds(spec: dict) -> str:
    return " and ".join(("" if q == "value" else f"{q} ") + f"{op} {b:g}" for q, (op, b) in spec.items())
