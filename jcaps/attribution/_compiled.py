"""Compiled once: an eager call of a method runs one jitted program, reused by later calls of the
same method on the same model, options and shapes.

The model f is split as equinox's `filter_jit` splits a module: its array leaves (the parameters
of an NNX or Equinox module, the arrays of a `jax.tree_util.Partial` over linen's `apply`) are
inputs of the program, so a later call with new parameter values computes with them; the rest of
f (its functions, its structure) keys the cache. A function that reaches arrays f's leaves do not
show (a closure over parameters, a global array, a `functools.partial` or bound method holding
them) could change them unseen, so its calls are never served a cached program: they run as
before, op by op, compiling as they go (pass such arrays as a pytree, `jax.tree_util.Partial(apply,
params)`, or as the methods' `args`).

Checks that read values (a target outside [0, C), a group id out of range) run on the concrete
arguments before the program, and the warning for examples whose f is not finite is given after
it, as an eager call gives them."""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

from jcaps.attribution._deferred import DeferredModule

if TYPE_CHECKING:
    import jax
    import numpy as np

    from jcaps.attribution import _arguments as arguments
else:  # loaded by the first method called: the table of methods alone loads no JAX
    jax = DeferredModule("jax")
    np = DeferredModule("numpy")
    arguments = DeferredModule("jcaps.attribution._arguments")


def _load_modules() -> None:
    """Replaces the deferred modules by the modules once a method runs: a call reads them often."""
    global jax, np, arguments
    if isinstance(jax, DeferredModule):
        import jax as jax_module
        import numpy as numpy_module

        from jcaps.attribution import _arguments as arguments_module

        jax, np, arguments = jax_module, numpy_module, arguments_module


# The arguments of a method that are arrays (inputs of the program); the others are its options.
_ARRAY_ARGUMENTS = ("x", "target", "mask", "args", "key", "baseline", "groups")
# How many compiled programs are kept (each holds its f's static parts alive).
_CACHE_SIZE = 64
_cache: collections.OrderedDict = collections.OrderedDict()
# The most plain values a function's closures and globals may hold and still key a program (a
# function reading a large table is run as before rather than hashed at every call).
_MOST_VALUES = 256
_lock = threading.Lock()


def compiled_once(*, uses_baseline: bool | None) -> Callable[[Callable], Callable]:
    """Decorates a method of the table's signature `function(f, x, target, *, mask, args, key,
    baseline, ..., **options)`; `uses_baseline`: its warning names f at the baseline too (None:
    a function of f's outputs, which warns of nothing)."""

    def decorate(function: Callable) -> Callable:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def method(f, x, target, **keywords):
            _load_modules()
            bound = signature.bind(f, x, target, **keywords)
            arrays = {name: value for name, value in bound.arguments.items() if name in _ARRAY_ARGUMENTS}
            options = {
                name: value for name, value in bound.arguments.items() if name not in _ARRAY_ARGUMENTS and name != "f"
            }
            split = _split_model(f) if callable(f) and _array_like(arrays) else None
            if split is None or _traced((arrays, split[0])) or not _hashable(options):
                return function(f, **arrays, **options)
            leaves, static = split
            program = _program(function, static, tuple(sorted(options.items())))
            _check_values(f, static, arrays)
            scores = program(leaves, arrays)
            if uses_baseline is not None and not isinstance(scores, jax.core.Tracer):  # inside a caller's trace
                _warn_not_finite(function.__name__, scores, np.shape(arrays["x"])[0], uses_baseline)
            return scores

        return method

    return decorate


def _program(function: Callable, static, options: tuple) -> Callable:
    """The jitted program of `function` for f's static parts and these options (cached)."""
    cache_key = (function, static, options)
    with _lock:
        if cache_key in _cache:
            _cache.move_to_end(cache_key)
            return _cache[cache_key]
    treedef, static_leaves, _ = static

    def run(arrays_of_f, arrays):
        model = _rebuilt(treedef, static_leaves, arrays_of_f)
        return function(model, **arrays, **dict(options))

    program = jax.jit(run)
    with _lock:
        _cache[cache_key] = program
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return program


@functools.cache
def _array_types() -> tuple[type, ...]:
    return (np.ndarray, jax.Array, np.generic)


def _is_array(value) -> bool:
    return isinstance(value, _array_types())


def _split_model(f):
    """(f's array leaves, (its tree structure, its leaves with None for each array, the plain
    values its functions read)), or None when f cannot be cached: a part of it is unhashable or reaches
    arrays it does not show. The plain values (numbers, strings) a closure or a global holds are
    part of the key, so a changed one compiles anew."""
    leaves, treedef = jax.tree_util.tree_flatten(f)
    arrays = [leaf for leaf in leaves if _is_array(leaf)]
    static_leaves = tuple(None if _is_array(leaf) else leaf for leaf in leaves)  # None is never a leaf
    seen: set[int] = set()
    values: list = []
    reached = [leaf for leaf in static_leaves if leaf is not None]
    if isinstance(f, jax.tree_util.Partial):
        reached.append(f.func)
    if any(_reaches_arrays(leaf, seen, values) for leaf in reached) or len(values) > _MOST_VALUES:
        return None
    static = (treedef, static_leaves, tuple(values))
    try:
        hash(static)
    except TypeError:
        return None
    return arrays, static


def _rebuilt(treedef, static_leaves: tuple, arrays: list):
    """f again from its structure, its static leaves and its (traced) array leaves in order."""
    dynamic = iter(arrays)
    return jax.tree_util.tree_unflatten(treedef, [next(dynamic) if leaf is None else leaf for leaf in static_leaves])


_SKIPPED = (types.ModuleType, type, types.BuiltinFunctionType)
_VALUES = (str, bytes, int, float, bool, complex, type(None))


def _reaches_arrays(value, seen: set[int], values: list, depth: int = 0) -> bool:
    """Whether `value` (a function, a partial, a bound method, an object) reaches arrays that are
    not leaves of f: in a closure, a global its code names, a default, a partial's arguments or
    an object's attributes. Looked at a few levels deep; the plain values met on the way are
    added to `values`."""
    if isinstance(value, _VALUES):
        values.append(value)
        return False
    if id(value) in seen or depth > 4 or isinstance(value, _SKIPPED):
        return False
    seen.add(id(value))
    deeper = functools.partial(_reaches_arrays, seen=seen, values=values, depth=depth + 1)
    if _is_array(value):
        return True
    if isinstance(value, (functools.partial, jax.tree_util.Partial)):
        return any(deeper(v) for v in (value.func, *value.args, *value.keywords.values()))
    if isinstance(value, types.MethodType):
        return deeper(value.__func__) or deeper(value.__self__)
    if isinstance(value, types.FunctionType):
        cells = [cell.cell_contents for cell in value.__closure__ or () if _filled(cell)]
        defaults = [*(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values()]
        named = [value.__globals__[name] for name in sorted(_names(value.__code__)) if name in value.__globals__]
        return any(deeper(v) for v in (*cells, *defaults, *named))
    wrapped = getattr(value, "__wrapped__", None)
    if wrapped is not None:
        return deeper(wrapped)
    if isinstance(value, (list, tuple, dict)) or _is_pytree_node(value):
        return any(_is_array(leaf) or deeper(leaf) for leaf in jax.tree_util.tree_leaves(value) if leaf is not value)
    attributes = getattr(value, "__dict__", None)
    return isinstance(attributes, dict) and any(deeper(v) for v in attributes.values())


def _is_pytree_node(value) -> bool:
    return jax.tree_util.tree_leaves(value) != [value]


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # a cell not yet assigned
        return False
    return True


def _names(code: types.CodeType) -> set[str]:
    """The global names a code object and the code nested in it (lambdas, comprehensions) read."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _array_like(arrays: dict) -> bool:
    """Whether every argument the program takes is an array, a number or None (anything else is
    left to the method's own checks, which name it)."""
    return all(_is_array(leaf) or isinstance(leaf, (bool, int, float)) for leaf in jax.tree_util.tree_leaves(arrays))


def _traced(arrays) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(arrays))


def _hashable(options: dict) -> bool:
    try:
        hash(tuple(sorted(options.items())))
    except TypeError:
        return False
    return True


_classes: dict = {}


def _check_values(f, static, arrays: dict) -> None:
    """The checks that read values, on the concrete arguments (inside the program they are
    traced): the target's classes and the groups' ids, in NumPy. A shape at fault is left to the
    program, whose checks name it."""
    x, target = arrays["x"], np.asarray(arrays["target"])
    if np.ndim(x) < 2:
        return
    batch, length = np.shape(x)[:2]
    groups = arrays.get("groups")
    if groups is not None and np.shape(groups) == (batch, length):
        values = np.asarray(groups)
        if np.issubdtype(values.dtype, np.integer):
            arguments.checked_groups(values, batch, length)
    shapes = tuple(
        (np.shape(a), str(getattr(a, "dtype", type(a).__name__))) for a in (x, *tuple(arrays.get("args", ())))
    )
    cache_key = (static, shapes)
    if cache_key not in _classes:  # C, read from f's output shape once for these shapes
        try:
            output = jax.eval_shape(f, x, *tuple(arrays.get("args", ())))
            classes = int(output.shape[1])
        except Exception:  # noqa: BLE001 - the program's own checks say what is wrong
            return
        with _lock:
            _classes[cache_key] = classes
            if len(_classes) > _CACHE_SIZE:
                _classes.pop(next(iter(_classes)))
    if np.issubdtype(target.dtype, np.integer):
        arguments.checked_target_range(target, _classes[cache_key])


def _warn_not_finite(name: str, scores, batch: int, uses_baseline: bool) -> None:
    """The warning an eager method gives for the examples whose scores are NaN throughout (f
    not finite at x, or at the baseline)."""
    values = np.asarray(scores)
    unexplained = np.all(np.isnan(values), axis=-1).reshape(batch, -1).any(axis=1)
    if unexplained.any():
        where = "f(x) or f at the baseline" if uses_baseline else "f(x)"
        warnings.warn(
            f"{name}: {where} is not finite for {int(unexplained.sum())} of {batch} examples: their scores are NaN",
            RuntimeWarning,
            stacklevel=3,
        )
