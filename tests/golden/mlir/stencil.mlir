// @conv1d_same: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).
func.func @conv1d_same(%x: memref<?x?xf32, strided<[?, ?], offset: ?>>, %kernel: memref<?xf32, strided<[?], offset: ?>>, %result0: memref<?x?xf32>, %status: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %0 = memref.dim %x, %c0 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %B = arith.index_cast %0 : index to i64
  %c1 = arith.constant 1 : index
  %1 = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %L = arith.index_cast %1 : index to i64
  %2 = memref.dim %kernel, %c0 : memref<?xf32, strided<[?], offset: ?>>
  %K = arith.index_cast %2 : index to i64
  %3 = arith.index_cast %B : i64 to index
  %4 = arith.maxsi %3, %c0 : index
  %5 = arith.index_cast %L : i64 to index
  %6 = arith.maxsi %5, %c0 : index
  %11 = arith.index_cast %K : i64 to index
  %12 = arith.maxsi %11, %c0 : index
  %cst_f64_2 = arith.constant 0x0000000000000000 : f64
  %c2_i64 = arith.constant 2 : i64
  %cst_f32_4 = arith.constant 0x00000000 : f32
  %7 = memref.alloc(%4, %6) : memref<?x?xf32> loc("stencil.rv":3:5)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} outs(%7 : memref<?x?xf32>) {
  ^bb0(%8: f32):
    %9 = linalg.index 0 : index loc("stencil.rv":3:5)
    %10 = linalg.index 1 : index loc("stencil.rv":3:5)
    %15 = scf.for %13 = %c0 to %12 step %c1 iter_args(%14 = %cst_f64_2) -> (f64) {
      %16 = arith.index_cast %9 : index to i64 loc("stencil.rv":3:5)
      %17 = arith.index_cast %10 : index to i64 loc("stencil.rv":3:5)
      %18 = arith.index_cast %13 : index to i64 loc("stencil.rv":3:5)
      %19 = arith.addi %17, %18 : i64 loc("stencil.rv":3:39)
      %20 = arith.floordivsi %K, %c2_i64 : i64 loc("stencil.rv":3:47)
      %21 = arith.subi %19, %20 : i64 loc("stencil.rv":3:39)
      %22 = arith.index_cast %16 : i64 to index loc("stencil.rv":3:34)
      %23 = arith.index_cast %21 : i64 to index loc("stencil.rv":3:34)
      %24 = arith.cmpi sge, %23, %c0 : index loc("stencil.rv":3:34)
      %25 = arith.cmpi slt, %23, %6 : index loc("stencil.rv":3:34)
      %26 = arith.andi %24, %25 : i1 loc("stencil.rv":3:34)
      %27 = scf.if %26 -> (f32) {
        %28 = memref.load %x[%22, %23] : memref<?x?xf32, strided<[?, ?], offset: ?>> loc("stencil.rv":3:34)
        scf.yield %28 : f32
      } else {
        scf.yield %cst_f32_4 : f32
      } loc("stencil.rv":3:34)
      %29 = arith.index_cast %18 : i64 to index loc("stencil.rv":3:57)
      %30 = memref.load %kernel[%29] : memref<?xf32, strided<[?], offset: ?>> loc("stencil.rv":3:57)
      %31 = arith.mulf %27, %30 : f32 loc("stencil.rv":3:34)
      %32 = arith.extf %31 : f32 to f64 loc("stencil.rv":3:5)
      %33 = arith.addf %14, %32 : f64 loc("stencil.rv":3:5)
      scf.yield %33 : f64
    } loc("stencil.rv":3:5)
    %34 = arith.truncf %15 : f64 to f32 loc("stencil.rv":3:5)
    linalg.yield %34 : f32
  } loc("stencil.rv":3:5)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%7 : memref<?x?xf32>) outs(%result0 : memref<?x?xf32>) {
  ^bb0(%35: f32, %36: f32):
    linalg.yield %35 : f32
  } loc("stencil.rv":2:1)
  memref.dealloc %7 : memref<?x?xf32> loc("stencil.rv":2:1)
  return
} loc("stencil.rv":2:1)

// Records the first run-time error of a call: {1, value, bound, site} in %status.
func.func private @reverie_fail(%status: memref<4xi64>, %value: i64, %bound: i64, %site: i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %zero = arith.constant 0 : i64
  %one = arith.constant 1 : i64
  %failed = memref.load %status[%c0] : memref<4xi64>
  %first = arith.cmpi eq, %failed, %zero : i64
  scf.if %first {
    memref.store %one, %status[%c0] : memref<4xi64>
    memref.store %value, %status[%c1] : memref<4xi64>
    memref.store %bound, %status[%c2] : memref<4xi64>
    memref.store %site, %status[%c3] : memref<4xi64>
  }
  return
}
