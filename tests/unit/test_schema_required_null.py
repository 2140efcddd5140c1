"""A required field sent as ``null`` is a 400 naming the field, as a missing one is: every
request schema, so that no handler meets a ``None`` it was promised it would not see (the fuzzer
found ``/rerank`` with ``"query": null`` a 500)."""
from __future__ import annotations

import importlib
import pkgutil

import pytest
from marshmallow import Schema, ValidationError

import schemas
from schemas.common import BaseSchema


def _schemas_with_required_fields():
    out = {}
    for mod in pkgutil.iter_modules(schemas.__path__):
        module = importlib.import_module(f"schemas.{mod.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, BaseSchema) and obj is not BaseSchema:
                required = [n for n, f in obj().fields.items() if f.required]
                if required:
                    out[f"{obj.__module__}.{obj.__name__}"] = (obj, required)
    return out


SCHEMAS = _schemas_with_required_fields()


def test_there_are_schemas_with_required_fields():
    assert len(SCHEMAS) >= 5


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_required_field_null_is_named(name):
    cls, required = SCHEMAS[name]
    schema: Schema = cls()
    for field in required:
        with pytest.raises(ValidationError) as e:
            schema.load({field: None})
        assert field in e.value.messages, (name, field, e.value.messages)
        with pytest.raises(ValidationError) as absent:
            schema.load({})
        assert e.value.messages[field] == absent.value.messages[field], (name, field)   # null reads as absent
