import pytest

import posenc
from posenc.schemes import (
    HOOKS,
    PositionalScheme,
    build_scheme,
    get_scheme_class,
    register_scheme,
)


def test_foundation_schemes_are_registered():
    assert {"none", "sinusoidal", "learned"} <= set(posenc.available_schemes())


@pytest.mark.parametrize("name", posenc.available_schemes())
def test_build_by_name(name):
    scheme = build_scheme(name, d_model=8, num_heads=2)
    assert isinstance(scheme, PositionalScheme) and scheme.name == name and scheme.head_dim == 4


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match=r"unknown positional scheme 'rotary'; known schemes: 'none'"):
        get_scheme_class("rotary")


def test_scheme_options_are_checked():
    with pytest.raises(ValueError, match="layout must be one of"):
        build_scheme("sinusoidal", d_model=8, num_heads=2, layout="half")
    with pytest.raises(ValueError, match="d_model must be even"):
        build_scheme("sinusoidal", d_model=9, num_heads=1)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        build_scheme("learned", d_model=8, num_heads=2, max_len=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        build_scheme("none", d_model=8, num_heads=2, bogus=1)
    with pytest.raises(ValueError, match="d_model must be divisible by num_heads"):
        build_scheme("none", d_model=8, num_heads=3)


def test_register_rejects_bad_classes():
    with pytest.raises(TypeError, match="only PositionalScheme subclasses"):
        register_scheme(int)

    class Nameless(PositionalScheme):
        pass

    with pytest.raises(ValueError, match="empty name"):
        register_scheme(Nameless)

    class Clash(PositionalScheme):
        name = "sinusoidal"

    with pytest.raises(ValueError, match="already registered"):
        register_scheme(Clash)


@pytest.mark.parametrize("name", posenc.available_schemes())
def test_declared_hooks_are_the_overridden_methods(name):
    """A scheme's ``hooks`` declaration is what the model and the attention read; it
    must name exactly the plug-in methods the class overrides, so it cannot drift."""
    cls = get_scheme_class(name)
    overridden = {m for m in HOOKS if getattr(cls, m) is not getattr(PositionalScheme, m)}
    assert cls.hooks == overridden, f"{name}: declares {sorted(cls.hooks)}, overrides {sorted(overridden)}"
    assert cls.needs_attention_weights == ("value_term" in overridden)


def test_unknown_hook_names_are_refused():
    with pytest.raises(ValueError, match=r"Typo.hooks names unknown plug-in points \['bias'\]"):
        class Typo(PositionalScheme):
            hooks = frozenset({"bias"})


def test_the_registry_lists_the_chapters_schemes_in_the_books_order():
    """The chapters' tables and asserts follow available_schemes()' order, which is the
    order posenc/__init__.py imports the scheme modules: a module that imports another
    scheme's module early (layout.py once imported rope for its layout names) moves it."""
    import posenc

    assert posenc.chapter_schemes() == (
        "none", "alibi", "learned", "sinusoidal", "shaw", "transformer_xl", "t5",
        "deberta", "rope", "xpos",
    )
