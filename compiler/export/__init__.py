"""Exporters of the tensor IR to other compilers' formats: MLIR text (`mlir.py`)."""

from reverie.compiler.export.mlir import (
    MlirFunction,
    export_function,
    export_mlir,
    export_mlir_module,
    mlir_module,
)

__all__ = ["MlirFunction", "export_function", "export_mlir", "export_mlir_module", "mlir_module"]
