"""Named choices for a polymorphic config field: `dataset=hhh`, `env=gsm8k`, `dataset=my.jsonl`.

`NamedChoice` is a chz meta-factory. A short name on the command line selects a factory from a
table (`"hhh": "preference.reward_model:hhh_preference_data"`), and `dataset.<key>=...` then sets
that factory's own arguments, as for any chz polymorphic field; `--help` lists the chosen
factory's keys. A value that is no name can still mean something (a `.jsonl` path, a Hugging Face
id) when the field gives an `other` rule; anything else is refused with the valid names.

Factories are written as "module:attribute" strings and imported only when chosen, so a CLI that
offers a choice from another pipeline does not import that pipeline until it is asked for. A
`Preset` gives a chz class other defaults (`Preset("m:PreferenceData", comparison_builder=
Preset("m:HHHComparisons"))`); preset values stay overridable (`dataset.comparison_builder.max_train=1`).
"""

import importlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import chz

from recipes_lib.exceptions import ConfigurationError

Factory = Callable[..., Any]
OtherRule = Callable[[str], Factory | None]


class Preset:
    """A chz class ("module:attribute" or the class) with other defaults for some of its fields.

    A field's preset value is a plain default, or (a chz class, or another Preset, e.g.
    `Preset("module:Class")` with no defaults) the factory chz uses for that field when the command line does not name one, so its
    own fields stay settable (`dataset.comparison_builder.max_train=1000`).
    """

    def __init__(self, target: "str | type", **defaults: object) -> None:
        self.target, self.defaults = target, defaults

    def __repr__(self) -> str:
        return f"Preset({self.target!r}, {self.defaults!r})"


Entry = str | Factory | Preset


def resolve(entry: Entry) -> Factory:
    """The factory a table entry names, imported now; a Preset becomes a subclass with its defaults."""
    if isinstance(entry, Preset):
        return _preset_class(resolve(entry.target), entry.defaults)
    if not isinstance(entry, str):
        return entry
    module_name, _, attribute = entry.partition(":")
    return getattr(importlib.import_module(module_name), attribute)  # type: ignore[no-any-return]


def _preset_class(base: Factory, defaults: Mapping[str, object]) -> Factory:
    """`base` as a chz subclass (same name and module) whose listed fields have other defaults."""
    fields = chz.chz_fields(base)
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": base.__module__,
                                 "__qualname__": base.__qualname__, "__doc__": base.__doc__}
    for key, value in defaults.items():
        if key not in fields:
            raise ValueError(f"{base.__qualname__} has no field {key!r} to preset")
        namespace["__annotations__"][key] = fields[key]._raw_type
        factory = isinstance(value, Preset) or isinstance(value, type) and chz.is_chz(value)
        namespace[key] = chz.field(blueprint_unspecified=resolve(value)) if factory else value  # type: ignore[arg-type]
    return chz.chz(type(base.__name__, (cast(type, base),), namespace))  # type: ignore[no-any-return]


class NamedChoice(chz.factories.MetaFactory):
    """A meta-factory whose factories are looked up by name (see the module docstring).

    Args:
        key: the command-line key, for messages (`dataset`).
        names: short name -> factory or "module:attribute".
        default: the name used when the key is not given; None makes the key required.
        other: for a value that is not a name, the factory it means (or None when it means nothing).
        other_help: what `other` accepts, for the error message ("a .jsonl file").
    """

    def __init__(self, key: str, names: Mapping[str, Entry], default: str | None = None,
                 other: OtherRule | None = None, other_help: str = "") -> None:
        super().__init__()
        if default is not None and default not in names:
            raise ValueError(f"default {default!r} is not one of {sorted(names)}")
        self.key, self.names, self.default = key, dict(names), default
        self.other, self.other_help = other, other_help

    def __repr__(self) -> str:
        return f"NamedChoice({self.key}={'|'.join(self.names)})"

    def unspecified_factory(self) -> Factory | None:
        return resolve(self.names[self.default]) if self.default is not None else None

    def from_string(self, factory: str) -> Factory:
        if factory in self.names:
            return resolve(self.names[factory])
        found = self.other(factory) if self.other is not None else None
        if found is not None:
            return found
        also = f", or {self.other_help}" if self.other_help else ""
        raise ConfigurationError(f"{self.key}={factory} is not one of {', '.join(self.names)}{also}.")

    def perform_cast(self, value: str) -> Any:
        # A name stands for a factory, never for a value: chz then builds it with its own keys
        # (and says which required ones are missing) instead of calling it without arguments.
        raise chz.tiepin.CastError(f"{self.key}={value} names a factory, not a value")
