"""Tool arguments checked strictly against the tool's JSON schema, for every tool,
built-in or a poller's ``custom_tools()``.

JSON Schema alone is lenient where a handler is not: ``2.0`` is an "integer", and an
object schema without ``additionalProperties`` takes any field. Here:

- ``integer`` is a JSON integer only (not ``2.0``, not ``true``); ``boolean`` only
  ``true``/``false`` (so a ``confirm`` flag is never ``1``); ``number`` is finite;
- an object schema that does not say otherwise refuses unknown fields (at any depth);
- no string or key holds a NUL or a lone surrogate (PostgreSQL refuses both);
- ranges, patterns and the rest are the schema's own.

The first problem is returned as one short line naming the field.
"""

from __future__ import annotations

import math
import re
from copy import deepcopy
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError

REFUSED_TEXT = re.compile("[\x00\ud800-\udfff]")
MAX_DEPTH = 32


def _is_integer(checker: Any, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(checker: Any, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return not isinstance(value, float) or math.isfinite(value)


StrictValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def _closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to other fields."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    open_ended = "additionalProperties" in out or "patternProperties" in out
    if "properties" in schema and isinstance(schema["properties"], dict) and not open_ended:
        if "unevaluatedProperties" not in out:
            out["additionalProperties"] = False
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
    return out


@lru_cache(maxsize=256)
def _validator(key: str, frozen: str) -> Any:
    import json

    schema = _closed(deepcopy(json.loads(frozen)))
    StrictValidator.check_schema(schema)
    return StrictValidator(schema)


def _text_problem(args: Any) -> str | None:
    """NUL, lone surrogates, non-finite numbers, or nesting past ``MAX_DEPTH``, anywhere."""
    stack: list[tuple[Any, str, int]] = [(args, "arguments", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"{where}: nested too deep"
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or REFUSED_TEXT.search(k):
                    return f"{where}: a field name holds a NUL or invalid unicode"
                stack.append((v, k if where == "arguments" else f"{where}.{k}", depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{where}.{i}", depth + 1) for i, v in enumerate(value))
        elif isinstance(value, str) and REFUSED_TEXT.search(value):
            return f"{where}: a NUL or invalid unicode is not allowed"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{where}: must be a finite number"
    return None


def check_arguments(tool: str, schema: dict[str, Any], args: Any) -> str | None:
    """None if ``args`` fit ``schema`` strictly; otherwise the first problem, one line."""
    import json

    if not isinstance(args, dict):
        return "arguments must be a JSON object"
    problem = _text_problem(args)
    if problem is not None:
        return problem
    try:
        validator = _validator(tool, json.dumps(schema, sort_keys=True, default=str))
    except SchemaError as exc:  # a poller shipped a broken schema
        return f"{tool}: unusable schema: {exc.message[:200]}"
    errors = sorted(validator.iter_errors(args), key=lambda e: (list(e.absolute_path), str(e)))
    if not errors:
        return None
    e = errors[0]
    where = ".".join(str(p) for p in e.absolute_path) or "arguments"
    return f"{where}: {_one_line(e.message)}"


def _one_line(message: str) -> str:
    text = REFUSED_TEXT.sub("\ufffd", message).replace("\n", " ").replace("\r", " ")
    return text[:300]
