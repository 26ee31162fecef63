"""aotgrad: ahead-of-time forward and backward capture with exact eager semantics."""

from . import compilers, partition
from .api import aot_function
from .backend import backend
from .config import AotConfig
from .dispatch import AotFunction
from .errors import AotgradCompileError
from .metadata import InputInfo, OutputInfo, OutputType, ViewAndMutationMetadata
from .module import AOTModule, aot_module, aot_module_simplified
from .signature import ForwardOutput, GraphSignature

__all__ = [
    "AOTModule",
    "AotConfig",
    "AotFunction",
    "AotgradCompileError",
    "ForwardOutput",
    "GraphSignature",
    "InputInfo",
    "OutputInfo",
    "OutputType",
    "ViewAndMutationMetadata",
    "aot_function",
    "aot_module",
    "aot_module_simplified",
    "backend",
    "compilers",
    "partition",
]
__version__ = "0.1.0"
