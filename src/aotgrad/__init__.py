"""aotgrad: ahead-of-time forward and backward capture with exact eager semantics.

Besides its own API, the names torch's AOT Autograd users import are here with torch's
signatures and meaning (``compiled_function``, ``aot_export_module``, ``make_boxed_compiler``,
``default_partition``...); docs/user-guide.md lists them.
"""

from . import compilers, partition
from .api import aot_function
from .backend import backend
from .compilers import (
    default_decompositions,
    make_boxed_compiler,
    make_boxed_func,
    nop,
    print_compile,
)
from .config import AotConfig
from .context import (
    get_aot_compilation_context,
    get_aot_graph_name,
    get_graph_being_compiled,
    set_model_name,
)
from .core.dispatch import AotFunction
from .core.metadata import InputInfo, OutputInfo, OutputType, ViewAndMutationMetadata
from .core.signature import ForwardOutput, GraphSignature
from .errors import AotgradCompileError
from .explain import ExplainReport, explain
from .export import (
    BackwardSignature,
    ExportGraphSignature,
    aot_export_joint_simple,
    aot_export_module,
)
from .module import AOTModule, aot_module, aot_module_simplified
from .partition import default_partition, min_cut_rematerialization_partition

#: torch's (functorch's) names for :func:`aot_function` and :func:`aot_module`
compiled_function = aot_function
compiled_module = aot_module

__all__ = [
    "AOTModule",
    "AotConfig",
    "AotFunction",
    "AotgradCompileError",
    "BackwardSignature",
    "ExplainReport",
    "ExportGraphSignature",
    "ForwardOutput",
    "GraphSignature",
    "InputInfo",
    "OutputInfo",
    "OutputType",
    "ViewAndMutationMetadata",
    "aot_export_joint_simple",
    "aot_export_module",
    "aot_function",
    "aot_module",
    "aot_module_simplified",
    "backend",
    "compiled_function",
    "compiled_module",
    "compilers",
    "default_decompositions",
    "default_partition",
    "explain",
    "get_aot_compilation_context",
    "get_aot_graph_name",
    "get_graph_being_compiled",
    "make_boxed_compiler",
    "make_boxed_func",
    "min_cut_rematerialization_partition",
    "nop",
    "partition",
    "print_compile",
    "set_model_name",
]
__version__ = "0.1.0"
