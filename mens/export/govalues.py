"""Go values as a TEMPLATE sees them (mens/export/gotemplate.py): structs, maps, slices, and how
text/template prints them and Ollama's `json` (encoding/json.Marshal) writes them."""
from __future__ import annotations

import math
from decimal import Decimal


class GoTemplateError(ValueError):
    pass


class GoStruct:
    """A Go struct: fields by Go name; `json` lists (json key, field, omitempty) in declaration
    order; `stringer` says it has a String() method printing its JSON (Ollama's types do)."""

    def __init__(self, fields: dict, json: list | None = None, stringer: bool = False):
        self.fields, self.json, self.stringer = fields, json, stringer


class GoOrderedMap(dict):
    """Ollama's ordered maps (nested schema properties): JSON in insertion order; a TEMPLATE
    cannot range over one (Go cannot either: the map is an unexported field)."""
    stringer = False


class PropertyType(list):
    """Ollama's api.PropertyType: one type marshals (and prints) as a string, several as a list."""
    stringer = True


class GoMap(dict):
    """A Go map[string]…: ranged and marshalled in sorted key order. stringer: prints as JSON
    (Ollama's templateArgs / templateProperties); a plain map prints as Go's map[…] form."""

    def __init__(self, items=(), stringer: bool = False):
        super().__init__(items)
        self.stringer = stringer


class GoList(list):
    def __init__(self, items=(), stringer: bool = False):
        super().__init__(items)
        self.stringer = stringer


# ---- Go values: truth, printing, JSON (encoding/json.Marshal) -----------------------------------
def truth(v) -> bool:
    if isinstance(v, GoStruct):
        return True
    return bool(v)                   # False, 0, "", nil, empty slice/map are false, as in Go


def _go_float(f: float, json: bool) -> str:
    """strconv's shortest digits, as encoding/json (json=True) or %v (json=False) writes them:
    positional unless the magnitude is below 1e-6 (json) / 1e-4 (%v) or at least 1e21; JSON's
    exponent loses its leading zero (1e-07 -> 1e-7)."""
    if math.isnan(f) or math.isinf(f):
        raise GoTemplateError(f"json: unsupported value {f}")
    a = abs(f)
    if a and (a < (1e-6 if json else 1e-4) or a >= 1e21):
        e = f"{f:e}".split("e")[1]             # the exponent's sign and size
        m = repr(f).split("e")[0]              # repr is in e-form at these magnitudes
        m = m[:-2] if m.endswith(".0") else m
        exp = int(e)
        digits = f"{abs(exp):02d}" if not json or abs(exp) >= 10 or exp > 0 else str(abs(exp))
        return f"{m}e{'-' if exp < 0 else '+'}{digits}"
    s = format(Decimal(repr(f)), "f")
    return s.rstrip("0").rstrip(".") if "." in s else s


_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
        "<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def go_json(v) -> str:
    """Go's json.Marshal: compact, map keys sorted, `<`, `>`, `&` escaped (HTML-safe)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v, True)
    if isinstance(v, str):
        return '"' + "".join(_ESC.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 else c)
                             for c in v) + '"'
    if isinstance(v, PropertyType):
        return go_json(v[0]) if len(v) == 1 else go_json(list(v))
    if isinstance(v, dict):
        keys = list(v) if isinstance(v, GoOrderedMap) else sorted(v)
        return "{" + ",".join(f"{go_json(k)}:{go_json(v[k])}" for k in keys) + "}"
    if isinstance(v, list):
        return "[" + ",".join(go_json(x) for x in v) + "]"
    if isinstance(v, GoStruct):
        if v.json is None:             # no json tags: Go's field names, in declaration order
            return "{" + ",".join(f"{go_json(k)}:{go_json(x)}" for k, x in v.fields.items()) + "}"
        parts = [f"{go_json(k)}:{go_json(v.fields[f])}" for k, f, omit in v.json
                 if not (omit and not truth(v.fields[f]))]
        return "{" + ",".join(parts) + "}"
    raise GoTemplateError(f"json of an unsupported value {v!r}")


def go_print(v) -> str:
    """How {{ v }} prints v: strings as they are, numbers as Go's %v, String() types as JSON."""
    if isinstance(v, str):
        return v
    if v is None:
        return "<no value>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _go_float(v, False)
    if isinstance(v, PropertyType):
        return v[0] if len(v) == 1 else "[" + " ".join(v) + "]"
    if getattr(v, "stringer", False):
        return go_json(v)
    raise GoTemplateError(f"TEMPLATE prints a Go value mens does not model ({type(v).__name__}: "
                          f"Go would print its %v form)")
