"""The published JSON Schemas (docs/*.json) checked with the real `jsonschema` validator: the
draft each schema names in `$schema` (Draft 2020-12 when it names none), the schema itself
checked against its metaschema first, and format checking on (`format` keywords are asserted,
not just annotations)."""

from __future__ import annotations

from typing import Any

import jsonschema


def validate(value: Any, schema: dict[str, Any]) -> list[str]:
    """Every error of `value` against `schema`, each as `<JSON path>: <message>` (the path as
    `$.a.b[0]`), in a stable order; [] when it is valid."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(value), key=lambda e: (e.json_path, e.message))
    return [f"{e.json_path}: {e.message}" for e in errors]
