// @loss: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).
func.func @loss(%x: memref<?x?xf32, strided<[?, ?], offset: ?>>, %w: memref<?xf32, strided<[?], offset: ?>>, %result0: memref<f32>, %status: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %0 = memref.dim %x, %c0 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %N = arith.index_cast %0 : index to i64
  %c1 = arith.constant 1 : index
  %1 = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %D = arith.index_cast %1 : index to i64
  %2 = arith.index_cast %N : i64 to index
  %3 = arith.maxsi %2, %c0 : index
  %4 = arith.index_cast %D : i64 to index
  %5 = arith.maxsi %4, %c0 : index
  %cst_f64_2 = arith.constant 0x0000000000000000 : f64
  %28 = arith.muli %D, %N : i64
  %6 = memref.alloc(%3, %5) : memref<?x?xf32> loc("elementwise.rv":3:22)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%w : memref<?xf32, strided<[?], offset: ?>>) outs(%6 : memref<?x?xf32>) {
  ^bb0(%7: f32, %8: f32):
    linalg.yield %7 : f32
  } loc("elementwise.rv":3:22)
  %9 = memref.alloc(%3, %5) : memref<?x?xf32> loc("elementwise.rv":3:22)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %6 : memref<?x?xf32, strided<[?, ?], offset: ?>>, memref<?x?xf32>) outs(%9 : memref<?x?xf32>) {
  ^bb0(%10: f32, %11: f32, %12: f32):
    %13 = arith.mulf %10, %11 : f32 loc("elementwise.rv":3:22)
    linalg.yield %13 : f32
  } loc("elementwise.rv":3:22)
  memref.dealloc %6 : memref<?x?xf32> loc("elementwise.rv":3:22)
  %14 = memref.alloc(%3, %5) : memref<?x?xf32> loc("elementwise.rv":3:17)
  linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%9 : memref<?x?xf32>) outs(%14 : memref<?x?xf32>) {
  ^bb0(%15: f32, %16: f32):
    %17 = math.tanh %15 : f32 loc("elementwise.rv":3:17)
    linalg.yield %17 : f32
  } loc("elementwise.rv":3:17)
  memref.dealloc %9 : memref<?x?xf32> loc("elementwise.rv":3:17)
  %20 = scf.for %18 = %c0 to %3 step %c1 iter_args(%19 = %cst_f64_2) -> (f64) {
    %23 = scf.for %21 = %c0 to %5 step %c1 iter_args(%22 = %19) -> (f64) {
      %24 = memref.load %14[%18, %21] : memref<?x?xf32> loc("elementwise.rv":3:12)
      %25 = arith.extf %24 : f32 to f64 loc("elementwise.rv":3:12)
      %26 = arith.addf %22, %25 : f64 loc("elementwise.rv":3:12)
      scf.yield %26 : f64
    } loc("elementwise.rv":3:12)
    scf.yield %23 : f64
  } loc("elementwise.rv":3:12)
  %27 = arith.truncf %20 : f64 to f32 loc("elementwise.rv":3:12)
  memref.dealloc %14 : memref<?x?xf32> loc("elementwise.rv":3:12)
  %29 = arith.sitofp %28 : i64 to f32 loc("elementwise.rv":3:12)
  %30 = arith.divf %27, %29 : f32 loc("elementwise.rv":3:12)
  memref.store %30, %result0[] : memref<f32> loc("elementwise.rv":2:1)
  return
} loc("elementwise.rv":2:1)

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
