"""`NamedChoice` / `Preset`: a polymorphic field chosen by short name, with overridable preset defaults."""

import chz
import pytest

from recipes_lib.choices import NamedChoice, Preset, resolve
from recipes_lib.exceptions import ConfigurationError


@chz.chz
class Inner:
    size: int = 1
    name: str = "inner"


@chz.chz
class Base:
    inner: Inner
    count: int = 2


@chz.chz
class Other(Base):
    flag: bool = False


TABLE = {"base": Preset(Base, count=5, inner=Preset(Inner, size=7)), "other": f"{__name__}:Other"}


def _from_path(value: str) -> object:
    return resolve(Preset(Other, flag=True)) if value.endswith(".txt") else None


@chz.chz
class Entry:
    thing: Base = chz.field(meta_factory=NamedChoice("thing", TABLE, default="base", other=_from_path,
                                                     other_help="a .txt file"))


def make(*argv: str) -> Entry:
    return chz.Blueprint(Entry).make_from_argv(list(argv))


def test_the_default_name_and_its_preset_values() -> None:
    entry = make()
    assert type(entry.thing).__name__ == "Base" and isinstance(entry.thing, Base)
    assert (entry.thing.count, entry.thing.inner.size, entry.thing.inner.name) == (5, 7, "inner")


def test_preset_values_stay_overridable_down_to_nested_fields() -> None:
    entry = make("thing.count=9", "thing.inner.size=3")
    assert (entry.thing.count, entry.thing.inner.size) == (9, 3)


def test_a_name_a_module_attribute_and_the_other_rule() -> None:
    assert type(make("thing=other").thing) is Other
    by_path = make("thing=notes.txt").thing
    assert isinstance(by_path, Other) and by_path.flag  # type: ignore[attr-defined]


def test_an_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"thing=oter is not one of base, other, or a \.txt file\."):
        make("thing=oter")


def test_a_preset_of_a_missing_field_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="has no field 'cont'"):
        resolve(Preset(Base, cont=1))
    with pytest.raises(ValueError, match="default 'x' is not one of"):
        NamedChoice("thing", TABLE, default="x")
