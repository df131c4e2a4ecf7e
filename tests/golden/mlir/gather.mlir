// @pick: Reverie in upstream MLIR (func, arith, math, memref, scf, linalg).
func.func @pick(%z: memref<?x?xf32, strided<[?, ?], offset: ?>>, %labels: memref<?xi64, strided<[?], offset: ?>>, %result0: memref<?xf32>, %status: memref<4xi64>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %0 = memref.dim %z, %c0 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %N = arith.index_cast %0 : index to i64
  %c1 = arith.constant 1 : index
  %1 = memref.dim %z, %c1 : memref<?x?xf32, strided<[?, ?], offset: ?>>
  %C = arith.index_cast %1 : index to i64
  %2 = arith.index_cast %N : i64 to index
  %3 = arith.maxsi %2, %c0 : index
  %12 = arith.index_cast %C : i64 to index
  %13 = arith.maxsi %12, %c0 : index
  %true = arith.constant true
  %c0_i64 = arith.constant 0 : i64
  %cst_f32_4 = arith.constant 0x00000000 : f32
  %4 = memref.alloc(%3) : memref<?xf32> loc("gather.rv":3:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} outs(%4 : memref<?xf32>) {
  ^bb0(%5: f32):
    %6 = linalg.index 0 : index loc("gather.rv":3:5)
    %7 = arith.index_cast %6 : index to i64 loc("gather.rv":3:5)
    %8 = arith.index_cast %7 : i64 to index loc("gather.rv":3:26)
    %9 = memref.load %labels[%8] : memref<?xi64, strided<[?], offset: ?>> loc("gather.rv":3:26)
    %10 = arith.index_cast %7 : i64 to index loc("gather.rv":3:21)
    %11 = arith.index_cast %9 : i64 to index loc("gather.rv":3:21)
    %14 = arith.cmpi sge, %11, %c0 : index loc("gather.rv":3:21)
    %15 = arith.cmpi slt, %11, %13 : index loc("gather.rv":3:21)
    %16 = arith.andi %14, %15 : i1 loc("gather.rv":3:21)
    %17 = arith.index_cast %11 : index to i64 loc("gather.rv":3:21)
    %18 = arith.xori %16, %true : i1 loc("gather.rv":3:21)
    scf.if %18 {
      func.call @reverie_fail(%status, %17, %C, %c0_i64) : (memref<4xi64>, i64, i64, i64) -> () loc("gather.rv":3:21)
    } loc("gather.rv":3:21)
    %19 = scf.if %16 -> (f32) {
      %20 = memref.load %z[%10, %11] : memref<?x?xf32, strided<[?, ?], offset: ?>> loc("gather.rv":3:21)
      scf.yield %20 : f32
    } else {
      scf.yield %cst_f32_4 : f32
    } loc("gather.rv":3:21)
    linalg.yield %19 : f32
  } loc("gather.rv":3:5)
  linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%4 : memref<?xf32>) outs(%result0 : memref<?xf32>) {
  ^bb0(%21: f32, %22: f32):
    linalg.yield %21 : f32
  } loc("gather.rv":2:1)
  memref.dealloc %4 : memref<?xf32> loc("gather.rv":2:1)
  return
} loc("gather.rv":2:1)

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
